"""JAX arrays to and from ndarrays. Both directions copy (jax arrays are immutable, so they never view an
ndarray's memory); float64 crosses only with jax's x64 mode on, never silently narrowed to float32."""
import numpy as np

from ..errors import ArgumentError
from . import host


def jax():
    import jax as module   # imported on first use: spvad imports without jax
    return module


def check_representable(np_dtype, who):
    """JAX without x64 mode turns float64 into float32: refuse instead of narrowing silently."""
    if np.dtype(np_dtype) == np.float64 and not jax().config.jax_enable_x64:
        raise ArgumentError(f"{who}: f64 values need JAX's 64-bit mode, which is off (JAX would turn them into "
                            "float32); call jax.config.update('jax_enable_x64', True) first")


def host_array(x, who):
    """The values of jax array `x` as a numpy array on the host."""
    jx = jax()
    if isinstance(x, jx.core.Tracer):
        raise ArgumentError(f"{who}: got a traced jax value (inside jax.jit, jax.grad or jax.vmap), which has "
                            "no values yet; make the function an @sp.jax_function instead")
    if not isinstance(x, jx.Array):
        raise ArgumentError(f"{who}: expected a jax.Array, got {type(x).__name__}")
    if x.dtype.name in ("float16", "bfloat16"):
        raise ArgumentError(f"{who}: a {x.dtype} jax array cannot cross to spvad (its arrays hold "
                            f"{host.SUPPORTED}); convert it with x.astype(jnp.float32)")
    return np.asarray(x)   # a host copy when x lives on an accelerator


def from_jax(x, needs_grad=False):
    """A new ndarray with x's values, dtype and shape (as from_numpy converts)."""
    who = "sp.from_jax"
    return host.to_ndarray(host_array(x, who), bool(needs_grad), who)


def to_jax(a):
    """`a.to_jax()`: a jax.Array holding a copy of a's values (storage shape), after pending launches."""
    check_representable(host.host_dtype(a), "a.to_jax()")
    return jax().numpy.asarray(a.to_numpy())

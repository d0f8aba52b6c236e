"""Names users call inside kernels (math, vectors, casts, atomics, static, ndrange) and the `Array` annotation.

Each is an ordinary Python function too (numpy semantics), tagged with `_spvad_builtin` so the frontend
recognises it by identity and compiles it instead of calling it.
"""
import numpy as np


class Array:
    """Annotation for an ndarray kernel argument: `def k(x: sp.Array)`; specialised per dtype and ndim."""


class Template:
    """What `sp.template()` returns: the annotation of a parameter bound at compile time (Taichi's
    `ti.template()`). An ndarray passed there is bound as an `sp.Array` argument is; any other value (a
    number, a tuple, a @sp.func, ...) is a compile-time constant of the kernel, specialised per value."""

    def __repr__(self):
        return "sp.template()"


def template():
    """`def k(field: sp.template(), scale: sp.template())`: see Template."""
    return Template()


def _builtin(name, fn):
    fn.__name__ = name
    fn._spvad_builtin = name
    return fn


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _power(x, y):
    """C99 pow, as kernels compute it: numpy's power ufunc on arrays (on scalars, and for a scalar exponent
    0.5, numpy takes sqrt: -0.0 at -0.0, NaN at -inf)."""
    x, y = np.asarray(x), np.asarray(y)
    shape = np.broadcast_shapes(x.shape, y.shape)
    return np.power(np.broadcast_to(x, shape).reshape(-1), np.broadcast_to(y, shape).reshape(-1)).reshape(shape)[()]


_NUMPY_UNARY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
                "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "exp": np.exp,
                "log": np.log, "log2": np.log2, "exp2": np.exp2, "log10": np.log10, "expm1": np.expm1,
                "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": _rsqrt, "floor": np.floor,
                "ceil": np.ceil, "round": np.rint, "abs": np.abs, "sign": np.sign}
for _name, _fn in _NUMPY_UNARY.items():
    globals()[_name] = _builtin(_name, lambda x, _f=_fn: _f(x))

atan2 = _builtin("atan2", lambda y, x: np.arctan2(y, x))
hypot = _builtin("hypot", lambda x, y: np.hypot(x, y))
fmod = _builtin("fmod", lambda x, y: np.fmod(x, y))   # C fmod: the sign of x (Python's % takes y's)
pow = _builtin("pow", _power)
min = _builtin("min", lambda *xs: np.minimum.reduce(xs))
max = _builtin("max", lambda *xs: np.maximum.reduce(xs))
clamp = _builtin("clamp", lambda x, lo, hi: np.clip(x, lo, hi))
select = _builtin("select", lambda c, a, b: np.where(c, a, b))
cast = _builtin("cast", lambda v, dtype: dtype.np.type(v))


# vectors (outside kernels: numpy arrays whose last axis holds the components)
def _length(v):
    v = np.asarray(v)
    return np.sqrt(np.sum(v * v, axis=-1))[()]


def _cross(a, b):
    """3-vectors: the cross product; 2-vectors: the scalar a0 b1 - a1 b0 (as in kernels and Taichi)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape[-1] == b.shape[-1] == 2:
        return (a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0])[()]
    return np.cross(a, b)


dot = _builtin("dot", lambda a, b: np.sum(np.asarray(a) * np.asarray(b), axis=-1)[()])
cross = _builtin("cross", _cross)
length = _builtin("length", lambda v, eps=0: np.sqrt(np.sum(np.asarray(v) * np.asarray(v), axis=-1) + eps)[()])
normalize = _builtin("normalize", lambda v, eps=0: np.asarray(v) / np.expand_dims(_length(v) + eps, -1))


# matrices (outside kernels: numpy arrays whose last two axes hold the rows and columns)
def _svd(a):
    """Taichi's convention: A = U @ S @ V.T with U, V rotations; the last singular value takes det's sign."""
    a = np.asarray(a, dtype=np.result_type(a, np.float32))
    u, s, vt = np.linalg.svd(a)
    v = np.swapaxes(vt, -1, -2).copy()
    for m, flip in ((u, np.linalg.det(u) < 0), (v, np.linalg.det(v) < 0)):
        m[..., :, -1] = np.where(flip[..., None], -m[..., :, -1], m[..., :, -1])
        s[..., -1] = np.where(flip, -s[..., -1], s[..., -1])
    sigma = np.zeros_like(a)
    idx = np.arange(a.shape[-1])
    sigma[..., idx, idx] = s
    return u, sigma, v


def _polar_decompose(a):
    """A = R @ S with R a rotation and S symmetric."""
    u, sigma, v = _svd(a)
    vt = np.swapaxes(v, -1, -2)
    return u @ vt, v @ sigma @ vt


transpose = _builtin("transpose", lambda a: np.swapaxes(np.asarray(a), -1, -2))
trace = _builtin("trace", lambda a: np.trace(np.asarray(a), axis1=-2, axis2=-1)[()])
determinant = _builtin("determinant", lambda a: np.linalg.det(np.asarray(a))[()])
inverse = _builtin("inverse", lambda a: np.linalg.inv(np.asarray(a)))
outer = _builtin("outer", lambda u, v: np.einsum("...i,...j->...ij", np.asarray(u), np.asarray(v)))
svd = _builtin("svd", _svd)
polar_decompose = _builtin("polar_decompose", _polar_decompose)


def _host_only(name):
    def fn(*args, **kwargs):
        raise TypeError(f"sp.{name} can only be used inside a kernel")
    return _builtin(name, fn)


atomic_add = _host_only("atomic_add")
atomic_max = _host_only("atomic_max")
atomic_min = _host_only("atomic_min")


def static(value):
    """Inside kernels: evaluate at compile time (`if sp.static(c)`, `for i in sp.static(range(3))`)."""
    return value


static._spvad_builtin = "static"


def ndrange(*extents):
    """`for i, j in sp.ndrange(n, m)`: a parallel multi-dimensional loop at the top of a kernel."""
    ranges = [range(e) if isinstance(e, int) else range(*e) for e in extents]
    import itertools
    return itertools.product(*ranges)


ndrange._spvad_builtin = "ndrange"

__all__ = ["Array", "template", "dot", "cross", "length", "normalize", "transpose", "trace", "determinant", "inverse",
           "outer", "svd", "polar_decompose",
           "atan2", "hypot", "fmod", "pow", "min", "max", "clamp", "select", "cast", "atomic_add", "atomic_max",
           "atomic_min", "static", "ndrange", *_NUMPY_UNARY]

# random numbers (frontend/random_numbers.py): inside kernels only, where sp.init's random_seed and the launch
# decide them
random = _host_only("random")
randn = _host_only("randn")
__all__ += ["random", "randn"]

# derivatives of @sp.func functions inside kernels (frontend/derivatives.py); sp.stop_gradient also
# stops kernel-level derivatives, and is the identity on the host
class _Transform:
    """What `sp.grad(f, argnums)` & co give outside a kernel (`dsdf = sp.grad(sdf)` at module level):
    kernels may call it, as they call sp.grad(sdf)(...) itself; Python code may not."""

    def __init__(self, name, f, argnums):
        self._spvad_transform = (name, f, argnums)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"sp.{self._spvad_transform[0]}(f)(...) can only be called inside a kernel or @sp.func")


def _transform(name):
    return _builtin(name, lambda f, argnums=0: _Transform(name, f, argnums))


grad = _transform("grad")
value_and_grad = _transform("value_and_grad")
jacobian = _transform("jacobian")
hessian = _transform("hessian")
jvp = _host_only("jvp")
vjp = _host_only("vjp")
stop_gradient = _builtin("stop_gradient", lambda v: v)
__all__ += ["grad", "value_and_grad", "jacobian", "hessian", "jvp", "vjp", "stop_gradient"]

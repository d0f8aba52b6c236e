"""Derivatives at the edges of each op's domain (pow at zero, negative bases and infinities, atan2 at the zeros,
min/max and v.max()/v.min() at ties), and at random points, against JAX in float64: jax.grad for reverse mode
(`k.grad`, `sp.Tape`), jax.jvp for forward mode (`k.fwd`), f32 and f64, one operand differentiated at a time in
forward mode (the other inactive, as JAX's jvp of a function of that operand alone).

NaN and infinities must match exactly, zeros whatever their sign (a gradient adds into a zeroed `.grad`, and
0 + -0 is +0), other values within RTOL (pow and atan2 are computed in f32 on the device, also for f64).
"""
import numpy as np
import pytest

import spvad as sp
from tests.elementwise import elementwise

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

INF, NAN = np.inf, np.nan
RTOL = 2e-4
DTYPES = {"f32": np.float32, "f64": np.float64}


# ---- kernel-side functions --------------------------------------------------------------------------------
@sp.func
def f_pow(a, b):
    return a ** b


@sp.func
def f_sp_pow(a, b):
    return sp.pow(a, b)


@sp.func
def f_pow_half(a):
    return a ** 0.5


@sp.func
def f_atan2(a, b):
    return sp.atan2(a, b)


@sp.func
def f_sp_max(a, b):
    return sp.max(a, b)


@sp.func
def f_max(a, b):
    return max(a, b)


@sp.func
def f_sp_min(a, b):
    return sp.min(a, b)


@sp.func
def f_min(a, b):
    return min(a, b)


@sp.func
def f_round(a):
    return sp.round(a) * a   # round's derivative is 0 (d/da = round(a) here), JAX's and torch's too


@sp.func
def f_vec_max(v):
    return v.max()


@sp.func
def f_vec_min(v):
    return v.min()


# ---- points -----------------------------------------------------------------------------------------------
POW_POINTS = [(0.0, 0.0), (-0.0, 0.0), (0.0, 2.0), (0.0, 0.5), (0.0, -0.5), (0.0, -2.0), (-0.0, 3.0), (-0.0, -3.0),
              (-0.0, 0.5), (0.0, 1.0), (NAN, 0.0), (-2.0, 3.0), (-2.0, 2.0), (-2.0, 0.5), (-2.0, -1.0), (-1.5, 4.0),
              (1.0, NAN), (1.0, INF), (-1.0, INF), (-1.0, -INF), (0.5, INF), (2.0, INF), (0.5, -INF), (2.0, -INF),
              (INF, 0.5), (INF, -0.5), (-INF, 0.5), (-INF, 3.0), (-INF, 2.0), (NAN, 1.0), (2.0, NAN), (3.0, -2.5)]
ATAN2_POINTS = [(0.0, 0.0), (0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 1.0), (0.0, -1.0), (-0.0, -1.0),
                (1.0, 0.0), (-1.0, 0.0), (1.0, -0.0), (INF, INF), (INF, -INF), (1.0, INF), (1.0, -INF), (INF, 1.0),
                (-INF, 1.0), (0.0, INF), (-0.0, -INF), (NAN, 0.0), (0.3, -0.7)]
TIE_POINTS = [(2.0, 2.0), (-1.0, -1.0), (0.0, 0.0), (-0.0, 0.0), (INF, INF), (1.0, 2.0), (2.0, 1.0), (-3.0, -3.0)]
VEC_POINTS = [(2.0, 2.0, 2.0), (2.0, 1.0, 2.0), (1.0, 2.0, 2.0), (2.0, 2.0, 1.0), (0.1, 0.1, 0.1), (-1.0, -1.0, -1.0),
              (0.0, -0.0, 0.0), (INF, INF, INF), (-INF, -INF, -INF), (INF, 1.0, INF), (3.0, 1.0, 2.0),
              (1e-3, 7.0, -5.0), (-4.0, -4.0, 5.0)]
ROUND_POINTS = [0.5, 1.5, 2.5, -0.5, -2.5, 0.3, -1.7]


def random_pairs(rng, n=12):
    return list(zip(*(np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(0.1, 3.0, n) for _ in range(2))))


def random_pow(rng):
    """Positive bases with any exponent, negative bases with integer exponents."""
    x = np.concatenate([rng.uniform(0.1, 3.0, 10), -rng.uniform(0.3, 2.0, 6)])
    y = np.concatenate([rng.uniform(-2.5, 2.5, 10), rng.integers(-3, 4, 6).astype(float)])
    return list(zip(x, y))


def vec_points(rng):
    return [(p,) for p in VEC_POINTS + [tuple(r) for r in rng.uniform(-2.0, 2.0, (5, 3))]]


def jnp_max(v):
    return jnp.max(v)


def jnp_min(v):
    return jnp.min(v)


# name -> (sp.func, number of operands, JAX function of the operands (a vector for vec_*), points(rng))
ROWS = {
    "pow": (f_pow, 2, jnp.power, lambda rng: POW_POINTS + random_pow(rng)),
    "sp_pow": (f_sp_pow, 2, jnp.power, lambda rng: POW_POINTS + random_pow(rng)),
    "pow_half": (f_pow_half, 1, lambda a: jnp.power(a, 0.5),
                 lambda rng: [(v,) for v in (0.0, -0.0, INF, 1.0)] + [(v,) for v in rng.uniform(0.1, 3.0, 8)]),
    "atan2": (f_atan2, 2, jnp.arctan2, lambda rng: ATAN2_POINTS + random_pairs(rng)),
    "sp_max": (f_sp_max, 2, jnp.maximum, lambda rng: TIE_POINTS + random_pairs(rng)),
    "max": (f_max, 2, jnp.maximum, lambda rng: TIE_POINTS + random_pairs(rng)),
    "sp_min": (f_sp_min, 2, jnp.minimum, lambda rng: TIE_POINTS + random_pairs(rng)),
    "min": (f_min, 2, jnp.minimum, lambda rng: TIE_POINTS + random_pairs(rng)),
    "round": (f_round, 1, lambda a: jnp.round(a) * a, lambda rng: [(v,) for v in ROUND_POINTS]),
    "vec_max": (f_vec_max, 1, jnp_max, lambda rng: vec_points(rng)),
    "vec_min": (f_vec_min, 1, jnp_min, lambda rng: vec_points(rng)),
}
KERNELS = {name: elementwise(row[0], row[1]) for name, row in ROWS.items()}


# ---- JAX references (float64) -------------------------------------------------------------------------------
def jax_grads(fn, args):
    """jax.grad of `fn` with respect to each operand, at each point (args: one float64 array per operand)."""
    return [np.asarray(jax.vmap(jax.grad(fn, argnums=k))(*args)) for k in range(len(args))]


def jax_tangents(fn, args, tangents):
    """jax.jvp of `fn` in operand k alone (the others fixed), tangent tangents[k], for each k."""
    out = []
    for k in range(len(args)):
        def along(*point, k=k):
            def of_k(u):
                return fn(*point[:k], u, *point[k + 1:])
            return jax.jvp(of_k, (point[k],), (tangents[k](point[k]),))[1]
        out.append(np.asarray(jax.vmap(along)(*args)))
    return out


def seed_of(a):
    """Forward-mode seeds: 1 for scalars; (1, 2, 4) for vectors, so a mean of tied tangents is visible."""
    return np.ones_like(a) if a.ndim == 1 else np.broadcast_to(np.array([1.0, 2.0, 4.0])[:a.shape[1]], a.shape).copy()


# ---- checks ------------------------------------------------------------------------------------------------
def need_dtype(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def assert_derivative(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bad = []
    for k in np.ndindex(want.shape):
        g, w = got[k], want[k]
        ok = np.isnan(g) if np.isnan(w) else g == w if not np.isfinite(w) or w == 0 else abs(g - w) <= RTOL * abs(w)
        if not ok:
            bad.append(f"#{k}: got {g!r}, want {w!r}")
    assert not bad, f"{what}:\n" + "\n".join(bad)


def points_of(name, dtype, rng):
    """One array per operand, the points rounded to `dtype`."""
    points = ROWS[name][3](rng)
    return [np.array([p[j] for p in points], dtype) for j in range(len(points[0]))]


def device_array(a, **kw):
    """An ndarray of `a`; a 2-d `a` is an array of vectors (its rows)."""
    if a.ndim == 2:
        return sp.from_numpy(a, dtype=sp.Vector(a.shape[1], sp.f32 if a.dtype == np.float32 else sp.f64), **kw)
    return sp.from_numpy(a, **kw)


def out_dtype(dtype):
    return sp.f32 if dtype == np.float32 else sp.f64


def describe(name, dtype, args):
    return f"{name} ({np.dtype(dtype).name}) at {[tuple(map(float, np.ravel(p))) for p in zip(*args)]}"


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_reverse_mode(name, dtype, rng):
    """k.grad with every operand needs_grad and y.grad = 1: each operand's .grad is jax.grad's."""
    need_dtype(dtype)
    args = points_of(name, dtype, rng)
    want = jax_grads(ROWS[name][2], [a.astype(np.float64) for a in args])
    dev = [device_array(a, needs_grad=True) for a in args]
    y = sp.ndarray(out_dtype(dtype), (len(args[0]),), needs_grad=True)
    kernel = KERNELS[name][0]
    kernel(*dev, y)
    y.grad.fill(1.0)
    kernel.grad(*dev, y)
    for k, (d, w) in enumerate(zip(dev, want)):
        assert_derivative(d.grad.to_numpy(), w, f"k.grad, operand {k}: " + describe(name, dtype, args))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_tape(name, dtype, rng):
    """sp.Tape over `loss[None] += f(...)`: each operand's .grad is jax.grad's."""
    need_dtype(dtype)
    args = points_of(name, dtype, rng)
    want = jax_grads(ROWS[name][2], [a.astype(np.float64) for a in args])
    dev = [device_array(a, needs_grad=True) for a in args]
    loss = sp.ndarray(out_dtype(dtype), (), needs_grad=True)
    with sp.Tape(loss=loss):
        KERNELS[name][1](*dev, loss)
    for k, (d, w) in enumerate(zip(dev, want)):
        assert_derivative(d.grad.to_numpy(), w, f"sp.Tape, operand {k}: " + describe(name, dtype, args))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_forward_mode(name, dtype, rng):
    """k.fwd with one operand needs_dual (the others plain arrays): y.dual is jax.jvp's in that operand."""
    need_dtype(dtype)
    args = points_of(name, dtype, rng)
    seeds = [seed_of(a) for a in args]
    want = jax_tangents(ROWS[name][2], [a.astype(np.float64) for a in args],
                        [lambda u, s=s: jnp.asarray(s[0] if s.ndim == 2 else 1.0, u.dtype) * jnp.ones_like(u)
                         for s in seeds])
    kernel = KERNELS[name][0]
    for k in range(len(args)):
        dev = [device_array(a, needs_dual=j == k) for j, a in enumerate(args)]
        dev[k].dual.from_numpy(seeds[k].astype(dtype))
        y = sp.ndarray(out_dtype(dtype), (len(args[0]),), needs_dual=True)
        kernel.fwd(*dev, y)
        assert_derivative(y.dual.to_numpy(), want[k], f"k.fwd, operand {k}: " + describe(name, dtype, args))

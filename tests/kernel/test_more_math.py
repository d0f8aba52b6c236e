"""The math library functions (ir/math_functions.py: sp.asinh ... sp.radians), one table row each: values within
the row's ulps of the exact result (mpmath) in f32 and f64, the same rule on Vulkan and on the interpreter (both
run the library's own expansions: docs/language.md's ulp table), edge points exactly, a dense ulp check of erf
and erfc against mpmath, derivatives against jax.grad (k.grad, sp.Tape) and jax.jvp (k.fwd), f32 and f64;
vectors, @sp.func, Python's `math` functions in kernels and the host-side functions.
"""
import math

import mpmath
import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.ir import math_functions as MF
from spvad.ir.libm.vector_eval import evaluate_built
from tests.elementwise import elementwise
from tests.libm_reference import EXPANDED, GOAL, expanded_samples, ulp_errors

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jsp = pytest.importorskip("jax.scipy.special")
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

INF, NAN = np.inf, np.nan
DTYPES = {"f32": np.float32, "f64": np.float64}
GRAD_RTOL = 2e-4


def func(name, nargs):
    fn = getattr(sp, name)

    def f1(a):
        return fn(a)

    def f2(a, b):
        return fn(a, b)

    def f3(a, b, c):
        return fn(a, b, c)
    return sp.func((f1, f2, f3)[nargs - 1])


@sp.func
def f_where(a, b):
    return sp.where(a > b, a * 2.0, b)


def smoothstep(e0, e1, x):
    t = jnp.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def sigmoid(x):
    """jax.nn.sigmoid's derivative s (1 - s) loses its relative accuracy for large x in float64 too."""
    q = jnp.exp(-jnp.abs(x))
    return jnp.where(x >= 0, 1.0 / (1.0 + q), q / (1.0 + q))


def lerp(a, b, t):
    return a * (1.0 - t) + b * t


def uniform(lo, hi, n=12):
    return lambda rng: [(v,) for v in rng.uniform(lo, hi, n)]


def pairs(lo, hi, n=12):
    return lambda rng: list(zip(rng.uniform(lo, hi, n), rng.uniform(lo, hi, n)))


def triples(n=12):
    return lambda rng: list(zip(rng.uniform(-3, 3, n), rng.uniform(-3, 3, n), rng.uniform(-0.5, 1.5, n)))


def points(*values):
    return [(v,) if not isinstance(v, tuple) else v for v in values]


def U(f32, f64):
    return {np.float32: f32, np.float64: f64}


# name -> (number of operands, JAX reference (special values, derivatives), random points(rng), edge points
#          (values, not gradients), derivative points (edges where JAX's derivative is defined), value ulps
#          {dtype: bound} of the exact result (docs/language.md's table, measured over ~30,000 points, rounded
#          up), or "operands": within 4 eps of the largest of the operands and the result)
ROWS = {
    "asinh": (1, jnp.arcsinh, uniform(-30, 30), points(0.0, -0.0, 1e-30, -1e-6, 3e4, -1e30, INF, -INF, NAN),
              points(0.0, 1e4), U(2, 2)),
    "acosh": (1, jnp.arccosh, uniform(1.01, 40), points(1.0, 1.0000001, 2.0, 1e4, 1e30, INF, 0.5, NAN),
              points(1.0, 5e3), U(2, 2)),
    "atanh": (1, jnp.arctanh, uniform(-0.99, 0.99), points(0.0, -0.0, 1e-30, 0.5, -0.999, 1.0, -1.0, 2.0, NAN),
              points(0.0, 1.0, -1.0), U(2, 2)),
    "exp10": (1, lambda x: jnp.power(10.0, x), uniform(-30, 30),
              points(0.0, -0.0, 1.0, 2.0, -1.0, 38.5, 39.0, -50.0, INF, -INF, NAN), points(0.0, 3.0), U(1.5, 1.5)),
    "cbrt": (1, jnp.cbrt, uniform(-50, 50), points(-8.0, 27.0, 0.0, -0.0, 1e-30, -1e30, INF, -INF, NAN),
             points(0.0, -8.0), U(1, 1)),
    "trunc": (1, jnp.trunc, uniform(-5, 5), points(-0.5, 0.5, -2.0, 2.7, -0.0, 1e30, INF, -INF, NAN), points(1.5),
              U(0, 0)),
    "erf": (1, jsp.erf, uniform(-4, 4), points(0.0, -0.0, 1e-30, 0.5, 0.999, 1.0, -3.0, 6.0, INF, -INF, NAN),
            points(0.0, 1.0, -2.0), U(1, 1)),
    "erfc": (1, jsp.erfc, uniform(-4, 9), points(0.0, 0.499, 0.5, -0.5, 1.0, 5.0, 9.0, 12.0, -12.0, INF, -INF, NAN),
             points(0.0, 0.5, 3.0), U(2, 2)),
    "sigmoid": (1, sigmoid, uniform(-30, 30), points(0.0, -0.0, 30.0, -80.0, 100.0, INF, -INF, NAN),
                points(0.0, -20.0, 20.0), U(2.5, 2)),
    "softplus": (1, jax.nn.softplus, uniform(-30, 30), points(0.0, -0.0, 50.0, -80.0, 100.0, INF, -INF, NAN),
                 points(0.0, -20.0, 20.0), U(2, 2)),
    "log_sigmoid": (1, jax.nn.log_sigmoid, uniform(-30, 30), points(0.0, 80.0, -50.0, INF, -INF, NAN),
                    points(0.0, -20.0, 20.0), U(2, 2)),
    "square": (1, jnp.square, uniform(-10, 10), points(0.0, -3.0, 1e20, INF, NAN), points(0.0), U(0.5, 0.5)),
    "degrees": (1, jnp.degrees, uniform(-10, 10), points(0.0, math.pi, INF, NAN), points(0.0), U(1, 1)),
    "radians": (1, jnp.radians, uniform(-500, 500), points(0.0, 180.0, INF, NAN), points(0.0), U(1, 1)),
    "copysign": (2, jnp.copysign, pairs(-3, 3), points((1.0, -0.0), (-2.0, 0.0), (3.0, -1.0), (-0.0, 1.0),
                                                       (INF, -2.0), (NAN, 1.0), (2.0, -INF)),
                 points((1.0, -0.0), (-2.0, 0.0), (1.5, -3.0)), U(0, 0)),
    "logaddexp": (2, jnp.logaddexp, pairs(-20, 20), points((0.0, 0.0), (-INF, -INF), (INF, INF), (INF, 1.0),
                                                           (-INF, 2.0), (100.0, -100.0), (1e30, 1e30), (NAN, 1.0)),
                  points((0.0, 0.0), (2.0, 2.0), (-3.0, 5.0)), "operands"),   # cancels near logaddexp = 0
    "lerp": (3, lerp, triples(), points((1.0, 2.0, 0.0), (1.0, 2.0, 1.0), (-1.0, 1e30, 1.0)),
             points((1.0, 2.0, 0.5)), "operands"),
    "mix": (3, lerp, triples(), points((1.0, 2.0, 0.0), (1.0, 2.0, 1.0)), points((1.0, 2.0, 0.5)), "operands"),
    "smoothstep": (3, smoothstep, lambda rng: list(zip([0.0] * 12, [2.0] * 12, rng.uniform(-0.5, 2.5, 12))),
                   points((0.0, 1.0, -1.0), (0.0, 1.0, 2.0), (0.0, 1.0, 0.5), (1.0, 3.0, 1.5)),
                   points((0.0, 1.0, 0.5), (0.0, 1.0, -1.0), (0.0, 1.0, 2.0)), U(3, 3)),
    "where": (2, lambda a, b: jnp.where(a > b, a * 2.0, b), pairs(-3, 3), points((1.0, 1.0), (INF, 2.0)),
              points((1.0, 1.0), (2.0, 1.0)), U(0, 0)),
}
M = mpmath.mpf


def on_mpf(fn):
    return lambda *v: fn(*map(M, v))


# name -> the exact value (mpmath numbers) of finite Python float operands (JAX's result says where it is not
# finite, or zero)
EXACT = {**{name: on_mpf(EXPANDED[name][0]) for name in ("exp10", "sigmoid", "softplus", "log_sigmoid", "asinh",
                                                         "acosh", "atanh", "cbrt", "erf", "erfc")},
         "trunc": on_mpf(lambda x: mpmath.floor(x) if x >= 0 else mpmath.ceil(x)), "square": on_mpf(lambda x: x * x),
         "degrees": on_mpf(lambda x: x * 180 / mpmath.pi), "radians": on_mpf(lambda x: x * mpmath.pi / 180),
         "copysign": lambda x, y: M(math.copysign(x, y)),   # -0.0's sign: on the floats
         "logaddexp": on_mpf(lambda a, b: mpmath.log(mpmath.exp(a) + mpmath.exp(b))),
         "lerp": on_mpf(lambda a, b, t: a * (1 - t) + b * t), "mix": on_mpf(lambda a, b, t: a * (1 - t) + b * t),
         "smoothstep": on_mpf(lambda e0, e1, x: (lambda t: t * t * (3 - 2 * t))(min(max((x - e0) / (e1 - e0), 0), 1))),
         "where": on_mpf(lambda a, b: a * 2 if a > b else b)}
FUNCS = {name: f_where if name == "where" else func(name, row[0]) for name, row in ROWS.items()}


KERNELS = {name: elementwise(FUNCS[name], row[0]) for name, row in ROWS.items()}


def need_dtype(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def out_dtype(dtype):
    return sp.f32 if dtype == np.float32 else sp.f64


def operands(pts, dtype):
    return [np.array([p[j] for p in pts], dtype) for j in range(len(pts[0]))]


def reference(fn, args):
    with np.errstate(all="ignore"):
        return np.asarray(jax.jit(fn)(*[jnp.asarray(a.astype(np.float64)) for a in args]))


def run(name, args, dtype):
    y = sp.ndarray(out_dtype(dtype), (len(args[0]),))
    KERNELS[name][0](*[sp.from_numpy(a) for a in args], y)
    return y.to_numpy()


def ulps(got, exact, dtype):
    """|got - exact| in units of the last place of `exact` rounded to `dtype` (subnormals: the smallest one), on
    mpmath numbers (call it at a working precision above the dtype's)."""
    spacing = np.spacing(abs(np.asarray(float(exact)).astype(dtype)))
    return float(abs(M(got) - exact)) / max(float(spacing), float(np.finfo(dtype).smallest_subnormal))


def assert_values(name, got, want, dtype, args):
    """NaN, infinities and zeros (with their sign) exactly, as JAX's results rounded to the dtype; other values
    within the row's ulps of the exact result (mpmath at 128 bits), the same on every backend. Rows marked
    "operands" (a (1 - t) + b t, logaddexp: sums that cancel) within 4 eps of the largest of the operands and
    the result."""
    bad = []
    for k in range(len(want)):
        g, w = float(got[k]), float(want[k])
        with np.errstate(over="ignore"):
            w_d = float(np.asarray(w).astype(dtype))   # the reference rounded to dtype (overflow: inf)
        operands = [float(a[k]) for a in args]
        if not np.isfinite(w_d) or w_d == 0:
            ok = (np.isnan(g) and np.isnan(w_d)) or (g == w_d and np.signbit(g) == np.signbit(w_d))
        else:
            with mpmath.workprec(128):
                exact = EXACT[name](*operands)
                if ROWS[name][5] == "operands":
                    scale = max([abs(float(exact))] + [abs(v) for v in operands])
                    ok = abs(M(g) - exact) <= 4 * np.finfo(dtype).eps * scale
                else:
                    ok = ulps(g, exact, dtype) <= ROWS[name][5][dtype]
        if not ok:
            bad.append(f"at {tuple(operands)}: got {g!r}, want {w!r}")
    assert not bad, f"{name} ({np.dtype(dtype).name}):\n" + "\n".join(bad)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_values(name, dtype, rng):
    """Random points and edge points (infinities, NaN, signed zeros, the ends of each formula's ranges)."""
    need_dtype(dtype)
    row = ROWS[name]
    args = operands(row[2](rng) + row[3], dtype)
    assert_values(name, run(name, args, dtype), reference(row[1], args), dtype, args)


@pytest.mark.parametrize("dt", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_erf_erfc_dense(name, dt, request):
    """erf and erfc over ~3,500 points of libm_reference's samples within the library's goal (4 ulp f32, 2 f64),
    as the interpreter and lavapipe compute them (the same bits: libm.vector_eval rounds each op as they do)."""
    if request.node.callspec.params["backend"] != "interp":
        pytest.skip("computed on the host (libm.vector_eval): once")
    args = expanded_samples(name, dt, 2000, np.random.default_rng(36))
    got = evaluate_built(lambda e, p: MF.FUNCTIONS[name][0](e, p), dt, *args)
    err = ulp_errors(name, dt, args, got, reference=EXPANDED[name][0])
    k = int(np.argmax(err))
    assert err.max() <= GOAL[dt], f"{name} {dt.name}: {err.max():.3g} ulp at {args[0][k]!r} -> {got[k]!r}"


def grads(name, args):
    fn = ROWS[name][1]
    return [np.asarray(jax.vmap(jax.grad(fn, argnums=k))(*[jnp.asarray(a, jnp.float64) for a in args]))
            for k in range(len(args))]


def derivative_points(name, dtype, rng):
    row = ROWS[name]
    return operands(row[2](rng) + row[4], dtype)


def assert_derivative(got, want, what, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    rtol = GRAD_RTOL if dtype == np.float32 else GRAD_RTOL / 10
    bad = [f"#{k}: got {g!r}, want {w!r}" for k, (g, w) in enumerate(zip(got, want))
           if not (np.isnan(g) if np.isnan(w) else g == w if not np.isfinite(w) else
                   abs(g - w) <= rtol * abs(w) + 1e-30)]
    assert not bad, f"{what}:\n" + "\n".join(bad)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_reverse_mode(name, dtype, rng):
    need_dtype(dtype)
    args = derivative_points(name, dtype, rng)
    want = grads(name, args)
    dev = [sp.from_numpy(a, needs_grad=True) for a in args]
    y = sp.ndarray(out_dtype(dtype), (len(args[0]),), needs_grad=True)
    kernel = KERNELS[name][0]
    kernel(*dev, y)
    y.grad.fill(1.0)
    kernel.grad(*dev, y)
    for k, (d, w) in enumerate(zip(dev, want)):
        assert_derivative(d.grad.to_numpy(), w, f"{name} k.grad, operand {k} at {args}", dtype)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_tape(name, dtype, rng):
    need_dtype(dtype)
    args = derivative_points(name, dtype, rng)
    want = grads(name, args)
    dev = [sp.from_numpy(a, needs_grad=True) for a in args]
    loss = sp.ndarray(out_dtype(dtype), (), needs_grad=True)
    with sp.Tape(loss=loss):
        KERNELS[name][1](*dev, loss)
    for k, (d, w) in enumerate(zip(dev, want)):
        assert_derivative(d.grad.to_numpy(), w, f"{name} sp.Tape, operand {k} at {args}", dtype)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_forward_mode(name, dtype, rng):
    """k.fwd with one operand needs_dual at a time: y.dual is jax.jvp's in that operand."""
    need_dtype(dtype)
    args = derivative_points(name, dtype, rng)
    fn = ROWS[name][1]
    for k in range(len(args)):
        def along(*point, k=k):
            return jax.jvp(lambda u: fn(*point[:k], u, *point[k + 1:]), (point[k],), (jnp.ones_like(point[k]),))[1]
        want = np.asarray(jax.vmap(along)(*[jnp.asarray(a, jnp.float64) for a in args]))
        dev = [sp.from_numpy(a, needs_dual=j == k) for j, a in enumerate(args)]
        dev[k].dual.from_numpy(np.ones_like(args[k]))
        y = sp.ndarray(out_dtype(dtype), (len(args[0]),), needs_dual=True)
        KERNELS[name][0].fwd(*dev, y)
        assert_derivative(y.dual.to_numpy(), want, f"{name} k.fwd, operand {k} at {args}", dtype)


@sp.kernel
def k_math_module(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i, 0] = math.erf(x[i])
        y[i, 1] = math.erfc(x[i])
        y[i, 2] = math.asinh(x[i])
        y[i, 3] = math.atanh(x[i] * 0.5)
        y[i, 4] = math.acosh(x[i] + 3.0)
        y[i, 5] = math.copysign(x[i], -1.0)
        y[i, 6] = math.degrees(x[i]) + math.radians(x[i])
        y[i, 7] = math.cbrt(x[i]) + math.trunc(x[i] * 3.0) + math.erf(0.5)   # a constant: Python's math.erf


def test_math_module_in_kernels():
    x = np.array([-1.3, -0.2, 0.0, 0.4, 1.7], np.float32)
    y = sp.ndarray(sp.f32, (5, 8))
    k_math_module(sp.from_numpy(x), y)
    xd = x.astype(np.float64)
    want = np.stack([[math.erf(v), math.erfc(v), math.asinh(v), math.atanh(v / 2), math.acosh(v + 3),
                      math.copysign(v, -1), math.degrees(v) + math.radians(v),
                      math.cbrt(v) + math.trunc(float(np.float32(v) * np.float32(3))) + math.erf(0.5)] for v in xd])
    np.testing.assert_allclose(y.to_numpy(), want, rtol=2e-6, atol=1e-7)


@sp.kernel
def k_vectors(v: sp.Array, y: sp.Array):
    for i in range(v.shape[0]):
        a = v[i]
        y[i] = sp.sigmoid(a) + sp.lerp(a, a * 2.0, 0.25) + sp.copysign(1.0, a) + sp.smoothstep(0.0, 1.0, a)


def test_vectors_per_component():
    x = np.array([[-1.0, 0.3, 2.0], [0.5, -0.0, 4.0]], np.float32)
    y = sp.ndarray(sp.vec3, (2,))
    k_vectors(sp.from_numpy(x, dtype=sp.vec3), y)
    xd = x.astype(np.float64)
    want = 1 / (1 + np.exp(-xd)) + xd * 1.25 + np.copysign(1.0, xd) + np.asarray(smoothstep(0.0, 1.0, xd))
    np.testing.assert_allclose(y.to_numpy(), want, rtol=2e-6)


@sp.func
def erf_of_sum(a, b):
    return sp.erf(a + b) * sp.softplus(a)


@sp.kernel
def k_func(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = erf_of_sum(x[i], 0.25)


def test_in_a_func_with_gradient():
    x = np.array([-1.0, 0.0, 0.7], np.float32)
    xs, y = sp.from_numpy(x, needs_grad=True), sp.ndarray(sp.f32, (3,), needs_grad=True)
    k_func(xs, y)
    y.grad.fill(1.0)
    k_func.grad(xs, y)
    f = lambda a: jsp.erf(a + 0.25) * jax.nn.softplus(a)   # noqa: E731
    xd = jnp.asarray(x, jnp.float64)
    np.testing.assert_allclose(y.to_numpy(), np.asarray(f(xd)), rtol=2e-6)
    np.testing.assert_allclose(xs.grad.to_numpy(), np.asarray(jax.vmap(jax.grad(f))(xd)), rtol=2e-5)


def test_host_side():
    """Outside kernels the functions work on numpy values (numpy's or math's definitions)."""
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    assert sp.erf(x).dtype == np.float32
    np.testing.assert_allclose(sp.erf(x), [math.erf(v) for v in x], rtol=1e-6)
    np.testing.assert_allclose(sp.erfc(x), [math.erfc(v) for v in x], rtol=1e-6)
    np.testing.assert_allclose(sp.sigmoid(x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(sp.softplus(x), np.log1p(np.exp(x.astype(np.float64))), rtol=1e-6)
    assert sp.cbrt(-8.0) == -2.0 and sp.exp10(2.0) == 100.0 and sp.trunc(-1.5) == -1.0
    assert sp.logaddexp(-np.inf, -np.inf) == -np.inf and sp.copysign(2.0, -0.0) == -2.0
    assert sp.lerp(1.0, 3.0, 0.5) == 2.0 == sp.mix(1.0, 3.0, 0.5) and sp.smoothstep(0.0, 1.0, 0.5) == 0.5
    assert sp.where(x > 0, x, 0.0).tolist() == [0.0, 0.0, 0.0, 0.5, 3.0]

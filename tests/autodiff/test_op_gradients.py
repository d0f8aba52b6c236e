"""Every differentiable op, through `kernel.grad` on the device, against central finite differences of an
independent float64 numpy formula; ops with zero or no gradient (integers, casts to int, floor, ...) give 0.

One table row per op (as in JAX's check_grads tables); a test checks that the rows cover exactly the ops
of `spvad.autodiff.rules.PARTIALS`, and the zero-gradient rows those of `ZERO_GRADIENT`.
"""
import numpy as np
import pytest

import spvad as sp
from spvad.autodiff.rules import PARTIALS, ZERO_GRADIENT
from spvad.ir.ops import Op

from adcheck import check_grad, positive, rand

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


# ---- kernel-side functions (inlined @sp.func) ----------------------------------------------------------
@sp.func
def f_neg(a):
    return -a


@sp.func
def f_add(a, b):
    return a + b


@sp.func
def f_sub(a, b):
    return a - b


@sp.func
def f_mul(a, b):
    return a * b


@sp.func
def f_div(a, b):
    return a / b


@sp.func
def f_mod(a, b):
    return a % b


@sp.func
def f_pow_op(a, b):
    return a ** b


@sp.func
def f_min(a, b):
    return min(a, b)


@sp.func
def f_max(a, b):
    return max(a, b)


@sp.func
def f_select(a, b):
    return sp.select(a * b > 0.0, a * 2.0, b)   # the condition itself carries no gradient


@sp.func
def f_ifexp(a, b):
    return a if a > b else b * 3.0


@sp.func
def f_clamp(a, b):
    return sp.clamp(a, -0.5, 0.5) * b


def _int_power(k):
    @sp.func
    def f(a):
        return a ** k
    return f


def _powi(k):
    @sp.func
    def f(a):
        return a ** sp.i32(k)   # an i32 exponent: Op.POWI, exact for negative a
    return f


# ---- the tables: name -> (op, kernel function, float64 formula, input sampler) -----------------------
def _any(lo=0.1, hi=2.0):
    return lambda rng, n: rand(rng, n, lo, hi)


def _pos(lo=0.1, hi=3.0):
    return lambda rng, n: positive(rng, n, lo, hi)


UNARY = {
    "neg": (Op.NEG, f_neg, lambda x: -x, _any()),
    "abs": (Op.ABS, sp.abs, np.abs, _any()),
    "sin": (Op.SIN, sp.sin, np.sin, _any(0.1, 3.0)),
    "cos": (Op.COS, sp.cos, np.cos, _any(0.1, 3.0)),
    "tan": (Op.TAN, sp.tan, np.tan, _any(0.1, 1.2)),
    "asin": (Op.ASIN, sp.asin, np.arcsin, _any(0.05, 0.9)),
    "acos": (Op.ACOS, sp.acos, np.arccos, _any(0.05, 0.9)),
    "atan": (Op.ATAN, sp.atan, np.arctan, _any(0.1, 3.0)),
    "sinh": (Op.SINH, sp.sinh, np.sinh, _any(0.1, 2.0)),
    "cosh": (Op.COSH, sp.cosh, np.cosh, _any(0.1, 2.0)),
    "tanh": (Op.TANH, sp.tanh, np.tanh, _any(0.1, 2.0)),
    "exp": (Op.EXP, sp.exp, np.exp, _any(0.1, 2.0)),
    "log": (Op.LOG, sp.log, np.log, _pos()),
    "log2": (Op.LOG2, sp.log2, np.log2, _pos()),
    "sqrt": (Op.SQRT, sp.sqrt, np.sqrt, _pos()),
    "rsqrt": (Op.RSQRT, sp.rsqrt, lambda x: 1.0 / np.sqrt(x), _pos()),
    "exp2": (Op.EXP2, sp.exp2, np.exp2, _any(0.1, 2.0)),
    "log10": (Op.LOG10, sp.log10, np.log10, _pos()),
    "expm1": (Op.EXPM1, sp.expm1, np.expm1, _any(0.01, 1.5)),
    "log1p": (Op.LOG1P, sp.log1p, np.log1p, _any(0.01, 0.9)),
    # `v ** k` with a small constant integer k: repeated multiplication, fine for negative v
    **{f"pow_int{k}": (Op.MUL if k > 0 else Op.DIV, _int_power(k), (lambda x, k=k: x ** k), _any(0.3, 1.5))
       for k in (1, 2, 3, 5, -1, -2, -3)},
    # an integer-typed exponent (a runtime int, or a constant beyond the small ones): Op.POWI
    **{f"powi{k}": (Op.POWI, _powi(k), (lambda x, k=k: x ** k), _any(0.3, 1.5)) for k in (1, 3, -2, 7)},
    "powi40": (Op.POWI, _int_power(40), lambda x: x ** 40, _any(0.8, 1.2)),
}


def _distinct(rng, n):
    """Pairs (a, b) with |a - b| >= 0.05 (min/max/comparisons away from ties)."""
    a = rand(rng, n, 0.1, 2.0)
    b = rand(rng, n, 0.1, 2.0)
    close = np.abs(a - b) < 0.05
    b[close] = a[close] + np.float32(0.3)
    return a, b


def _mod_inputs(rng, n):
    """a % b away from its jumps: frac(a / b) in [0.05, 0.95]."""
    b = positive(rng, n, 0.5, 2.0) * np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
    q = rng.integers(-3, 3, n) + rng.uniform(0.05, 0.95, n)
    return (q * b).astype(np.float32), b


def _pair(sa, sb):
    return lambda rng, n: (sa(rng, n), sb(rng, n))


BINARY = {
    "add": (Op.ADD, f_add, lambda a, b: a + b, _pair(_any(), _any())),
    "sub": (Op.SUB, f_sub, lambda a, b: a - b, _pair(_any(), _any())),
    "mul": (Op.MUL, f_mul, lambda a, b: a * b, _pair(_any(), _any())),
    "div": (Op.DIV, f_div, lambda a, b: a / b, _pair(_any(), _any(0.3, 2.0))),
    "mod": (Op.MOD, f_mod, lambda a, b: np.mod(a, b), _mod_inputs),   # Python semantics: sign of b
    "pow": (Op.POW, f_pow_op, np.power, _pair(_pos(0.2, 2.0), _any(0.1, 2.0))),   # GLSL pow: a > 0
    "spow": (Op.POW, sp.pow, np.power, _pair(_pos(0.2, 2.0), _any(0.1, 2.0))),
    "atan2": (Op.ATAN2, sp.atan2, np.arctan2, _pair(_any(), _any())),
    "hypot": (Op.HYPOT, sp.hypot, np.hypot, _pair(_any(), _any())),
    "fmod": (Op.FMOD, sp.fmod, np.fmod, _mod_inputs),   # C semantics: the sign of a
    "min": (Op.MIN, f_min, np.minimum, _distinct),
    "max": (Op.MAX, f_max, np.maximum, _distinct),
    "select": (Op.SELECT, f_select, lambda a, b: np.where(a * b > 0, a * 2.0, b), _pair(_any(), _any())),
    "ifexp": (Op.SELECT, f_ifexp, lambda a, b: np.where(a > b, a, b * 3.0), _distinct),
    "clamp": (Op.MIN, f_clamp, lambda a, b: np.clip(a, -0.5, 0.5) * b, _pair(_any(0.1, 1.0), _any())),
}

N_ELEMS = 16
# lavapipe's f32 asin (Mesa lowers it to a polynomial) is off by up to 4e-4 relative, in the forward value
# only: its gradient rsqrt(1 - x^2) is accurate. f64 asin is computed in f32 too (GLSL.std.450 has no f64).
FWD_RTOL = {"asin": 1e-3}


def unary_kernel(f):
    @sp.kernel
    def unary(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = f(x[i])
    return unary


def binary_kernel(f):
    @sp.kernel
    def binary(a: sp.Array, b: sp.Array, y: sp.Array):
        for i in range(a.shape[0]):
            y[i] = f(a[i], b[i])
    return binary


DTYPES = [np.float32, np.float64]


def _skip_without_f64(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient(name, dtype, rng):
    _skip_without_f64(dtype)
    _, f, formula, sample = UNARY[name]
    x = sample(rng, N_ELEMS).astype(dtype)

    def ref(x, y):
        y[:] = formula(x)

    check_grad(unary_kernel(f), ref, [x, np.zeros(N_ELEMS, dtype)], outs=[1], wrt=[0], rng=rng,
               fwd_rtol=FWD_RTOL.get(name, 1e-4))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient(name, dtype, rng):
    _skip_without_f64(dtype)
    _, f, formula, sample = BINARY[name]
    a, b = (v.astype(dtype) for v in sample(rng, N_ELEMS))

    def ref(a, b, y):
        y[:] = formula(a, b)

    check_grad(binary_kernel(f), ref, [a, b, np.zeros(N_ELEMS, dtype)], outs=[2], wrt=[0, 1], rng=rng)


def test_table_covers_every_differentiable_op():
    tested = {row[0] for row in list(UNARY.values()) + list(BINARY.values())} | {Op.CAST}   # casts: below
    assert tested == set(PARTIALS), f"untested: {sorted(o.value for o in set(PARTIALS) - tested)}"
    zero_tested = set().union(*(ops for ops, _ in ZERO.values()))
    assert zero_tested >= ZERO_GRADIENT, f"untested: {sorted(o.value for o in ZERO_GRADIENT - zero_tested)}"


# ---- casts between float types carry the gradient ------------------------------------------------------
@sp.kernel
def widen(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = sp.cast(x[i], sp.f64)
        y[i] = v * v * v - float(v)


@sp.kernel
def narrow(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = sp.cast(x[i], sp.f32)
        y[i] = sp.sin(v) * v


@pytest.mark.parametrize("kernel,src,dst,formula", [
    (widen, np.float32, np.float64, lambda x: x ** 3 - x),
    (narrow, np.float64, np.float32, lambda x: np.sin(x) * x),
], ids=["f32->f64", "f64->f32"])
def test_float_cast_gradient(kernel, src, dst, formula, rng):
    _skip_without_f64(np.float64)
    x = rand(rng, N_ELEMS, 0.2, 1.5).astype(src)

    def ref(x, y):
        y[:] = formula(x)

    check_grad(kernel, ref, [x, np.zeros(N_ELEMS, dst)], outs=[1], wrt=[0], rng=rng)


# ---- zero gradients: integers, casts to int, floor/ceil/round/sign, comparisons, floor division ----------
@sp.func
def z_floor(a):
    return sp.floor(a * 3.0)


@sp.func
def z_ceil(a):
    return sp.ceil(a * 3.0)


@sp.func
def z_round(a):
    return sp.round(a * 3.0)


@sp.func
def z_sign(a):
    return sp.sign(a) * 2.0


@sp.func
def z_floordiv(a):
    return a // 0.3


@sp.func
def z_compare(a):
    return float(a > 0.2) + float(a <= -0.3) * 2.0 + float(a < -0.6) - float(a >= 0.6) + float(a == 0.25) \
        + float(a != 0.35) * 3.0


@sp.func
def z_int(a):
    return float(int(a * 5.0))


@sp.func
def z_cast_i32(a):
    return sp.cast(sp.cast(a * 7.0, sp.i32) % 3 * 2 + 1, sp.f32)


@sp.func
def z_int_math(a):
    k = int(a * 10.0)
    m = 0
    for j in range(3):
        m = m + k * j
    return float(m) * 0.5


@sp.func
def z_stop_gradient(a):
    return sp.stop_gradient(a * a) * 2.0


# name -> (the ops of ZERO_GRADIENT the row exercises, kernel function)
ZERO = {"stop_gradient": ({Op.STOP_GRADIENT}, z_stop_gradient), "floor": ({Op.FLOOR}, z_floor), "ceil": ({Op.CEIL}, z_ceil), "round": ({Op.ROUND}, z_round),
        "sign": ({Op.SIGN}, z_sign), "floordiv": ({Op.FLOORDIV}, z_floordiv),
        "compare": ({Op.GT, Op.LE, Op.LT, Op.GE, Op.EQ, Op.NE}, z_compare), "int": (set(), z_int),
        "cast_i32": (set(), z_cast_i32), "int_math": (set(), z_int_math)}


@pytest.mark.parametrize("name", sorted(ZERO))
def test_zero_gradient(name, rng):
    """d/dx (f(x) + x) == 1 exactly: f contributes nothing (floor etc. are zero almost everywhere)."""
    k = unary_kernel(ZERO[name][1])
    # keep a*3, a*5, a*7, a*10 away from integers and a away from the comparison thresholds
    x = (rng.integers(-5, 5, N_ELEMS) + rng.uniform(0.02, 0.08, N_ELEMS)).astype(np.float32) / 10
    x[x == 0] = 0.05
    xd = sp.from_numpy(x, needs_grad=True)
    y = sp.ndarray(sp.f32, (N_ELEMS,), needs_grad=True)
    k(xd, y)
    y.grad.fill(1.0)
    k.grad(xd, y)
    np.testing.assert_array_equal(xd.grad.to_numpy(), np.zeros(N_ELEMS))

    f = ZERO[name][1]

    @sp.kernel
    def plus_x(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = f(x[i]) + x[i] * 1.5

    g = rand(rng, N_ELEMS, 0.5, 1.5)
    y.grad.from_numpy(g)
    plus_x(xd, y)
    plus_x.grad(xd, y)
    np.testing.assert_allclose(xd.grad.to_numpy(), 1.5 * g, rtol=1e-6)


@sp.kernel
def int_array_input(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * float(n[i]) + float(n[i] * n[i])


def test_integer_arrays_carry_no_gradient(rng):
    """An int array takes no gradient (and breaks nothing); asking for one is an error."""
    x = rand(rng, N_ELEMS)
    n = rng.integers(1, 5, N_ELEMS).astype(np.int32)

    def ref(x, n, y):
        y[:] = x * n + n * n

    dev = check_grad(int_array_input, ref, [x, n, np.zeros(N_ELEMS, np.float32)], outs=[2], wrt=[0], rng=rng,
                     seeds=[np.ones(N_ELEMS)])
    with pytest.raises(sp.ArgumentError, match="needs_grad=True on a i32 ndarray"):
        sp.from_numpy(n, needs_grad=True)

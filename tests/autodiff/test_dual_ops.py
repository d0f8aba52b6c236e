"""Forward mode of every differentiable op: `y.dual` from `sp.FwdMode` against central finite differences
of an independent float64 numpy formula, one table row per op, inputs in each op's domain (never zeros).

Binary ops are checked one operand at a time (the other operand's dual is filled with garbage first:
FwdMode must start it at zero). A test checks that the rows cover exactly the ops of
`spvad.autodiff.rules.PARTIALS`, and the zero-derivative rows those of `ZERO_GRADIENT`.
"""
import numpy as np
import pytest

import spvad as sp
from spvad.autodiff.rules import PARTIALS, ZERO_GRADIENT
from spvad.ir.ops import Op

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N_ELEMS = 16
EPS = 1e-6
RTOL = 1e-4


# ---- samplers (inputs never zero) -----------------------------------------------------------------------
def signed(lo, hi):
    def sample(rng, n):
        return np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, n)
    return sample


def positive(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


def pair(sa, sb):
    return lambda rng, n: (sa(rng, n), sb(rng, n))


def distinct(rng, n):
    """(a, b) at least 0.1 apart: min/max/comparisons away from their kinks."""
    a, b = signed(0.1, 2.0)(rng, n), signed(0.1, 2.0)(rng, n)
    close = np.abs(a - b) < 0.1
    b[close] = a[close] + 0.4
    return a, b


def around_clamp(rng, n):
    """|a| in [0.1, 0.5] (inside clamp(a, -0.6, 0.6)) or in [0.7, 1.5] (clamped), never at the kinks."""
    inside = rng.random(n) < 0.5
    return np.where(rng.random(n) < 0.5, -1.0, 1.0) * np.where(inside, rng.uniform(0.1, 0.5, n),
                                                               rng.uniform(0.7, 1.5, n))


def mod_inputs(rng, n):
    """a % b away from its jumps: a / b = integer + fraction in [0.1, 0.9], either sign of b."""
    b = signed(0.5, 2.0)(rng, n)
    return (rng.integers(-3, 3, n) + rng.uniform(0.1, 0.9, n)) * b, b


# ---- kernel-side functions --------------------------------------------------------------------------------
@sp.func
def k_neg(a):
    return -a


@sp.func
def k_add(a, b):
    return a + b


@sp.func
def k_sub(a, b):
    return a - b


@sp.func
def k_mul(a, b):
    return a * b


@sp.func
def k_div(a, b):
    return a / b


@sp.func
def k_mod(a, b):
    return a % b


@sp.func
def k_pow_op(a, b):
    return a ** b


@sp.func
def k_min(a, b):
    return min(a, b)


@sp.func
def k_max(a, b):
    return max(a, b)


@sp.func
def k_select(a, b):
    return sp.select(a > b, a * a, b * 3.0)


@sp.func
def k_ifexp(a, b):
    return sp.sin(a) if a < b else b * b


@sp.func
def k_clamp(a, b):
    return sp.clamp(a, -0.6, 0.6) * b


@sp.func
def k_pow_half(a):
    return a ** 2.5


@sp.func
def k_to_f64(a):
    v = sp.cast(a, sp.f64)
    return v * v


def int_power(k):
    @sp.func
    def f(a):
        return a ** k
    return f


def int_typed_power(k):
    @sp.func
    def f(a):
        return a ** sp.i32(k)   # an i32 exponent: Op.POWI, exact for negative a
    return f


# name -> (ops the row exercises, kernel function, float64 reference, sampler)
UNARY = {
    "neg": ({Op.NEG}, k_neg, lambda x: -x, signed(0.1, 2.0)),
    "abs": ({Op.ABS}, sp.abs, np.abs, signed(0.1, 2.0)),
    "sin": ({Op.SIN}, sp.sin, np.sin, signed(0.1, 3.0)),
    "cos": ({Op.COS}, sp.cos, np.cos, signed(0.1, 3.0)),
    "tan": ({Op.TAN}, sp.tan, np.tan, signed(0.1, 1.2)),
    "asin": ({Op.ASIN}, sp.asin, np.arcsin, signed(0.05, 0.9)),
    "acos": ({Op.ACOS}, sp.acos, np.arccos, signed(0.05, 0.9)),
    "atan": ({Op.ATAN}, sp.atan, np.arctan, signed(0.1, 3.0)),
    "sinh": ({Op.SINH}, sp.sinh, np.sinh, signed(0.1, 2.0)),
    "cosh": ({Op.COSH}, sp.cosh, np.cosh, signed(0.1, 2.0)),
    "tanh": ({Op.TANH}, sp.tanh, np.tanh, signed(0.1, 2.0)),
    "exp": ({Op.EXP}, sp.exp, np.exp, signed(0.1, 2.0)),
    "log": ({Op.LOG}, sp.log, np.log, positive(0.1, 3.0)),
    "log2": ({Op.LOG2}, sp.log2, np.log2, positive(0.1, 3.0)),
    "sqrt": ({Op.SQRT}, sp.sqrt, np.sqrt, positive(0.1, 3.0)),
    "rsqrt": ({Op.RSQRT}, sp.rsqrt, lambda x: 1.0 / np.sqrt(x), positive(0.1, 3.0)),
    "exp2": ({Op.EXP2}, sp.exp2, np.exp2, signed(0.1, 2.0)),
    "log10": ({Op.LOG10}, sp.log10, np.log10, positive(0.1, 3.0)),
    "expm1": ({Op.EXPM1}, sp.expm1, np.expm1, signed(0.01, 1.5)),
    "log1p": ({Op.LOG1P}, sp.log1p, np.log1p, signed(0.01, 0.9)),
    "pow_2.5": ({Op.POW}, k_pow_half, lambda x: x ** 2.5, positive(0.2, 2.0)),
    "cast_f64": ({Op.CAST, Op.MUL}, k_to_f64, lambda x: x * x, signed(0.1, 2.0)),
    # `v ** k`, small constant integer k: exact repeated multiplication, negative v allowed
    **{f"pow_int{k}": ({Op.MUL} if k > 0 else {Op.DIV}, int_power(k), (lambda x, k=k: x ** k), signed(0.3, 1.5))
       for k in (1, 2, 3, 4, -1, -2, -3)},
    # an integer-typed exponent (a runtime int, or a constant beyond the small ones): Op.POWI
    **{f"powi{k}": ({Op.POWI}, int_typed_power(k), (lambda x, k=k: x ** k), signed(0.3, 1.5))
       for k in (1, 3, -2, 7)},
    "powi40": ({Op.POWI}, int_power(40), lambda x: x ** 40, signed(0.8, 1.2)),
}

BINARY = {
    "add": ({Op.ADD}, k_add, lambda a, b: a + b, pair(signed(0.1, 2.0), signed(0.1, 2.0))),
    "sub": ({Op.SUB}, k_sub, lambda a, b: a - b, pair(signed(0.1, 2.0), signed(0.1, 2.0))),
    "mul": ({Op.MUL}, k_mul, lambda a, b: a * b, pair(signed(0.1, 2.0), signed(0.1, 2.0))),
    "div": ({Op.DIV}, k_div, lambda a, b: a / b, pair(signed(0.1, 2.0), signed(0.3, 2.0))),
    "mod": ({Op.MOD}, k_mod, np.mod, mod_inputs),   # Python semantics: the result takes b's sign
    "pow": ({Op.POW}, k_pow_op, np.power, pair(positive(0.2, 2.0), signed(0.1, 2.0))),   # GLSL pow: a > 0
    "sp_pow": ({Op.POW}, sp.pow, np.power, pair(positive(0.2, 2.0), signed(0.1, 2.0))),
    "atan2": ({Op.ATAN2}, sp.atan2, np.arctan2, pair(signed(0.1, 2.0), signed(0.1, 2.0))),
    "hypot": ({Op.HYPOT}, sp.hypot, np.hypot, pair(signed(0.1, 2.0), signed(0.1, 2.0))),
    "fmod": ({Op.FMOD}, sp.fmod, np.fmod, mod_inputs),   # C semantics: the result takes a's sign
    "min": ({Op.MIN}, k_min, np.minimum, distinct),
    "max": ({Op.MAX}, k_max, np.maximum, distinct),
    "select": ({Op.SELECT}, k_select, lambda a, b: np.where(a > b, a * a, b * 3.0), distinct),
    "ifexp": ({Op.SELECT}, k_ifexp, lambda a, b: np.where(a < b, np.sin(a), b * b), distinct),
    "clamp": ({Op.MIN, Op.MAX}, k_clamp, lambda a, b: np.clip(a, -0.6, 0.6) * b,
              pair(around_clamp, signed(0.1, 2.0))),
}


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


DTYPES = {"f32": np.float32, "f64": np.float64}


def need_dtype(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def directional_fd(formula, args, k, seed):
    """d/dh formula(args with args[k] + h seed) at h = 0, central differences in float64."""
    plus, minus = list(args), list(args)
    plus[k] = args[k] + EPS * seed
    minus[k] = args[k] - EPS * seed
    return (formula(*plus) - formula(*minus)) / (2 * EPS)


def assert_close(got, want, what):
    """RTOL, with an absolute floor of RTOL * max|want| for elements whose exact value is near zero."""
    atol = RTOL * float(np.max(np.abs(want)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=RTOL, atol=atol, err_msg=what)


def seed_of(rng, n):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(0.5, 1.5, n)


def check_forward(kernel, formula, inputs, out_dtype, rng, name):
    """For each input in turn: FwdMode(param=that input, seed=random) == directional finite differences."""
    exact = [a.astype(np.float64) for a in inputs]   # the values the device sees
    dev = [sp.from_numpy(a, needs_dual=True) for a in inputs]
    y = sp.ndarray(out_dtype, (N_ELEMS,), needs_dual=True)
    for k in range(len(inputs)):
        for a in dev:
            a.dual.fill(7.0)          # stale duals: FwdMode must zero all but the param's
        seed = seed_of(rng, N_ELEMS)
        with sp.FwdMode(loss=y, param=dev[k], seed=seed):
            kernel(*dev, y)
        want = directional_fd(formula, exact, k, seed.astype(inputs[k].dtype).astype(np.float64))
        assert np.any(want != 0), f"vacuous row {name}: zero derivative w.r.t. operand {k}"
        assert_close(y.dual.to_numpy(), want, f"forward-mode derivative of {name} w.r.t. operand {k}")


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_forward(name, dtype, rng):
    need_dtype(dtype)
    _, f, formula, sample = UNARY[name]
    out = sp.f64 if name == "cast_f64" else sp.f32 if dtype == np.float32 else sp.f64
    if name == "cast_f64":
        need_dtype(np.float64)
    check_forward(unary_kernel(f), formula, [sample(rng, N_ELEMS).astype(dtype)], out, rng, name)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_forward(name, dtype, rng):
    need_dtype(dtype)
    _, f, formula, sample = BINARY[name]
    inputs = [v.astype(dtype) for v in sample(rng, N_ELEMS)]
    check_forward(binary_kernel(f), formula, inputs, sp.f32 if dtype == np.float32 else sp.f64, rng, name)


def test_table_covers_every_differentiable_op():
    covered = set().union(*(row[0] for row in list(UNARY.values()) + list(BINARY.values())))
    assert covered == set(PARTIALS), f"no forward-mode row for {sorted(o.value for o in set(PARTIALS) - covered)}"
    zero_covered = set().union(*(ops for ops, _ in ZERO.values()))
    assert zero_covered >= ZERO_GRADIENT, f"no zero row for {sorted(o.value for o in ZERO_GRADIENT - zero_covered)}"


# ---- ops whose derivative is zero almost everywhere contribute nothing to the dual ------------------------
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
    return float(int(a * 5.0)) + sp.cast(sp.cast(a * 7.0, sp.i32) % 3, sp.f32)


@sp.func
def z_stop_gradient(a):
    return sp.stop_gradient(a * a) * 2.0


# name -> (the ops of ZERO_GRADIENT the row exercises, kernel function)
ZERO = {"stop_gradient": ({Op.STOP_GRADIENT}, z_stop_gradient), "floor": ({Op.FLOOR}, z_floor), "ceil": ({Op.CEIL}, z_ceil), "round": ({Op.ROUND}, z_round),
        "sign": ({Op.SIGN}, z_sign), "floordiv": ({Op.FLOORDIV}, z_floordiv),
        "compare": ({Op.GT, Op.LE, Op.LT, Op.GE, Op.EQ, Op.NE}, z_compare), "int": (set(), z_int)}


@pytest.mark.parametrize("name", sorted(ZERO))
def test_zero_derivative_ops(name, rng):
    """d/dx (f(x) + 1.5 x) == 1.5 exactly along any seed."""
    f = ZERO[name][1]

    @sp.kernel
    def plus_x(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = f(x[i]) + x[i] * 1.5

    x = ((rng.integers(-5, 5, N_ELEMS) + rng.uniform(0.02, 0.08, N_ELEMS)) / 10).astype(np.float32)
    x[x == 0] = 0.05
    xd = sp.from_numpy(x, needs_dual=True)
    y = sp.ndarray(sp.f32, (N_ELEMS,), needs_dual=True)
    seed = seed_of(rng, N_ELEMS).astype(np.float32)
    with sp.FwdMode(loss=y, param=xd, seed=seed):
        plus_x(xd, y)
    np.testing.assert_allclose(y.dual.to_numpy(), 1.5 * seed, rtol=1e-6)


# ---- a conditional expression must not leak the untaken branch's derivative --------------------------------
@sp.kernel
def sqrt_or_double(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        y[i] = p * 2.0 if p < 0.0 else sp.sqrt(p)   # Python evaluates sqrt only for p >= 0


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_conditional_expression_untaken_branch(mode):
    x = sp.from_numpy(np.array([-0.5, 0.7], np.float32), needs_dual=True, needs_grad=True)
    y = sp.ndarray(sp.f32, (2,), needs_dual=True, needs_grad=True)
    if mode == "fwd":
        with sp.FwdMode(loss=y, param=x, seed=[1.0, 1.0]):
            sqrt_or_double(x, y)
        got = y.dual.to_numpy()
    else:
        sqrt_or_double(x, y)
        y.grad.fill(1.0)
        sqrt_or_double.grad(x, y)
        got = x.grad.to_numpy()
    np.testing.assert_allclose(got, [2.0, 0.5 / np.sqrt(0.7)], rtol=1e-5)

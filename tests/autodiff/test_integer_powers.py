"""`x ** n` with an integer-typed exponent (Op.POWI) follows Python, also for negative x: values for float and
int bases, the reverse-mode gradient and the forward-mode derivative n x^(n-1), each from the device and the IR
interpreter, against float64 Python (`float(x) ** int(n)`) or exact Python ints. Inputs never only zeros."""
import math

import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from spvad.ir.interp import run_kernel
from spvad.ir.ops import Op

from oracle import assert_same, launch_and_interpret

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

I32_MIN, I32_MAX = -2**31, 2**31 - 1
EXPONENTS = np.arange(-7, 10)      # tiled over the elements: every exponent meets several bases
N_ELEMS = 3 * len(EXPONENTS)
RTOL = {np.float32: 1e-5, np.float64: 1e-12}


# ---- kernels: the exponent is a loaded int, a scalar argument, a bool, a loop index -----------------------
@sp.kernel
def pow_loaded(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] ** n[i]


@sp.kernel
def sp_pow_loaded(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.pow(x[i], n[i])


@sp.kernel
def pow_vector(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = sp.vec3(x[i], -0.5 * x[i], 2.0 * x[i]) ** n[i]   # per component
        y[i] = v.x + v.y + v.z


@sp.kernel
def pow_bool(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] ** (x[i] > 0.0)   # x ** True == x, x ** False == 1


@sp.kernel
def pow_series(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        acc = x[i] * 0.0
        for j in range(-3, n[i]):     # a dynamic loop (adstacks): the gradient revisits each j in reverse
            acc = acc * 0.5 + x[i] ** j
        y[i] = acc


@sp.kernel
def pow_scalar(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        y[i] = x[i] ** n


def constant_power(k, use_sp_pow=False):
    @sp.kernel
    def pow_constant(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = sp.pow(x[i], k) if sp.static(use_sp_pow) else x[i] ** k
    return pow_constant


# ---- float64 references -------------------------------------------------------------------------------------
def each(fn):
    """An elementwise reference on Python floats and ints (float ** int is exact for negative bases)."""
    return lambda x, n: np.array([fn(float(a), int(k)) for a, k in zip(x, n)])


def series(a, m):
    acc = 0.0
    for j in range(-3, m):
        acc = acc * 0.5 + a ** j
    return acc


def d_series(a, m):
    d = 0.0
    for j in range(-3, m):
        d = d * 0.5 + j * a ** (j - 1)
    return d


def tiled(values, n=N_ELEMS):
    return np.resize(np.asarray(values), n)


def signed_bases(rng, lo=0.4, hi=1.6, n=N_ELEMS):
    v = rng.uniform(lo, hi, n) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
    v[:4] = [-1.0, 1.0, -1.5, 0.5]
    return v


# name -> (kernel, exponents(rng), value(x, n), d value / dx (x, n), float dtypes, sums of powers?)
# ("sums": the result can cancel to near 0, so compare with an absolute floor of rtol * max)
ROWS = {
    "loaded": (pow_loaded, lambda rng: tiled(EXPONENTS), each(lambda a, k: a ** k),
               each(lambda a, k: k * a ** (k - 1)), (np.float32, np.float64), False),
    "sp_pow": (sp_pow_loaded, lambda rng: tiled(EXPONENTS), each(lambda a, k: a ** k),
               each(lambda a, k: k * a ** (k - 1)), (np.float32, np.float64), False),
    "vector": (pow_vector, lambda rng: tiled(EXPONENTS),
               each(lambda a, k: a ** k + (-0.5 * a) ** k + (2 * a) ** k),
               each(lambda a, k: k * a ** (k - 1) * (1 + (-0.5) ** k + 2.0 ** k)), (np.float32,), False),
    "bool_exponent": (pow_bool, lambda rng: tiled([0]), each(lambda a, k: a if a > 0 else 1.0),
                      each(lambda a, k: 1.0 if a > 0 else 0.0), (np.float32, np.float64), False),
    "loop_index": (pow_series, lambda rng: rng.integers(-1, 7, N_ELEMS), each(series), each(d_series),
                   (np.float32, np.float64), True),
}
CASES = [(name, dt) for name, row in ROWS.items() for dt in row[4]]
CASE_IDS = [f"{name}-{np.dtype(dt).name}" for name, dt in CASES]


def need(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def assert_close(got, want, rtol, sums, what):
    want = np.asarray(want, np.float64)
    atol = rtol * float(np.max(np.abs(want))) if sums else 0.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol, err_msg=what)


def interpret(k, mode, args):
    """Run the IR that `k` compiles for `mode` ("primal", "reverse", "dual") on copies of every buffer;
    returns {(array index, field): numpy array}."""
    specs, arrays, scalars = k._bind(args)
    ck = k._compiled(specs, mode)
    buffers = {}
    for p, a in zip(ck.ir.arrays, arrays):
        buffers[(p.index, "primal")] = a.to_numpy().copy()
        for field in ("grad", "dual"):
            if getattr(a, field) is not None:
                buffers[(p.index, field)] = getattr(a, field).to_numpy().copy()
    run_kernel(ck.ir, buffers, list(scalars))
    return buffers


def inputs(name, dtype, rng, needs_grad=False, needs_dual=False):
    x0 = signed_bases(rng).astype(dtype)
    n0 = ROWS[name][1](rng).astype(np.int32)
    x = sp.from_numpy(x0, needs_grad=needs_grad, needs_dual=needs_dual)
    y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64, N_ELEMS, needs_grad=needs_grad,
                   needs_dual=needs_dual)
    return x0, n0, (x, sp.from_numpy(n0), y)


def test_kernels_use_powi():
    """The integer-typed exponents above compile to Op.POWI (not GLSL pow, NaN for x < 0)."""
    for k in (pow_loaded, sp_pow_loaded, pow_vector, pow_bool, pow_series):
        specs, _, _ = k._bind(inputs("loaded", np.float32, np.random.default_rng(0))[2])
        ops = {s.op for t in k._compiled(specs).ir.tasks for s in N.walk(t.body) if isinstance(s, N.Compute)}
        assert Op.POWI in ops and Op.POW not in ops, k.name


# ---- values ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,dtype", CASES, ids=CASE_IDS)
def test_value(name, dtype, rng):
    need(dtype)
    kernel, _, value, _, _, sums = ROWS[name]
    x0, n0, args = inputs(name, dtype, rng)
    (_, _, dev), (_, _, interp) = launch_and_interpret(kernel, *args)
    want = value(x0, n0)
    assert not np.isnan(dev).any()
    assert_close(dev, want, RTOL[dtype], sums, f"{name}: device vs float64 Python")
    assert_close(interp, want, RTOL[dtype], sums, f"{name}: interpreter vs float64 Python")


def int_pow(a, k):
    """Python's a ** k for k >= 0; for k < 0 the truncation of the true value (0 for a = 0, as documented)."""
    return a ** k if k >= 0 else (math.trunc(a ** k) if a else 0)


def wrapped(values, np_dtype):
    return np.array([v & 0xFFFFFFFF for v in values], np.uint64).astype(np.uint32).view(np_dtype)


@pytest.mark.parametrize("base,exp", [(np.int32, np.int32), (np.int32, np.uint32), (np.uint32, np.int32),
                                      (np.uint32, np.uint32)], ids=["i32-i32", "i32-u32", "u32-i32", "u32-u32"])
def test_integer_base(base, exp, rng):
    """An int base gives an int: 32-bit wrapping like `*` (bases up to 50 overflow at n = 9), and for n < 0
    the truncation of the true value."""
    lo = -50 if base == np.int32 else 0
    a0 = rng.integers(lo, 51, N_ELEMS)
    a0[:4] = [0, 1, 50, 3] if base == np.uint32 else [0, 1, -1, -50]
    n0 = tiled(EXPONENTS if exp == np.int32 else EXPONENTS[EXPONENTS >= 0])
    a, n = a0.astype(base), n0.astype(exp)
    y = sp.ndarray(sp.i32 if base == np.int32 else sp.u32, N_ELEMS)
    (_, _, dev), (_, _, interp) = launch_and_interpret(pow_loaded, sp.from_numpy(a), sp.from_numpy(n), y)
    want = wrapped([int_pow(int(p), int(k)) for p, k in zip(a, n)], base)
    assert_same(dev, want, what="device")
    assert_same(interp, want, what="interpreter")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_scalar_argument_exponent(dtype, rng):
    """An `sp.i32` kernel argument as the exponent: value and gradient for each n of -7..9 (one pipeline)."""
    need(dtype)
    x0 = signed_bases(rng).astype(dtype)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64, N_ELEMS, needs_grad=True)
    ref = x0.astype(np.float64)
    for n in EXPONENTS.tolist():
        pow_scalar(x, y, n)
        assert_close(y.to_numpy(), [a ** n for a in ref.tolist()], RTOL[dtype], False, f"x ** {n}")
        x.grad.fill(0.0)
        y.grad.fill(1.0)
        pow_scalar.grad(x, y, n)
        assert_close(x.grad.to_numpy(), [n * a ** (n - 1) for a in ref.tolist()], RTOL[dtype], False,
                     f"d/dx x ** {n}")


# |x| = 1 with the extreme exponents, exact powers of two, int wrapping, and |n| = 2**31 where bit 31 decides
# (|x| != 1: 0 or inf, not 1; 2 ** 2**31 wraps to 0): (base, exponent), exact results
LARGE = [(1.0, I32_MIN), (-1.0, I32_MIN), (-1.0, I32_MAX), (1.0, I32_MAX), (-1.0, 31), (-1.0, -31),
         (0.5, 31), (-0.5, 31), (-2.0, 31), (2.0, -31), (-2.0, -30), (-1.0, 2**31), (-1.0, 2**32 - 1),
         (1.5, I32_MIN), (-0.5, 2**31), (0.5, 2**32 - 1)]
LARGE_INT = [(-1, I32_MIN), (-1, I32_MAX), (1, I32_MIN), (-2, 31), (2, 31), (3, 31), (2, 32), (-1, -31),
             (7, I32_MAX), (-3, 2**32 - 1), (5, 2**31), (2, 2**31), (-6, 2**31 + 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=["f32", "f64", "i32"])
def test_large_exponents(dtype):
    """Exponents up to |INT_MIN| = 2**31 (a u32 beyond): all 32 bits of |n| are squared, none is lost."""
    need(dtype)
    rows = LARGE if dtype != np.int32 else LARGE_INT
    for exp_dtype, rows_of in ((np.int32, [r for r in rows if r[1] <= I32_MAX]),
                               (np.uint32, [r for r in rows if r[1] >= 0])):
        a = np.array([r[0] for r in rows_of], dtype)
        n = np.array([r[1] for r in rows_of], exp_dtype)
        y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64 if dtype == np.float64 else sp.i32, len(a))
        (_, _, dev), (_, _, interp) = launch_and_interpret(pow_loaded, sp.from_numpy(a), sp.from_numpy(n), y)
        if dtype == np.int32:
            want = wrapped([pow(int(p), int(k), 2**32) if k >= 0 else int_pow(int(p), int(k))
                            for p, k in rows_of], np.int32)
        else:
            want = np.array([float(p) ** int(k) for p, k in rows_of])
        assert_same(dev, want, what=f"device, {np.dtype(exp_dtype).name} exponents")
        assert_same(interp, want, what=f"interpreter, {np.dtype(exp_dtype).name} exponents")


def test_large_exponent_gradients():
    """d/dx x ** n = n x^(n-1) at |x| = 1 for n = INT_MIN, INT_MAX, +-31 (x^(n-1) keeps n's parity)."""
    rows = [(1.0, I32_MIN), (-1.0, I32_MIN), (-1.0, I32_MAX), (-1.0, 31), (-1.0, -31), (1.0, -31)]
    x = sp.from_numpy(np.array([r[0] for r in rows], np.float32), needs_grad=True)
    n = sp.from_numpy(np.array([r[1] for r in rows], np.int32))
    y = sp.ndarray(sp.f32, len(rows), needs_grad=True)
    pow_loaded(x, n, y)
    y.grad.fill(1.0)
    pow_loaded.grad(x, n, y)
    assert_same(x.grad.to_numpy(), np.array([k * a ** (k - 1) for a, k in rows], np.float32))   # n in f32


# constant exponents: name -> (kernel, exponent, the op it compiles to). Beyond the small ones (repeated
# multiplication) an integer (or integral float) constant is a POWI with a constant exponent, whose
# lowering squares only over the exponent's own bits.
CONSTANT_ROWS = {
    "x ** 33": (constant_power(33), 33, Op.POWI),
    "x ** -35": (constant_power(-35), -35, Op.POWI),
    "x ** 40.0": (constant_power(40.0), 40, Op.POWI),
    "sp.pow(x, 3)": (constant_power(3, True), 3, Op.MUL),   # as `**`: exact for x < 0, not GLSL pow
    "sp.pow(x, 36)": (constant_power(36, True), 36, Op.POWI),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_ROWS))
def test_constant_exponent(name, rng):
    kernel, k, op = CONSTANT_ROWS[name]
    x0 = signed_bases(rng, 0.8, 1.25).astype(np.float32)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, N_ELEMS, needs_grad=True)
    specs, _, _ = kernel._bind((x, y))
    ops = {s.op for t in kernel._compiled(specs).ir.tasks for s in N.walk(t.body) if isinstance(s, N.Compute)}
    assert op in ops and Op.POW not in ops
    kernel(x, y)
    ref = x0.astype(np.float64).tolist()
    assert_close(y.to_numpy(), [a ** k for a in ref], 2e-5, False, name)
    y.grad.fill(1.0)
    kernel.grad(x, y)
    assert_close(x.grad.to_numpy(), [k * a ** (k - 1) for a in ref], 2e-5, False, f"d/dx {name}")


# ---- derivatives ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,dtype", CASES, ids=CASE_IDS)
def test_reverse_gradient(name, dtype, rng):
    need(dtype)
    kernel, _, _, deriv, _, sums = ROWS[name]
    x0, n0, args = inputs(name, dtype, rng, needs_grad=True)
    x, _, y = args
    seed = rng.uniform(0.5, 1.5, N_ELEMS) * np.where(rng.random(N_ELEMS) < 0.5, -1.0, 1.0)
    kernel(*args)
    y.grad.from_numpy(seed.astype(dtype))
    x.grad.fill(0.0)
    straight = name != "loop_index"   # the interpreter needs adstack capacities: straight-line kernels only
    interp = interpret(kernel, "reverse", args)[(0, "grad")] if straight else None
    kernel.grad(*args)
    want = seed.astype(dtype).astype(np.float64) * deriv(x0, n0)
    assert_close(x.grad.to_numpy(), want, RTOL[dtype], sums, f"{name}: gradient vs n x^(n-1)")
    if straight:
        assert_close(interp, want, RTOL[dtype], sums, f"{name}: interpreted gradient vs n x^(n-1)")


@pytest.mark.parametrize("name,dtype", CASES, ids=CASE_IDS)
def test_forward_derivative(name, dtype, rng):
    need(dtype)
    kernel, _, value, deriv, _, sums = ROWS[name]
    x0, n0, args = inputs(name, dtype, rng, needs_dual=True)
    x, _, y = args
    seed = (rng.uniform(0.5, 1.5, N_ELEMS) * np.where(rng.random(N_ELEMS) < 0.5, -1.0, 1.0)).astype(dtype)
    x.dual.from_numpy(seed)
    interp = interpret(kernel, "dual", args)
    kernel.fwd(*args)
    want = seed.astype(np.float64) * deriv(x0, n0)
    assert_close(y.dual.to_numpy(), want, RTOL[dtype], sums, f"{name}: dual vs n x^(n-1)")
    assert_close(interp[(2, "dual")], want, RTOL[dtype], sums, f"{name}: interpreted dual vs n x^(n-1)")
    assert_close(y.to_numpy(), value(x0, n0), RTOL[dtype], sums, f"{name}: primal of the dual kernel")


def test_zero_exponent_has_a_zero_gradient_at_zero():
    """d/dx x ** 0 = 0 also at x = 0 (not 0 * x^-1 = NaN); d/dx x ** 1 = 1 there."""
    x = sp.from_numpy(np.array([0.0, 0.0, 0.0, -2.0], np.float32), needs_grad=True)
    n = sp.from_numpy(np.array([0, 1, 2, 0], np.int32))
    y = sp.ndarray(sp.f32, 4, needs_grad=True)
    pow_loaded(x, n, y)
    y.grad.fill(1.0)
    pow_loaded.grad(x, n, y)
    assert_same(y.to_numpy(), [1.0, 0.0, 0.0, 1.0])
    assert_same(x.grad.to_numpy(), [0.0, 1.0, 0.0, 0.0])

"""The sweep: every differentiable builtin that is an op of its own (sp.sin ... hypot, the operators), in every
derivative mode (value, k.grad, sp.Tape, k.fwd, in-kernel sp.grad) and dtype (f32, f64), against the exact result
(mpmath at 120 bits, closed-form derivatives) on random points, on Vulkan and on the interpreter. JAX's float64
was the first yardstick and is not exact enough for f64: at these points it is 14 ulp off for sinh, 17 for exp2,
and 243 for d expm1 (which it computes as expm1 + 1). (The math library's expansions, sp.erf ... sp.radians,
have their table in tests/kernel/test_more_math.py, edge values in tests/autodiff/test_edge_conventions.py.)

The stated rule (docs/language.md): a value is within ULPS[dtype] ulp of the exact result (correctly rounded
ops: +, -, *, /, sqrt, floor, ...: within 1 ulp; a row may say more, and says why); a derivative is within
DERIV_ULPS[dtype] ulp of the exact one, in units of the larger of the derivative and the row's derivative
scale (where a derivative passes through zero, its relative error is not meaningful).

All functions of one arity are one kernel, each function on its own column: `y[i, k] = f_k(a[i, k])`, so
`a.grad[i, k]` is f_k's derivative and one compile covers the row set."""
import mpmath
import numpy as np
import pytest

import spvad as sp


pytestmark = pytest.mark.backends

N = 96
ULPS = {np.float32: 4, np.float64: 2}
DERIV_ULPS = {np.float32: 16, np.float64: 16}


def uniform(lo, hi):
    return lambda rng: rng.uniform(lo, hi, N)


def log_uniform(lo, hi, signed=False):
    def draw(rng):
        v = np.exp(rng.uniform(np.log(lo), np.log(hi), N))
        return v * np.where(rng.random(N) < 0.5, -1.0, 1.0) if signed else v
    return draw


M = mpmath.mpf
PI = mpmath.pi


def step(c):
    return M(1) if c else M(0)


def trunc(v):
    return mpmath.floor(v) if v >= 0 else mpmath.ceil(v)


# name -> (exact value, exact partials per operand, operand samplers, value ulps (None: the dtype's rule),
#          derivative scale), all on mpmath numbers at 120 bits
UNARY = {
    "sin": (mpmath.sin, [mpmath.cos], [uniform(-40, 40)], None, 1.0),
    "cos": (mpmath.cos, [lambda x: -mpmath.sin(x)], [uniform(-40, 40)], None, 1.0),
    "tan": (mpmath.tan, [lambda x: 1 / mpmath.cos(x) ** 2], [uniform(-1.5, 1.5)], None, 1.0),
    "asin": (mpmath.asin, [lambda x: 1 / mpmath.sqrt(1 - x * x)], [uniform(-0.98, 0.98)], None, 1.0),
    "acos": (mpmath.acos, [lambda x: -1 / mpmath.sqrt(1 - x * x)], [uniform(-0.98, 0.98)], None, 1.0),
    "atan": (mpmath.atan, [lambda x: 1 / (1 + x * x)], [log_uniform(1e-3, 1e3, signed=True)], None, 0.0),
    "sinh": (mpmath.sinh, [mpmath.cosh], [uniform(-20, 20)], None, 0.0),
    "cosh": (mpmath.cosh, [mpmath.sinh], [uniform(-20, 20)], None, 0.0),
    # d tanh = 1 - tanh^2 of the rounded tanh (as JAX): its error is absolute, in units of the derivative at 0
    "tanh": (mpmath.tanh, [lambda x: 1 / mpmath.cosh(x) ** 2], [uniform(-6, 6)], None, 1.0),
    "exp": (mpmath.exp, [mpmath.exp], [uniform(-30, 30)], None, 0.0),
    "exp2": (lambda x: mpmath.power(2, x), [lambda x: mpmath.power(2, x) * mpmath.log(2)], [uniform(-40, 40)],
             None, 0.0),
    "expm1": (mpmath.expm1, [mpmath.exp], [log_uniform(1e-6, 10, signed=True)], None, 0.0),
    "log": (mpmath.log, [lambda x: 1 / x], [log_uniform(1e-4, 1e4)], None, 0.0),
    "log2": (lambda x: mpmath.log(x, 2), [lambda x: 1 / (x * mpmath.log(2))], [log_uniform(1e-4, 1e4)], None, 0.0),
    "log10": (mpmath.log10, [lambda x: 1 / (x * mpmath.log(10))], [log_uniform(1e-4, 1e4)], None, 0.0),
    "log1p": (mpmath.log1p, [lambda x: 1 / (1 + x)], [log_uniform(1e-6, 0.9, signed=True)], None, 0.0),
    "sqrt": (mpmath.sqrt, [lambda x: 1 / (2 * mpmath.sqrt(x))], [log_uniform(1e-4, 1e4)], 1, 0.0),
    "rsqrt": (lambda x: 1 / mpmath.sqrt(x), [lambda x: -x ** M(-1.5) / 2], [log_uniform(1e-4, 1e4)], None, 0.0),
    "abs": (abs, [lambda x: step(x > 0) - step(x < 0)], [uniform(-5, 5)], 0, 1.0),
    "floor": (mpmath.floor, [lambda x: M(0)], [uniform(-5, 5)], 0, 1.0),
    "ceil": (mpmath.ceil, [lambda x: M(0)], [uniform(-5, 5)], 0, 1.0),
    "round": (lambda x: M(float(np.round(float(x)))), [lambda x: M(0)], [uniform(-5, 5)], 0, 1.0),
    "sign": (lambda x: step(x > 0) - step(x < 0), [lambda x: M(0)], [uniform(-5, 5)], 0, 1.0),
    "neg": (lambda x: -x, [lambda x: M(-1)], [uniform(-5, 5)], 0, 1.0),
}
BINARY = {
    "atan2": (mpmath.atan2, [lambda y, x: x / (x * x + y * y), lambda y, x: -y / (x * x + y * y)],
              [uniform(-3, 3), uniform(-3, 3)], None, 0.0),
    "pow": (mpmath.power, [lambda a, b: b * mpmath.power(a, b - 1), lambda a, b: mpmath.power(a, b) * mpmath.log(a)],
            [log_uniform(0.05, 5), uniform(-3, 3)], None, 0.0),
    "hypot": (mpmath.hypot, [lambda a, b: a / mpmath.hypot(a, b), lambda a, b: b / mpmath.hypot(a, b)],
              [uniform(-5, 5), uniform(-5, 5)], None, 1.0),
    "fmod": (lambda a, b: a - b * trunc(a / b), [lambda a, b: M(1), lambda a, b: -trunc(a / b)],
             [uniform(-10, 10), uniform(0.5, 3)], 0, 1.0),
    "min": (min, [lambda a, b: step(a < b), lambda a, b: step(b < a)], [uniform(-5, 5), uniform(-5, 5)], 0, 1.0),
    "max": (max, [lambda a, b: step(a > b), lambda a, b: step(b > a)], [uniform(-5, 5), uniform(-5, 5)], 0, 1.0),
    "add": (lambda a, b: a + b, [lambda a, b: M(1), lambda a, b: M(1)], [uniform(-5, 5), uniform(-5, 5)], 1, 1.0),
    "sub": (lambda a, b: a - b, [lambda a, b: M(1), lambda a, b: M(-1)], [uniform(-5, 5), uniform(-5, 5)], 1, 1.0),
    "mul": (lambda a, b: a * b, [lambda a, b: b, lambda a, b: a], [uniform(-5, 5), uniform(-5, 5)], 1, 1.0),
    "div": (lambda a, b: a / b, [lambda a, b: 1 / b, lambda a, b: -a / (b * b)],
            [uniform(-5, 5), log_uniform(0.1, 5, signed=True)], 1, 0.0),
    "power": (mpmath.power, [lambda a, b: b * mpmath.power(a, b - 1), lambda a, b: mpmath.power(a, b) * mpmath.log(a)],
              [log_uniform(0.05, 5), uniform(-3, 3)], None, 0.0),
    "floordiv": (lambda a, b: mpmath.floor(a / b), [lambda a, b: M(0), lambda a, b: M(0)],
                 [uniform(-10, 10), uniform(0.5, 3)], 0, 1.0),
    "mod": (lambda a, b: a - b * mpmath.floor(a / b), [lambda a, b: M(1), lambda a, b: -mpmath.floor(a / b)],
            [uniform(-10, 10), uniform(0.5, 3)], 0, 1.0),
}
TERNARY = {
    "clamp": (lambda x, lo, hi: min(max(x, lo), hi),
              [lambda x, lo, hi: step(lo < x < hi), lambda x, lo, hi: step(x < lo), lambda x, lo, hi: step(x > hi)],
              [uniform(-3, 3), uniform(-2, -0.5), uniform(0.5, 2)], 0, 1.0),
    "select": (lambda c, a, b: a if c > 0 else b,
               [lambda c, a, b: M(0), lambda c, a, b: step(c > 0), lambda c, a, b: step(c <= 0)],
               [uniform(-1, 1), uniform(-5, 5), uniform(-5, 5)], 0, 1.0),
}


@sp.kernel
def unary(a: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i, 0] = sp.sin(a[i, 0])
        y[i, 1] = sp.cos(a[i, 1])
        y[i, 2] = sp.tan(a[i, 2])
        y[i, 3] = sp.asin(a[i, 3])
        y[i, 4] = sp.acos(a[i, 4])
        y[i, 5] = sp.atan(a[i, 5])
        y[i, 6] = sp.sinh(a[i, 6])
        y[i, 7] = sp.cosh(a[i, 7])
        y[i, 8] = sp.tanh(a[i, 8])
        y[i, 9] = sp.exp(a[i, 9])
        y[i, 10] = sp.exp2(a[i, 10])
        y[i, 11] = sp.expm1(a[i, 11])
        y[i, 12] = sp.log(a[i, 12])
        y[i, 13] = sp.log2(a[i, 13])
        y[i, 14] = sp.log10(a[i, 14])
        y[i, 15] = sp.log1p(a[i, 15])
        y[i, 16] = sp.sqrt(a[i, 16])
        y[i, 17] = sp.rsqrt(a[i, 17])
        y[i, 18] = abs(a[i, 18])
        y[i, 19] = sp.floor(a[i, 19])
        y[i, 20] = sp.ceil(a[i, 20])
        y[i, 21] = sp.round(a[i, 21])
        y[i, 22] = sp.sign(a[i, 22])
        y[i, 23] = -a[i, 23]


@sp.kernel
def binary(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i, 0] = sp.atan2(a[i, 0], b[i, 0])
        y[i, 1] = sp.pow(a[i, 1], b[i, 1])
        y[i, 2] = sp.hypot(a[i, 2], b[i, 2])
        y[i, 3] = sp.fmod(a[i, 3], b[i, 3])
        y[i, 4] = sp.min(a[i, 4], b[i, 4])
        y[i, 5] = sp.max(a[i, 5], b[i, 5])
        y[i, 6] = a[i, 6] + b[i, 6]
        y[i, 7] = a[i, 7] - b[i, 7]
        y[i, 8] = a[i, 8] * b[i, 8]
        y[i, 9] = a[i, 9] / b[i, 9]
        y[i, 10] = a[i, 10] ** b[i, 10]
        y[i, 11] = a[i, 11] // b[i, 11]
        y[i, 12] = a[i, 12] % b[i, 12]


@sp.kernel
def ternary(a: sp.Array, b: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i, 0] = sp.clamp(a[i, 0], b[i, 0], c[i, 0])
        y[i, 1] = sp.select(a[i, 1] > 0.0, b[i, 1], c[i, 1])


@sp.func
def d_sin(x):
    return sp.sin(x)


@sp.func
def d_cos(x):
    return sp.cos(x)


@sp.func
def d_tan(x):
    return sp.tan(x)


@sp.func
def d_exp(x):
    return sp.exp(x)


@sp.func
def d_log1p(x):
    return sp.log1p(x)


@sp.func
def d_atan2(y, x):
    return sp.atan2(y, x)


@sp.func
def d_pow(a, b):
    return a ** b


@sp.kernel
def in_kernel(a: sp.Array, b: sp.Array, y: sp.Array):
    """sp.grad of a func per builtin family (trig, exp/log, two-argument): the in-kernel transform's rules."""
    for i in range(a.shape[0]):
        y[i, 0] = sp.grad(d_sin)(a[i, 0])
        y[i, 1] = sp.grad(d_cos)(a[i, 1])
        y[i, 2] = sp.grad(d_tan)(a[i, 2])
        y[i, 3] = sp.grad(d_exp)(a[i, 9])
        y[i, 4] = sp.grad(d_log1p)(a[i, 15])
        g = sp.grad(d_atan2, argnums=(0, 1))(b[i, 0], b[i, 1])
        y[i, 5] = g[0]
        y[i, 6] = g[1]
        h = sp.grad(d_pow, argnums=(0, 1))(b[i, 2], b[i, 3])
        y[i, 7] = h[0]
        y[i, 8] = h[1]


TABLES = {1: (UNARY, unary), 2: (BINARY, binary), 3: (TERNARY, ternary)}
DTYPES = {"f32": np.float32, "f64": np.float64}


def need(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def operands(rows, arity, dtype, rng):
    """arity arrays of shape (N, len(rows)): column k holds row k's samples of that operand."""
    cols = [[row[2][j](rng) for row in rows.values()] for j in range(arity)]
    return [np.stack(c, axis=1).astype(dtype) for c in cols]


def exact(fn, args):
    """fn at each point of the float operands, exactly (mpmath, 120 bits), rounded to float64."""
    with mpmath.workprec(120):
        return np.array([float(fn(*[M(float(a[j])) for a in args])) for j in range(len(args[0]))])


def ulps(got, want, dtype):
    w = np.abs(want.astype(dtype))
    return np.abs(got.astype(np.float64) - want) / np.maximum(np.spacing(w), np.finfo(dtype).smallest_subnormal)


def check_values(rows, args, got, dtype):
    bad = []
    for k, (name, (fn, _, _, allowed, _)) in enumerate(rows.items()):
        want = exact(fn, [a[:, k] for a in args])
        limit = ULPS[dtype] if allowed is None else max(allowed, 0.5)
        err = ulps(got[:, k], want, dtype)
        if not np.all(err <= limit):
            j = int(np.argmax(err))
            bad.append(f"{name}: {err[j]:.1f} ulp > {limit} at {tuple(float(a[j, k]) for a in args)}: got "
                       f"{float(got[j, k])!r}, want {float(want[j])!r}")
    assert not bad, f"values ({np.dtype(dtype).name}):\n" + "\n".join(bad)


def check_derivative(name, got, want, scale, dtype, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    unit = np.spacing(np.maximum(np.abs(want), scale).astype(dtype)).astype(np.float64)
    err = np.abs(got - want) / np.maximum(unit, np.finfo(dtype).tiny)
    if not np.all(err <= DERIV_ULPS[dtype]):
        j = int(np.argmax(err))
        return [f"{name} {what}: {err[j]:.1f} ulp at #{j}: got {got[j]!r}, want {want[j]!r}"]
    return []


def run_value(kernel, args, dtype, rows):
    y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64, (N, len(rows)))
    kernel(*[sp.from_numpy(a) for a in args], y)
    return y.to_numpy()


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("arity", [1, 2, 3])
def test_values(arity, dtype, rng):
    need(dtype)
    rows, kernel = TABLES[arity]
    args = operands(rows, arity, dtype, rng)
    check_values(rows, args, run_value(kernel, args, dtype, rows), dtype)


_PARTIALS = {}   # (rows, operand bytes) -> the exact partials: every mode and backend draws the same operands


def each_partial(rows, args):
    key = (id(rows), tuple(a.tobytes() for a in args))
    if key not in _PARTIALS:
        _PARTIALS[key] = [(k, name, scale, [exact(d, [a[:, k] for a in args]) for d in ds])
                          for k, (name, (_, ds, _, _, scale)) in enumerate(rows.items())]
    return _PARTIALS[key]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("arity", [1, 2, 3])
def test_reverse_and_tape(arity, dtype, rng):
    """k.grad with y.grad = 1, and sp.Tape over a loss that sums every column: both give each f_k's partials."""
    need(dtype)
    rows, kernel = TABLES[arity]
    args = operands(rows, arity, dtype, rng)
    dt = sp.f32 if dtype == np.float32 else sp.f64
    dev = [sp.from_numpy(a, needs_grad=True) for a in args]
    y = sp.ndarray(dt, (N, len(rows)), needs_grad=True)
    kernel(*dev, y)
    y.grad.fill(1.0)
    kernel.grad(*dev, y)
    by_grad = [d.grad.to_numpy() for d in dev]
    loss = sp.ndarray(dt, (), needs_grad=True)
    with sp.Tape(loss=loss):
        kernel(*dev, y)
        column_sum(y, loss)
    by_tape = [d.grad.to_numpy() for d in dev]
    bad = []
    for k, name, scale, want in each_partial(rows, args):
        for j, w in enumerate(want):
            bad += check_derivative(name, by_grad[j][:, k], w, scale, dtype, f"k.grad operand {j}")
            bad += check_derivative(name, by_tape[j][:, k], w, scale, dtype, f"sp.Tape operand {j}")
    assert not bad, "\n".join(bad)


@sp.kernel
def column_sum(y: sp.Array, loss: sp.Array):
    for i, k in y:
        loss[None] += y[i, k]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("arity", [1, 2, 3])
def test_forward_mode(arity, dtype, rng):
    """k.fwd with one operand's .dual all ones at a time: y.dual[:, k] is f_k's partial in that operand."""
    need(dtype)
    rows, kernel = TABLES[arity]
    args = operands(rows, arity, dtype, rng)
    dt = sp.f32 if dtype == np.float32 else sp.f64
    want = {k: (name, scale, p) for k, name, scale, p in each_partial(rows, args)}
    bad = []
    for j in range(arity):
        dev = [sp.from_numpy(a, needs_dual=m == j) for m, a in enumerate(args)]
        dev[j].dual.fill(1.0)
        y = sp.ndarray(dt, (N, len(rows)), needs_dual=True)
        kernel.fwd(*dev, y)
        got = y.dual.to_numpy()
        for k, (name, scale, p) in want.items():
            bad += check_derivative(name, got[:, k], p[j], scale, dtype, f"k.fwd operand {j}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_in_kernel_grad(dtype, rng):
    need(dtype)
    a, b = operands(UNARY, 1, dtype, rng)[0], operands(BINARY, 2, dtype, rng)
    pts = np.stack([b[0][:, 0], b[1][:, 0], b[0][:, 1], b[1][:, 1]], axis=1)   # atan2 (y, x), pow (a, b)
    y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64, (N, 9))
    in_kernel(sp.from_numpy(a), sp.from_numpy(pts), y)
    got = y.to_numpy()
    d = lambda name, x: exact(UNARY[name][1][0], [x])  # noqa: E731
    wants = [("sin", d("sin", a[:, 0])), ("cos", d("cos", a[:, 1])), ("tan", d("tan", a[:, 2])),
             ("exp", d("exp", a[:, 9])), ("log1p", d("log1p", a[:, 15]))]
    wants += [(f"atan2 d/d{v}", exact(p, [pts[:, 0], pts[:, 1]])) for v, p in zip("yx", BINARY["atan2"][1])]
    wants += [(f"pow d/d{v}", exact(p, [pts[:, 2], pts[:, 3]])) for v, p in zip("ab", BINARY["pow"][1])]
    bad = []
    for k, (name, want) in enumerate(wants):
        bad += check_derivative(name, got[:, k], want, 1.0 if k < 3 else 0.0, dtype, "in-kernel sp.grad")
    assert not bad, "\n".join(bad)

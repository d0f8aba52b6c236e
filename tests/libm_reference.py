"""The math library's yardstick: each expandable function's mpmath reference, its dense samples per dtype (random over
the whole domain, log-uniform magnitudes, tiny, huge, subnormal, near poles and the ends of the range, the special
values) and its error in ulps of the correctly rounded result. Shared by tests/ir/test_libm_accuracy.py,
tests/spirv/test_libm_bits.py and benchmarks/libm_ulps.py (rows for more functions go in REFERENCE and SAMPLERS).
"""
import mpmath
import numpy as np

from spvad import types as T
from spvad.ir.ops import Op
from spvad.ir.scalar_ops import eval_op

GOAL = {T.f32: 4.0, T.f64: 2.0}   # ulps, over the whole domain
PRECISION = {T.f32: 24, T.f64: 53}
MIN_EXP = {T.f32: -126, T.f64: -1022}
SPECIALS = (0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0)


def _positive(fn):
    """fn on x > 0; NaN below, as numpy gives (the pole at 0 is a special value: numpy's result is compared)."""
    return lambda x: fn(x) if x > 0 else None


# name -> (Op, number of operands, mpmath function of mpf operands: an mpf, or None for NaN)
REFERENCE = {
    "exp": (Op.EXP, 1, mpmath.exp),
    "exp2": (Op.EXP2, 1, lambda x: mpmath.power(2, x)),
    "expm1": (Op.EXPM1, 1, mpmath.expm1),
    "log": (Op.LOG, 1, _positive(mpmath.log)),
    "log2": (Op.LOG2, 1, _positive(lambda x: mpmath.log(x, 2))),
    "log10": (Op.LOG10, 1, _positive(mpmath.log10)),
    "log1p": (Op.LOG1P, 1, lambda x: mpmath.log1p(x) if x > -1 else None),
    "sinh": (Op.SINH, 1, mpmath.sinh),
    "cosh": (Op.COSH, 1, mpmath.cosh),
    "tanh": (Op.TANH, 1, mpmath.tanh),
    "pow": (Op.POW, 2, lambda x, y: mpmath.power(x, y) if x > 0 or (x < 0 and y == mpmath.floor(y)) else None),
    "rsqrt": (Op.RSQRT, 1, _positive(lambda x: 1 / mpmath.sqrt(x))),
    "hypot": (Op.HYPOT, 2, lambda x, y: mpmath.hypot(x, y)),
}
NUMPY = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
         "log1p": np.log1p, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
         "pow": lambda x, y: eval_op(Op.POW, T.f64 if x.dtype == np.float64 else T.f32, [x, y]),   # C99, as today
         "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x),
         "hypot": lambda x, y: eval_op(Op.HYPOT, T.f64 if x.dtype == np.float64 else T.f32, [x, y])}


def _log_uniform(rng, lo_exp, hi_exp, n, signed=False):
    v = np.exp2(rng.uniform(lo_exp, hi_exp, n))
    return v * rng.choice([-1.0, 1.0], n) if signed else v


def _near(values, dt, k=4):
    """Each value and its k neighbours on either side in the dtype."""
    v = np.asarray(values, dt.np)
    out = [v]
    up, down = v.copy(), v.copy()
    for _ in range(k):
        up, down = np.nextafter(up, dt.np.type(np.inf)), np.nextafter(down, dt.np.type(-np.inf))
        out += [up, down]
    return np.concatenate(out)


def _subnormals(rng, dt, n):
    smallest = np.finfo(dt.np).smallest_subnormal
    return (rng.integers(1, 2 ** (PRECISION[dt] - 1), n).astype(np.float64) * float(smallest)).astype(dt.np)


def _exp_like(lim, underflow, overflow):
    """Samples of exp-like functions: the whole range and past it, small, tiny, subnormal, the ends of the range."""
    def sample(rng, dt, n):
        f64 = dt == T.f64
        return [np.concatenate([rng.uniform(-lim[f64], lim[f64], n), rng.uniform(-2, 2, n // 4),
                                _log_uniform(rng, -40 if not f64 else -100, 0, n // 4, signed=True),
                                _subnormals(rng, dt, 16), _near([underflow[f64], overflow[f64]], dt),
                                rng.uniform(underflow[f64], underflow[f64] + 20, n // 8)])]
    return sample


def _logs(rng, dt, n):
    f64 = dt == T.f64
    lo, hi = (-1074, 1024) if f64 else (-149, 128)
    return [np.concatenate([_log_uniform(rng, lo, hi, n), 1 + rng.uniform(-2 ** -10, 2 ** -10, n // 4),
                            _near([1.0, 2.0, 0.5, np.sqrt(2.0)], dt), _subnormals(rng, dt, 16),
                            rng.uniform(0.5, 2.0, n // 4), -_log_uniform(rng, -10, 10, 8)])]


def _log1p(rng, dt, n):
    f64 = dt == T.f64
    hi = 1024 if f64 else 128
    tiny = -1074 if f64 else -149
    return [np.concatenate([_log_uniform(rng, tiny, hi, n // 2), -_log_uniform(rng, tiny, 0, n // 2),
                            -1 + _log_uniform(rng, -50 if f64 else -23, -1, n // 4), rng.uniform(-1, 1, n // 4),
                            _near([-1.0, -0.2928932188134524, 0.41421356237309503], dt), -1.5 - np.arange(4.0)])]


def _hyperbolic(lim):
    def sample(rng, dt, n):
        f64 = dt == T.f64
        return [np.concatenate([rng.uniform(-lim[f64], lim[f64], n), rng.uniform(-3, 3, n // 2),
                                _log_uniform(rng, -60 if f64 else -30, 0, n // 4, signed=True),
                                _subnormals(rng, dt, 16), _near([0.5493061443340548, 1.0, 22.0, 9.0, 20.0], dt)])]
    return sample


def _pow(rng, dt, n):
    f64 = dt == T.f64
    m = n // 4
    x = np.concatenate([_log_uniform(rng, -30, 30, m), rng.uniform(0.5, 2, m), 1 + rng.uniform(-1e-6, 1e-6, m),
                        _log_uniform(rng, -1074 if f64 else -149, 1024 if f64 else 128, m),
                        -np.floor(rng.uniform(1, 20, m))])
    y = np.concatenate([rng.uniform(-40, 40, m), rng.uniform(-300, 300, m) if f64 else rng.uniform(-60, 60, m),
                        rng.uniform(-1e7, 1e7, m) if f64 else rng.uniform(-3e5, 3e5, m), rng.uniform(-2, 2, m),
                        np.floor(rng.uniform(-30, 30, m))])
    return [x, y]


# name -> sampler(rng, dtype, n) -> list of operand arrays (the special values are added to every sampler's)
SAMPLERS = {
    "exp": _exp_like({False: 110.0, True: 760.0}, {False: -103.97, True: -745.13}, {False: 88.72, True: 709.78}),
    "exp2": _exp_like({False: 155.0, True: 1080.0}, {False: -149.0, True: -1074.0}, {False: 128.0, True: 1024.0}),
    "expm1": _exp_like({False: 110.0, True: 760.0}, {False: -17.0, True: -38.0}, {False: 88.72, True: 709.78}),
    "log": _logs, "log2": _logs, "log10": _logs, "log1p": _log1p,
    "sinh": _hyperbolic({False: 95.0, True: 715.0}), "cosh": _hyperbolic({False: 95.0, True: 715.0}),
    "tanh": _hyperbolic({False: 12.0, True: 25.0}),
    "pow": _pow,
    "rsqrt": _logs,
    "hypot": lambda rng, dt, n: [_log_uniform(rng, -140 if dt == T.f32 else -1060, 120 if dt == T.f32 else 1000,
                                               2 * n, signed=True) for _ in range(2)],
}


def samples(name, dt, n, rng):
    """Operand arrays of dtype `dt`: about 2n dense samples, then the special values (and their pairs)."""
    args = [np.asarray(a, np.float64).astype(dt.np) for a in SAMPLERS[name](rng, dt, n)]
    sp = np.array(SPECIALS, dt.np)
    if len(args) == 1:
        return [np.concatenate([args[0], sp])]
    a, b = np.meshgrid(np.concatenate([sp, np.array([0.5, 2.0, -2.0], dt.np)]),
                       np.concatenate([sp, np.array([0.5, 2.0, 3.0, -3.0], dt.np)]))
    return [np.concatenate([x, s.ravel().astype(dt.np)]) for x, s in zip(args, (a, b))]


def ulp_errors(name, dt, args, got, reference=None):
    """The error of each result in ulps of the correctly rounded one: 0 for a right special value (NaN where
    the reference is NaN, inf where it overflows), inf for a wrong one. `reference`: an mpmath function for a
    name outside REFERENCE (finite operands and results only)."""
    fn = reference or REFERENCE[name][2]
    p, emin = PRECISION[dt], MIN_EXP[dt]
    big = mpmath.ldexp(2 - mpmath.ldexp(1, -p), np.finfo(dt.np).maxexp - 1)   # max + ulp/2: rounds to inf
    out = np.zeros(len(got))
    with mpmath.workprec(128):
        for k, g in enumerate(np.asarray(got, np.float64)):
            out[k] = _error(fn, name, dt, [a[k] for a in args], g, big, p, emin)
    return out


def _error(fn, name, dt, operands, g, big, p, emin):
    """One result's error in ulps (see ulp_errors)."""
    ops = [float(a) for a in operands]
    r = fn(*map(mpmath.mpf, ops)) if all(np.isfinite(ops)) else None
    if r is None:   # special operands or a NaN result: today's value (numpy's, C99's for pow) exactly
        with np.errstate(all="ignore"):
            want = NUMPY[name](*(dt.np.type(v) for v in ops))
        return 0.0 if (np.isnan(want) and np.isnan(g)) or want == g else np.inf
    if abs(r) >= big:
        return 0.0 if g == (np.inf if r > 0 else -np.inf) else np.inf
    if not np.isfinite(g):
        return np.inf
    if r == 0:
        return 0.0 if g == 0 else np.inf
    e = max(int(mpmath.frexp(r)[1]) - 1, emin)
    return float(abs(mpmath.mpf(float(g)) - r) / mpmath.ldexp(1, e - p + 1))


def _spread(lo, hi, tiny=True):
    """Samples of a function of ir/math_functions.py on [lo, hi]: uniform, small, log-uniform tiny."""
    def sample(rng, dt, n):
        parts = [rng.uniform(lo, hi, n), rng.uniform(max(lo, -3.0), min(hi, 3.0), n // 2)]
        if tiny:
            parts.append(_log_uniform(rng, -40, 0, n // 4, signed=lo < 0))
        x = np.concatenate(parts)
        return [x[(x >= lo) & (x <= hi)]]
    return sample


# Functions of ir/math_functions.py (expansions into the Ops, built before autodiff): name -> (mpmath function,
# sampler); their f32 and f64 errors are in docs/language.md's table with the Ops'
EXPANDED = {
    "exp10": (lambda x: mpmath.power(10, x), _spread(-330.0, 310.0)),
    "sigmoid": (lambda x: 1 / (1 + mpmath.exp(-x)), _spread(-740.0, 40.0)),
    "softplus": (lambda x: mpmath.log1p(mpmath.exp(x)), _spread(-740.0, 40.0)),
    "log_sigmoid": (lambda x: -mpmath.log1p(mpmath.exp(-x)), _spread(-40.0, 740.0)),
    "asinh": (mpmath.asinh, _spread(-1e10, 1e10)),
    "acosh": (mpmath.acosh, lambda rng, dt, n: [np.concatenate([1 + _log_uniform(rng, -40, 0, n),
                                                                _log_uniform(rng, 0, 60, n)])]),
    "atanh": (mpmath.atanh, _spread(-0.999999, 0.999999)),
    "cbrt": (lambda x: mpmath.sign(x) * mpmath.cbrt(abs(x)), _spread(-1e30, 1e30)),
    "erf": (mpmath.erf, _spread(-6.0, 6.0)),
    "erfc": (mpmath.erfc, _spread(-6.0, 27.0)),
}


def expanded_samples(name, dt, n, rng):
    """EXPANDED's samples of `name` in dtype `dt`, finite there (f32 narrows the ranges)."""
    x = EXPANDED[name][1](rng, dt, n)[0]
    with np.errstate(over="ignore"):
        x = x.astype(dt.np)
    return [x[np.isfinite(x)]]


# ---- the trig family (ir/libm/trig.py; tests/ir/test_libm_trig.py) ----
# f32 close to multiples of pi/2 (16367173 2^72 the closest of all, 2^-29.2 off), f64's closest of all (2^-61)
HARD_TRIG = {T.f32: [252.89820861816406, 505.7964172363281, 2023.1856689453125, 2238.384765625, 4476.76953125,
                     52516.43359375, 105032.8671875, 267058.9375, 2709675.5, 42781604.0, 16367173.0 * 2.0 ** 72,
                     10741887.0 * 2.0 ** 11, 9012376.0 * 2.0 ** 53, 10057457.0 * 2.0 ** 62],
             T.f64: [6381956970095103.0 * 2.0 ** 797, 5.319372648326541e+255, 1e22, 2.0 ** 1023 * 1.5]}


def _trig(rng, dt, n):
    """Small, moderate, log-uniform over the whole range, near multiples of pi/2 and the reductions' seams (f64's
    Cody-Waite/Payne-Hanek bounds; f32's pi/4 and the exponents where its 2/pi window moves, 2^(8j - 127))."""
    f64, top = dt == T.f64, np.finfo(dt.np).maxexp
    k = np.concatenate([np.arange(1, 64), rng.integers(64, 2 ** 12, 64), rng.integers(2 ** 12, 2 ** 30, 32)])
    return [np.concatenate([rng.uniform(-10, 10, n), rng.uniform(-7000, 7000, n // 4),
                            _log_uniform(rng, -30, top - 0.01, n, signed=True), _log_uniform(rng, 10, 25, n // 4),
                            _near(k * (np.pi / 2), dt, 2), _near(HARD_TRIG[dt], dt, 2), _subnormals(rng, dt, 16),
                            _near([6400.0, 1.6e6, 2.0 ** 20 * np.pi / 2, 2.0 ** 24, 2.0 ** (53 if f64 else 23)], dt, 2),
                            _near([np.pi / 4] + [2.0 ** (8 * j - 127) for j in range(16, 32)], dt, 2),
                            [np.finfo(dt.np).max, -np.finfo(dt.np).max, 2.0 ** -126, 0.785, -0.785]])]


def _asin(rng, dt, n):
    near_one = 1.0 - np.exp2(-rng.uniform(1, PRECISION[dt], n // 4))
    x = np.concatenate([rng.uniform(-1, 1, n), near_one, -near_one, _near([0.5, -0.5, 1.0, -1.0, 0.975], dt),
                        _log_uniform(rng, -150 if dt == T.f32 else -1070, -1, n // 4, signed=True),
                        _subnormals(rng, dt, 16)])
    return [x[np.abs(x) <= 1.0]]


def _atan(rng, dt, n):
    cuts = [0.4375, 0.6875, 1.1875, 2.4375]
    return [np.concatenate([np.tan(rng.uniform(-1.5707, 1.5707, n)), _subnormals(rng, dt, 16),
                            _log_uniform(rng, -149, np.finfo(dt.np).maxexp, n, signed=True),
                            _near(cuts + [-c for c in cuts], dt), [np.finfo(dt.np).max]])]


def _atan2(rng, dt, n):
    """Both signs, ratios over the whole range and at atan's bucket edges, operands tiny to huge."""
    lo, hi = (-149, 128) if dt == T.f32 else (-1074, 1024)
    c = rng.choice([0.4375, 0.6875, 1.1875, 2.4375], n // 4) * rng.choice([-1, 1], n // 4)
    xc = rng.normal(size=n // 4)
    y = np.concatenate([rng.normal(size=n) * 10.0 ** rng.integers(-5, 6, n), c * xc,
                        _log_uniform(rng, lo, hi, n // 4, signed=True)])
    x = np.concatenate([rng.normal(size=n) * 10.0 ** rng.integers(-5, 6, n), xc,
                        _log_uniform(rng, lo, hi, n // 4, signed=True)])
    with np.errstate(over="ignore"):
        ok = np.isfinite(y.astype(dt.np)) & np.isfinite(x.astype(dt.np))
    return [y[ok], x[ok]]


REFERENCE.update({
    "sin": (Op.SIN, 1, mpmath.sin), "cos": (Op.COS, 1, mpmath.cos), "tan": (Op.TAN, 1, mpmath.tan),
    "asin": (Op.ASIN, 1, lambda x: mpmath.asin(x) if abs(x) <= 1 else None),
    "acos": (Op.ACOS, 1, lambda x: mpmath.acos(x) if abs(x) <= 1 else None),
    "atan": (Op.ATAN, 1, mpmath.atan),
    "atan2": (Op.ATAN2, 2, lambda y, x: mpmath.atan2(y, x) if y != 0 and x != 0 else None)})   # zeros: numpy's
NUMPY.update({"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
              "atan2": np.arctan2})
SAMPLERS.update({"sin": _trig, "cos": _trig, "tan": _trig, "asin": _asin, "acos": _asin, "atan": _atan,
                 "atan2": _atan2})

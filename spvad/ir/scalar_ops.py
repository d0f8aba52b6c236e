"""Scalar semantics of the IR's ops: EVAL, one row per Op, computing what the device computes on numpy scalars
of each statement's dtype (f32 math stays f32). The interpreter (interp.py) and constant folding (simplify.py)
evaluate every Compute through `eval_op`; spirv/lower_ops.py lowers each op to the same values.
"""
import math

import numpy as np

from ..types import INT_RANGE
from .ops import Op

def _wrap(v, dt):
    """An integer Python value wrapped to `dt`'s 32 bits, as the GPU's two's-complement arithmetic does."""
    v = int(v) & 0xFFFFFFFF
    if dt.kind == "i" and v >= 0x80000000:
        v -= 0x100000000
    return dt.np.type(v)


def _arith(int_fn, float_fn):
    """One row for an op whose integer form is computed on Python ints and wrapped to 32 bits."""
    return lambda dt, *a: _wrap(int_fn(*map(int, a)), dt) if dt.is_int else float_fn(*a)


def _round(dt, a):
    # Half to even, as numpy and Python round (GLSL RoundEven; Round leaves halves to the implementation)
    return np.rint(a)


def _sign(dt, a):
    if dt.is_int:
        return dt.np.type((int(a) > 0) - (int(a) < 0))
    return np.sign(a)


def _int_div(fn):
    def row(a, b):
        if b == 0:
            raise ZeroDivisionError("integer division by zero")
        return fn(a, b)
    return row


def _shift(fn):
    # GPU shifts by >= 32 are undefined; we use the low 5 bits of the shift amount, as x86 and most GPUs do.
    return lambda dt, a, b: _wrap(fn(int(a), int(b) & 31), dt)


def _cast(dt, a):
    """CAST to `dt`: float->int truncates toward zero and saturates (NaN -> 0, beyond the type -> its
    nearest end; spirv/lower_ops._float_to_int), bool->number gives 0/1, number->bool is `!= 0`, int->int
    keeps the 32-bit pattern."""
    if dt.is_bool:
        return np.bool_(a != 0)
    if isinstance(a, np.bool_):
        return dt.np.type(int(a))
    if dt.is_int:
        if isinstance(a, np.floating):
            lo, hi = INT_RANGE[dt.name]
            v = float(a)
            t = 0 if v != v else math.trunc(v) if math.isfinite(v) else hi if v > 0 else lo
            return dt.np.type(min(max(t, lo), hi))
        return _wrap(a, dt)
    return dt.np.type(a)


def _powi(dt, x, n):
    """`x ** n` for an i32/u32 exponent (ops.py Op.POWI): floats multiply by squaring in their own dtype,
    in the order the SPIR-V lowering does (bit 0 up), so f32 results agree bit for bit."""
    n = int(n)
    m = abs(n)   # < 2**32 also for i32 INT_MIN
    if dt.is_int:
        x = int(x)
        if n >= 0:
            return _wrap(pow(x, m, 2**32), dt)   # multiplication modulo 2**32 is the GPU's wrapping one
        return dt.np.type(1 if x == 1 else (-1) ** m if x == -1 else 0)   # truncation of x ** n
    r, b = dt.np.type(1), x
    while m:
        if m & 1:
            r = r * b
        m >>= 1
        b = b * b
    return dt.np.type(1) / r if n < 0 else r


def _float_only(fn):
    return lambda dt, *a: fn(*a)


def _in_f32(fn):
    """A row the device computes in f32 whatever the float type: GLSL.std.450 defines its instruction for
    16/32-bit floats only, so the lowering narrows f64 operands and widens the result (L.glsl(...,
    narrow=True), lower_ops._in_f32): an f64 result has f32 accuracy."""
    return lambda dt, *a: dt.np.type(fn(*(np.float32(x) for x in a)))


def _expm1(x):
    # Kahan: u = exp(x) rounds, but (u - 1) / log(u) is the slope of exp over exactly [log u, 0], so
    # (u - 1) * x / log(u) keeps full relative accuracy for small |x|; u == 1 means |x| below half an ulp.
    # For |x| >= 1, u - 1 has no cancellation (and stays right at u = 0 and u = inf).
    u = np.exp(x)
    if abs(x) >= 1:
        return u - 1
    return x if u == 1 else (u - 1) * x / np.log(u)


def _log1p(x):
    # Kahan: u = 1 + x rounds, but log(u) / (u - 1) is the slope of log over exactly [1, u], so
    # log(u) * x / (u - 1) is accurate for small |x|; u == 1 means x below half an ulp of 1.
    u = x.dtype.type(1) + x
    if abs(x) >= 1:
        return np.log(u)
    return x if u == 1 else np.log(u) * x / (u - 1)


def _hypot(dt, a, b):
    # m sqrt(1 + (n / m)^2) with m = max(|a|, |b|), n = min(|a|, |b|): no overflow of a*a for large inputs.
    # n == m (also 0 and inf) takes ratio 1. Sqrt is exact in f64 on the device: no narrowing.
    m, n = max(abs(a), abs(b)), min(abs(a), abs(b))
    t = dt.np.type(1) if n == m else n / m
    return m * np.sqrt(dt.np.type(1) + t * t)


def _pow(x, y):
    """C99 pow, numpy's power ufunc (its scalar form takes sqrt for y = 0.5: -0.0 at -0.0, NaN at -inf), built
    as spirv/lower_ops._pow builds it: the power of a finite positive base and a finite exponent, then the
    special cases. y = 0 or x = 1 gives 1 (NaN too); a finite x < 0 gives NaN unless y is an integer (odd:
    the sign of x, also of -0.0); |x| = 1 gives 1, |x| = 0 or inf or |y| = inf gives inf or 0."""
    one, ax = x.dtype.type(1), abs(x)
    if y == 0 or x == 1:
        return one
    if np.isnan(x) or np.isnan(y):
        return x + y
    integer = np.floor(y) == y   # inf counts as an even integer, as in C99
    if x < 0 and np.isfinite(x) and not integer:
        return x.dtype.type(np.nan)
    if 0 < ax < np.inf and ax != 1 and np.isfinite(y):
        mag = np.power(ax, y)
    else:
        mag = one if ax == 1 else x.dtype.type(np.inf if (ax > 1) == (y > 0) else 0)
    odd = integer and np.floor(y * x.dtype.type(0.5)) != y * x.dtype.type(0.5)
    return -mag if odd and np.signbit(x) else mag


LOG10_2 = math.log10(2.0)
_ADD = _arith(lambda a, b: a + b, lambda a, b: a + b)


def _min(dt, a, b):
    return b if b < a else a


def _max(dt, a, b):
    return b if b > a else a


# EVAL[op](result_dtype, *operands) -> numpy scalar of result_dtype. Operands are numpy scalars of the
# operand dtypes; float rows run in numpy (f32 stays f32), integer rows on Python ints wrapped to 32 bits.
# Each row is what the device computes (spirv/lower_ops.py). Where GLSL.std.450 leaves a result undefined
# the row gives numpy's (NaN, inf), which a device need not reproduce: asin/acos for |x| > 1, log/log2/
# log10 for x <= 0, log1p for x <= -1, sqrt for x < 0, rsqrt for x <= 0; min/max with a NaN operand may
# return either operand. pow and atan2 are C99's (numpy's) also at zeros, infinities and NaN.
EVAL = {
    Op.NEG: _arith(lambda a: -a, lambda a: -a),
    Op.ABS: _arith(abs, np.abs),
    Op.SIGN: _sign,
    Op.STOP_GRADIENT: lambda dt, a: a,
    # transcendental: computed in f32, also for f64 (GLSL.std.450 has them for 16/32-bit floats only)
    Op.SIN: _in_f32(np.sin), Op.COS: _in_f32(np.cos), Op.TAN: _in_f32(np.tan),
    Op.ASIN: _in_f32(np.arcsin), Op.ACOS: _in_f32(np.arccos), Op.ATAN: _in_f32(np.arctan),
    Op.SINH: _in_f32(np.sinh), Op.COSH: _in_f32(np.cosh), Op.TANH: _in_f32(np.tanh),
    Op.EXP: _in_f32(np.exp), Op.LOG: _in_f32(np.log), Op.LOG2: _in_f32(np.log2),
    Op.EXP2: _in_f32(np.exp2),
    Op.LOG10: _in_f32(lambda x: np.log2(x) * np.float32(LOG10_2)),   # no Log10 instruction: log2 x log10(2)
    Op.EXPM1: _in_f32(_expm1), Op.LOG1P: _in_f32(_log1p),
    # Sqrt, InverseSqrt, Floor, Ceil (and FAbs, FSign, FMin, FMax) are defined for f64: computed in the type
    Op.SQRT: _float_only(np.sqrt),
    Op.RSQRT: lambda dt, a: dt.np.type(1) / np.sqrt(a),
    Op.FLOOR: _float_only(np.floor), Op.CEIL: _float_only(np.ceil),
    Op.ROUND: _round,
    Op.NOT: lambda dt, a: np.bool_(not a),
    Op.BIT_NOT: lambda dt, a: _wrap(~int(a), dt),
    Op.CAST: _cast,
    Op.ADD: _ADD,
    Op.SUB: _arith(lambda a, b: a - b, lambda a, b: a - b),
    Op.MUL: _arith(lambda a, b: a * b, lambda a, b: a * b),
    Op.DIV: lambda dt, a, b: a / b,
    # Python semantics: floor division, remainder with the sign of the divisor (ints and floats).
    Op.FLOORDIV: _arith(_int_div(lambda a, b: a // b), np.floor_divide),
    Op.MOD: _arith(_int_div(lambda a, b: a % b), np.mod),
    Op.POW: _in_f32(_pow),
    Op.POWI: _powi,
    Op.ATAN2: _in_f32(np.arctan2),   # C99 at zeros and infinities too, as lower_ops._atan2 builds it
    Op.HYPOT: _hypot,
    Op.FMOD: _float_only(np.fmod),   # OpFRem: the sign of a (Vulkan: as precise as a - b trunc(a / b))
    Op.MIN: _min,
    Op.MAX: _max,
    Op.BIT_AND: lambda dt, a, b: _wrap(int(a) & int(b), dt),
    Op.BIT_OR: lambda dt, a, b: _wrap(int(a) | int(b), dt),
    Op.BIT_XOR: lambda dt, a, b: _wrap(int(a) ^ int(b), dt),
    Op.SHL: _shift(lambda a, n: a << n),
    Op.SHR: _shift(lambda a, n: a >> n),   # Python's >> is arithmetic on i32, logical on (non-negative) u32
    Op.LT: lambda dt, a, b: a < b, Op.LE: lambda dt, a, b: a <= b,
    Op.GT: lambda dt, a, b: a > b, Op.GE: lambda dt, a, b: a >= b,
    Op.EQ: lambda dt, a, b: a == b, Op.NE: lambda dt, a, b: a != b,
    Op.AND: lambda dt, a, b: np.bool_(a and b),
    Op.OR: lambda dt, a, b: np.bool_(a or b),
    Op.SELECT: lambda dt, c, a, b: a if c else b,
    # atomics: what is stored back into the element (the old value is the statement's result)
    Op.ATOMIC_ADD: _ADD, Op.ATOMIC_MAX: _max, Op.ATOMIC_MIN: _min,
}


def to_scalar(value, dt):
    """A Python or numpy value as a numpy scalar of `dt`."""
    return np.bool_(value) if dt.is_bool else dt.np.type(value)


def eval_op(op, dtype, args):
    """Evaluate one Compute: `op` on numpy-scalar `args`, result a numpy scalar of `dtype`.

    Raises ZeroDivisionError/ValueError for undefined integer results; float overflow and division by
    zero give inf/nan silently, as on the GPU."""
    with np.errstate(all="ignore"):
        return to_scalar(EVAL[op](dtype, *args), dtype)

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


def _float_bits(dt, x):
    # f32: its bits; f64: its high word (OpBitcast to a vector of two u32, component 1: little-endian words)
    return np.int32(x.view(np.int32)) if x.dtype == np.float32 else np.int32(np.int64(x.view(np.int64)) >> 32)


def _f64_from_bits(dt, hi, lo):
    return np.uint64((int(hi) & 0xFFFFFFFF) << 32 | int(lo)).view(np.float64)


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
    # transcendental: numpy's, in the operand's dtype. Kernels compute them with the math library's expansions
    # (ir/libm/), which replace these ops before lowering and give the same bits on every backend; these rows
    # are what simplify folds constants with, what a task header computes on the host, and what the
    # interpreter computes under native_math=True (the driver's GLSL.std.450 functions then differ by
    # their own error, f64 computed in f32: docs/language.md)
    Op.SIN: _float_only(np.sin), Op.COS: _float_only(np.cos), Op.TAN: _float_only(np.tan),
    Op.ASIN: _float_only(np.arcsin), Op.ACOS: _float_only(np.arccos), Op.ATAN: _float_only(np.arctan),
    Op.SINH: _float_only(np.sinh), Op.COSH: _float_only(np.cosh), Op.TANH: _float_only(np.tanh),
    Op.EXP: _float_only(np.exp), Op.LOG: _float_only(np.log), Op.LOG2: _float_only(np.log2),
    Op.EXP2: _float_only(np.exp2), Op.LOG10: _float_only(np.log10),
    Op.EXPM1: _float_only(np.expm1), Op.LOG1P: _float_only(np.log1p),
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
    Op.POW: _float_only(_pow),
    Op.POWI: _powi,
    Op.ATAN2: _float_only(np.arctan2),   # C99 at zeros and infinities too, as lower_ops._atan2 builds it
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
    # float bits (ir/libm/): the bit patterns as they are, NaN payloads and subnormals included
    Op.FLOAT_BITS: _float_bits,
    Op.FLOAT_LOW_BITS: lambda dt, x: np.uint32(x.view(np.uint64) & np.uint64(0xFFFFFFFF)),
    Op.F32_FROM_BITS: lambda dt, i: np.int32(i).view(np.float32),
    Op.F64_FROM_BITS: _f64_from_bits,
    Op.MUL_HI: lambda dt, a, b: np.uint32((int(a) * int(b)) >> 32),
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

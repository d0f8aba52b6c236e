"""The one table of IR operations: each op's arity and how its result type follows from its operands.

Evaluation (ir/scalar_ops.py), derivatives (autodiff/rules.py: PARTIALS and the non-differentiable marks, or
ATOMIC_RULES) and SPIR-V lowering (spirv/lower_ops.py: LOWER, or ATOMIC_LOWER) are each one more table
keyed by `Op`; tests/ir/test_op_tables.py checks that every table covers exactly the ops it must.
"""
import enum

from .. import types as T


class Op(enum.Enum):
    # unary, result type = operand type
    NEG = "neg"
    ABS = "abs"
    SIGN = "sign"
    STOP_GRADIENT = "stop_gradient"   # the identity, with no derivative (sp.stop_gradient)
    # unary, float only
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    EXP = "exp"
    LOG = "log"
    LOG2 = "log2"
    EXP2 = "exp2"
    LOG10 = "log10"
    EXPM1 = "expm1"       # exp(x) - 1, accurate for small |x|
    LOG1P = "log1p"       # log(1 + x), accurate for small |x|
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    # logical / bitwise unary
    NOT = "not"           # bool -> bool
    BIT_NOT = "bit_not"   # int -> int
    CAST = "cast"         # result type is the statement's dtype
    # binary arithmetic, result = promoted operand type (operands already promoted by the frontend)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"           # true division on floats; truncating on ints is never produced
    FLOORDIV = "floordiv"  # Python semantics (floor), ints and floats
    MOD = "mod"           # Python semantics (sign of divisor), ints and floats
    POW = "pow"           # floats, C99 pow (numpy's power): defined for every operand, x < 0 with integer y too
    # (base: float or int, exponent: i32 or u32) -> base dtype, Python's `x ** n`, exact for negative x:
    # exponentiation by squaring (ints wrap as 32-bit multiplication does). n < 0 gives 1 / x**|n| for
    # floats; for ints the truncation of the true value: 1 for x = 1, (-1)**n for x = -1, else 0 (also for
    # x = 0, where Python raises ZeroDivisionError; a float 0 gives inf).
    POWI = "powi"
    ATAN2 = "atan2"       # floats
    HYPOT = "hypot"       # floats, sqrt(a*a + b*b) without overflow
    FMOD = "fmod"         # floats, C fmod: a - b trunc(a / b), the sign of a (MOD takes the sign of b)
    MIN = "min"
    MAX = "max"
    # bitwise binary on ints
    BIT_AND = "bit_and"
    BIT_OR = "bit_or"
    BIT_XOR = "bit_xor"
    SHL = "shl"
    SHR = "shr"
    # comparisons -> bool
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    # logical on bools (both operands evaluated; short-circuit is control flow in the frontend)
    AND = "and"
    OR = "or"
    # ternary
    SELECT = "select"     # (cond: bool, a, b) -> a if cond else b
    # atomic read-modify-writes (statement AtomicRMW only, never a Compute): (element, value) -> element
    # dtype, the combination stored back into the element; the statement's value is the old element
    ATOMIC_ADD = "atomic_add"
    ATOMIC_MAX = "atomic_max"
    ATOMIC_MIN = "atomic_min"
    # bits (the math library's expansions, ir/libm/: they run after autodiff, so no derivative)
    FLOAT_BITS = "float_bits"           # f32 -> i32, its bit pattern; f64 -> i32, its high word (sign, exponent,
                                        # top 20 fraction bits)
    FLOAT_LOW_BITS = "float_low_bits"   # f64 -> u32, its low word (the low 32 fraction bits)
    F32_FROM_BITS = "f32_from_bits"     # i32 -> f32 with that bit pattern
    F64_FROM_BITS = "f64_from_bits"     # (i32 high word, u32 low word) -> f64 with those words
    MUL_HI = "mul_hi"                   # (u32, u32) -> u32, the high word of their 64-bit product


UNARY_SAME = {Op.NEG, Op.ABS, Op.SIGN, Op.STOP_GRADIENT}
UNARY_FLOAT = {Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.EXP,
               Op.LOG, Op.LOG2, Op.EXP2, Op.LOG10, Op.EXPM1, Op.LOG1P, Op.SQRT, Op.RSQRT, Op.FLOOR, Op.CEIL,
               Op.ROUND}
BINARY_ARITH = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.MIN, Op.MAX}
BINARY_FLOAT = {Op.POW, Op.ATAN2, Op.HYPOT, Op.FMOD}
BINARY_BITWISE = {Op.BIT_AND, Op.BIT_OR, Op.BIT_XOR, Op.SHL, Op.SHR}
COMPARISONS = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
LOGICAL = {Op.AND, Op.OR}
ATOMICS = {Op.ATOMIC_ADD, Op.ATOMIC_MAX, Op.ATOMIC_MIN}
FLOAT_BIT_OPS = {Op.FLOAT_BITS, Op.FLOAT_LOW_BITS, Op.F32_FROM_BITS, Op.F64_FROM_BITS, Op.MUL_HI}

ARITY = {**{op: 1 for op in UNARY_SAME | UNARY_FLOAT | {Op.NOT, Op.BIT_NOT, Op.CAST}
            | {Op.FLOAT_BITS, Op.FLOAT_LOW_BITS, Op.F32_FROM_BITS}},
         **{op: 2 for op in BINARY_ARITH | BINARY_FLOAT | BINARY_BITWISE | COMPARISONS | LOGICAL | ATOMICS
            | {Op.POWI, Op.F64_FROM_BITS, Op.MUL_HI}},
         Op.SELECT: 3}


def result_dtype(op, operand_dtypes, cast_to=None):
    """Result dtype of `op`; raises TypeError naming the op when operand types do not fit it."""
    d = operand_dtypes
    if len(d) != ARITY[op]:
        raise TypeError(f"{op.value} takes {ARITY[op]} operands, got {len(d)}")
    if op is Op.CAST:
        return cast_to
    if op is Op.SELECT:
        if not d[0].is_bool or d[1] != d[2]:
            raise TypeError(f"select needs (bool, T, T), got {d}")
        return d[1]
    if op in FLOAT_BIT_OPS:
        return _float_bits_dtype(op, d)
    if op in UNARY_SAME:
        if d[0].is_bool:
            raise TypeError(f"{op.value} does not apply to bool")
        return d[0]
    if op in UNARY_FLOAT or op in BINARY_FLOAT:
        if not all(t.is_float for t in d) or len(set(d)) != 1:
            raise TypeError(f"{op.value} needs float operands of one type, got {d}")
        return d[0]
    if op is Op.NOT or op in LOGICAL:
        if not all(t.is_bool for t in d):
            raise TypeError(f"{op.value} needs bool operands, got {d}")
        return T.u1
    if op is Op.BIT_NOT or op in BINARY_BITWISE:
        if not all(t.is_int for t in d) or len(set(d)) != 1:
            raise TypeError(f"{op.value} needs integer operands of one type, got {d}")
        return d[0]
    if op in COMPARISONS:
        if d[0] != d[1]:
            raise TypeError(f"{op.value} needs operands of one type, got {d}")
        return T.u1
    if op is Op.POWI:
        if d[0].is_bool or d[1] not in (T.i32, T.u32):
            raise TypeError(f"powi needs a float or integer base and an i32/u32 exponent, got {d}")
        return d[0]
    if op in BINARY_ARITH or op in ATOMICS:
        if d[0] != d[1] or d[0].is_bool:
            raise TypeError(f"{op.value} needs numeric operands of one type, got {d}")
        if op is Op.DIV and not d[0].is_float:
            raise TypeError("true division needs float operands")
        return d[0]
    raise TypeError(f"no type rule for {op}")


# operand dtypes -> result dtype of the float-bit ops
_FLOAT_BITS_TYPES = {Op.FLOAT_BITS: {(T.f32,): T.i32, (T.f64,): T.i32}, Op.FLOAT_LOW_BITS: {(T.f64,): T.u32},
                     Op.F32_FROM_BITS: {(T.i32,): T.f32}, Op.F64_FROM_BITS: {(T.i32, T.u32): T.f64},
                     Op.MUL_HI: {(T.u32, T.u32): T.u32}}


def _float_bits_dtype(op, d):
    rd = _FLOAT_BITS_TYPES[op].get(tuple(d))
    if rd is None:
        raise TypeError(f"{op.value} takes {' or '.join(map(str, _FLOAT_BITS_TYPES[op]))}, got {tuple(d)}")
    return rd

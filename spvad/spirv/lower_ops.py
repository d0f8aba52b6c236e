"""SPIR-V lowering of the IR's ops: one LOWER row per Compute op, one ATOMIC_LOWER row per atomic op
(tests/ir/test_op_tables.py checks that together they cover every op).

A row is `row(L, s, args) -> result id`, where `L` is the lowerer (spirv/lower.py), `s` the Compute
statement and `args` its operand ids. Semantics follow ir/scalar_ops.py (Python's floor division and modulo,
round half to even, C99 pow and atan2, shifts by the low 5 bits, `!=` true on NaN, saturating float -> integer
casts), built from instructions Vulkan defines for every operand: never OpSRem/OpSMod (undefined for negative
operands), never a division by zero, never an out-of-range OpConvertFToS/U.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple

from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op as IROp
from .spec import GLSL, Capability, Op


def _op(opcode):
    """One instruction whose result type is the statement's dtype."""
    return lambda L, s, a: L.emit(opcode, s.dtype, *a)


def _glsl(inst, narrow=False):
    """A GLSL.std.450 instruction; `narrow` marks those defined only for 16/32-bit floats."""
    return lambda L, s, a: L.glsl(inst, s.dtype, *a, narrow=narrow)


def _in_f32(body):
    """A row built from f32-only GLSL.std.450 instructions (`body(L, dtype, args)`), computed in f32 for
    f64 too: operands narrowed, the result widened, as L.glsl(..., narrow=True) does for one instruction."""
    def row(L, s, a):
        if s.dtype != T.f64:
            return body(L, s.dtype, a)
        narrowed = [L.emit(Op.OpFConvert, T.f32, x) for x in a]
        return L.emit(Op.OpFConvert, T.f64, body(L, T.f32, narrowed))
    return row


def _same(L, s, a):
    return a[0]


def _kinds(**rows):
    """Dispatch on the kind of the first operand: f (float), i (i32), u (u32), b (bool)."""
    def row(L, s, a):
        kind = s.args[0].dtype.kind
        if kind not in rows:
            raise L.error(f"{s.op.value} is not defined for {s.args[0].dtype}")
        return rows[kind](L, s, a)
    return row


def _u_sign(L, s, a):
    return L.emit(Op.OpSelect, s.dtype, L.emit(Op.OpINotEqual, T.u1, a[0], L.const(s.dtype, 0)),
                  L.const(s.dtype, 1), L.const(s.dtype, 0))


def _sign_bit(L, x):
    """Whether the f32 `x` has its sign bit set: also -0.0, which no comparison tells from +0.0."""
    return L.emit(Op.OpSLessThan, T.u1, L.emit(Op.OpBitcast, T.i32, x), L.const(T.i32, 0))


def _select(L, dt, cond, a, b):
    return L.emit(Op.OpSelect, dt, cond, a, b)


def _any(L, *conds):
    acc = conds[0]
    for c in conds[1:]:
        acc = L.emit(Op.OpLogicalOr, T.u1, acc, c)
    return acc


def _all(L, *conds):
    acc = conds[0]
    for c in conds[1:]:
        acc = L.emit(Op.OpLogicalAnd, T.u1, acc, c)
    return acc


def _pow(L, dt, a):
    """C99 pow, as ir/scalar_ops._pow: GLSL Pow (defined for x > 0) of |x| only where |x| is finite, positive
    and not 1 and y finite; then the special cases, as selects. y = 0 or x = 1: 1; NaN: x + y; a finite x < 0
    with y not an integer: NaN; |x| = 1: 1; |x| = 0 or inf or |y| = inf: inf where (|x| > 1) == (y > 0), else 0;
    the sign of x (its sign bit: -0.0 too) where y is an odd integer."""
    (x, y), b, inf = a, T.u1, L.const(dt, math.inf)
    one, zero = L.const(dt, 1.0), L.const(dt, 0.0)
    ax = L.glsl(GLSL.FAbs, dt, x)
    plain = _all(L, L.emit(Op.OpFOrdGreaterThan, b, ax, zero), L.emit(Op.OpFOrdLessThan, b, ax, inf),
                 L.emit(Op.OpFOrdNotEqual, b, ax, one),
                 L.emit(Op.OpFOrdLessThan, b, L.glsl(GLSL.FAbs, dt, y), inf))
    power = L.glsl(GLSL.Pow, dt, _select(L, dt, plain, ax, L.const(dt, 2.0)), _select(L, dt, plain, y, one))
    big = L.emit(Op.OpLogicalEqual, b, L.emit(Op.OpFOrdGreaterThan, b, ax, one),
                 L.emit(Op.OpFOrdGreaterThan, b, y, zero))
    edge = _select(L, dt, L.emit(Op.OpFOrdEqual, b, ax, one), one, _select(L, dt, big, inf, zero))
    mag = _select(L, dt, plain, power, edge)
    integer = L.emit(Op.OpFOrdEqual, b, L.glsl(GLSL.Floor, dt, y), y)   # inf too: an even integer in C99
    half = L.emit(Op.OpFMul, dt, y, L.const(dt, 0.5))
    odd = _all(L, integer, L.emit(Op.OpFOrdNotEqual, b, L.glsl(GLSL.Floor, dt, half), half))
    r = _select(L, dt, _all(L, odd, _sign_bit(L, x)), L.emit(Op.OpFNegate, dt, mag), mag)
    finite_negative = _all(L, L.emit(Op.OpFOrdLessThan, b, x, zero),
                           L.emit(Op.OpFOrdGreaterThan, b, x, L.const(dt, -math.inf)))
    negative = _all(L, finite_negative, L.emit(Op.OpLogicalNot, b, integer))
    r = _select(L, dt, negative, L.const(dt, math.nan), r)
    r = _select(L, dt, _any(L, L.emit(Op.OpIsNan, b, x), L.emit(Op.OpIsNan, b, y)), L.emit(Op.OpFAdd, dt, x, y), r)
    return _select(L, dt, _any(L, L.emit(Op.OpFOrdEqual, b, y, zero), L.emit(Op.OpFOrdEqual, b, x, one)), one, r)


def _atan2(L, dt, a):
    """C99 atan2(y, x), as numpy's: GLSL Atan2 (undefined at 0, 0) where y, x are finite and non-zero; else
    with m = pi if x's sign bit is set else 0: y = 0 or x = +-inf with y finite gives m, both infinite
    3pi/4 or pi/4, y = +-inf or x = 0 pi/2, each with y's sign bit; NaN gives x + y."""
    (y, x), b, inf = a, T.u1, L.const(dt, math.inf)
    zero = L.const(dt, 0.0)
    x_inf, y_inf = (L.emit(Op.OpFOrdEqual, b, L.glsl(GLSL.FAbs, dt, v), inf) for v in (x, y))
    y_zero, x_zero = (L.emit(Op.OpFOrdEqual, b, v, zero) for v in (y, x))
    special = _any(L, y_zero, x_zero, x_inf, y_inf)
    one = L.const(dt, 1.0)
    general = L.glsl(GLSL.Atan2, dt, _select(L, dt, special, one, y), _select(L, dt, special, one, x))
    x_neg = _sign_bit(L, x)
    flat = _select(L, dt, x_neg, L.const(dt, math.pi), zero)
    corner = _select(L, dt, x_neg, L.const(dt, 0.75 * math.pi), L.const(dt, 0.25 * math.pi))
    mag = _select(L, dt, _all(L, x_inf, y_inf), corner,
                  _select(L, dt, _any(L, y_zero, x_inf), flat, L.const(dt, 0.5 * math.pi)))
    signed = _select(L, dt, _sign_bit(L, y), L.emit(Op.OpFNegate, dt, mag), mag)
    r = _select(L, dt, special, signed, general)
    return _select(L, dt, _any(L, L.emit(Op.OpIsNan, b, x), L.emit(Op.OpIsNan, b, y)), L.emit(Op.OpFAdd, dt, x, y), r)


def _log10(L, dt, a):
    # GLSL.std.450 has no Log10: log2(x) log10(2)
    return L.emit(Op.OpFMul, dt, L.glsl(GLSL.Log2, dt, a[0]), L.const(dt, math.log10(2.0)))


def _kahan(L, dt, x, u, small, large):
    """|x| < 1 ? (u == 1 ? x : small) : large, the shape of expm1 and log1p below."""
    one = L.const(dt, 1.0)
    near = L.emit(Op.OpSelect, dt, L.emit(Op.OpFOrdEqual, T.u1, u, one), x, small)
    below_one = L.emit(Op.OpFOrdLessThan, T.u1, L.glsl(GLSL.FAbs, dt, x), one)
    return L.emit(Op.OpSelect, dt, below_one, near, large)


def _expm1(L, dt, a):
    # As ir/scalar_ops.py: u = exp(x); (u - 1) x / log(u) for |x| < 1 (Kahan), u - 1 beyond
    x = a[0]
    u = L.glsl(GLSL.Exp, dt, x)
    um1 = L.emit(Op.OpFSub, dt, u, L.const(dt, 1.0))
    small = L.emit(Op.OpFDiv, dt, L.emit(Op.OpFMul, dt, um1, x), L.glsl(GLSL.Log, dt, u))
    return _kahan(L, dt, x, u, small, um1)


def _log1p(L, dt, a):
    # As ir/scalar_ops.py: u = 1 + x; log(u) x / (u - 1) for |x| < 1 (Kahan), log(u) beyond
    x = a[0]
    u = L.emit(Op.OpFAdd, dt, L.const(dt, 1.0), x)
    log_u = L.glsl(GLSL.Log, dt, u)
    small = L.emit(Op.OpFDiv, dt, L.emit(Op.OpFMul, dt, log_u, x), L.emit(Op.OpFSub, dt, u, L.const(dt, 1.0)))
    return _kahan(L, dt, x, u, small, log_u)


def _hypot(L, s, a):
    # As ir/scalar_ops.py: m sqrt(1 + t^2), m = max(|a|, |b|), t = min / max (1 when equal: 0 and inf). Sqrt,
    # FAbs, FMin, FMax are defined for f64: no narrowing.
    dt = s.dtype
    ax, ay = (L.glsl(GLSL.FAbs, dt, v) for v in a)
    m, n = L.glsl(GLSL.FMax, dt, ax, ay), L.glsl(GLSL.FMin, dt, ax, ay)
    one = L.const(dt, 1.0)
    t = L.emit(Op.OpSelect, dt, L.emit(Op.OpFOrdEqual, T.u1, n, m), one, L.emit(Op.OpFDiv, dt, n, m))
    root = L.glsl(GLSL.Sqrt, dt, L.emit(Op.OpFAdd, dt, one, L.emit(Op.OpFMul, dt, t, t)))
    return L.emit(Op.OpFMul, dt, m, root)


def _magnitude(L, x, negative):
    """|x| of an i32 as a u32 (|INT_MIN| = 2**31 fits): 0 - x wraps, which SPIR-V defines."""
    return L.emit(Op.OpBitcast, T.u32, L.emit(Op.OpSelect, T.i32, negative,
                                              L.emit(Op.OpISub, T.i32, L.const(T.i32, 0), x), x))


def _nonzero_divisor(L, y):
    """`y`, or 1 where it is 0: division by zero is undefined behaviour in SPIR-V (the interpreter raises;
    the device returns an unspecified value, never poisons the shader)."""
    return L.emit(Op.OpSelect, T.u32, L.emit(Op.OpIEqual, T.u1, y, L.const(T.u32, 0)), L.const(T.u32, 1), y)


def _i_divmod(L, s, a):
    """Python (a // b, a % b) on i32 from operations Vulkan defines for every operand: OpUDiv of the
    magnitudes. (Vulkan leaves OpSRem and OpSMod undefined for negative operands, and NVIDIA's gave wrong
    remainders; OpSDiv overflows on INT_MIN / -1.) With q, r = |x| // |y|, |x| % |y|: where the signs differ,
    q = -q, or -q - 1 (= ~q) and r = |y| - r when r != 0; r takes y's sign."""
    (x, y), i32, u32 = a, T.i32, T.u32
    zero = L.const(i32, 0)
    x_neg, y_neg = (L.emit(Op.OpSLessThan, T.u1, v, zero) for v in (x, y))
    ax, ay = _magnitude(L, x, x_neg), _nonzero_divisor(L, _magnitude(L, y, y_neg))
    q = L.emit(Op.OpUDiv, u32, ax, ay)
    r = L.emit(Op.OpISub, u32, ax, L.emit(Op.OpIMul, u32, q, ay))
    differ = L.emit(Op.OpLogicalNotEqual, T.u1, x_neg, y_neg)
    fix = L.emit(Op.OpLogicalAnd, T.u1, differ, L.emit(Op.OpINotEqual, T.u1, r, L.const(u32, 0)))
    q = L.emit(Op.OpSelect, u32, fix, L.emit(Op.OpNot, u32, q),
               L.emit(Op.OpSelect, u32, differ, L.emit(Op.OpISub, u32, L.const(u32, 0), q), q))
    r = L.emit(Op.OpSelect, u32, fix, L.emit(Op.OpISub, u32, ay, r), r)
    r = L.emit(Op.OpSelect, u32, y_neg, L.emit(Op.OpISub, u32, L.const(u32, 0), r), r)
    return L.emit(Op.OpBitcast, i32, q), L.emit(Op.OpBitcast, i32, r)


def _i_floordiv(L, s, a):
    return _i_divmod(L, s, a)[0]


def _i_mod(L, s, a):
    return _i_divmod(L, s, a)[1]


def _u_div(opcode):
    """u32 // and %: OpUDiv / OpUMod, defined for every divisor but 0."""
    return lambda L, s, a: L.emit(opcode, T.u32, a[0], _nonzero_divisor(L, a[1]))


def _i_abs(L, s, a):
    # 0 - x where x < 0, wrapping for INT_MIN as the interpreter does (GLSL SAbs leaves INT_MIN open)
    x = a[0]
    neg = L.emit(Op.OpSLessThan, T.u1, x, L.const(T.i32, 0))
    return L.emit(Op.OpSelect, T.i32, neg, L.emit(Op.OpISub, T.i32, L.const(T.i32, 0), x), x)


def _f_floordiv(L, s, a):
    return L.glsl(GLSL.Floor, s.dtype, L.emit(Op.OpFDiv, s.dtype, *a))


def _powi(L, s, a):
    """`x ** n` (Op.POWI) as straight-line exponentiation by squaring over the bits of |n| (u32, so that
    |INT_MIN| = 2**31 fits): r = bit ? r*b : r; b = b*b. No loop: lavapipe silently stops a thread's loops
    after 65,535 iterations in all, and only the loops spvad emits itself are checked for that."""
    dt, (x, n) = s.dtype, a
    exp, u32 = s.args[1], T.u32
    mul = Op.OpFMul if dt.is_float else Op.OpIMul
    neg = None
    if exp.dtype == T.i32:
        neg = L.emit(Op.OpSLessThan, T.u1, n, L.const(T.i32, 0))
        n = L.emit(Op.OpSelect, T.i32, neg, L.emit(Op.OpSNegate, T.i32, n), n)
    m = n if exp.dtype == u32 else L.emit(Op.OpBitcast, u32, n)
    # a constant exponent needs only its own bits (the gradient of `x ** 40` and the like)
    bits = abs(int(exp.value)).bit_length() if isinstance(exp, N.Const) else 32
    r, b = L.const(dt, 1), x
    for k in range(bits):
        bit = L.emit(Op.OpINotEqual, T.u1, L.emit(Op.OpBitwiseAnd, u32, m, L.const(u32, 1 << k)), L.const(u32, 0))
        r = L.emit(Op.OpSelect, dt, bit, L.emit(mul, dt, r, b) if k else b, r)
        if k + 1 < bits:
            b = L.emit(mul, dt, b, b)
    if neg is None:
        return r
    if dt.is_float:   # 1 / r, and +-0 where x**|n| overflowed: Vulkan defines 1 / r only for |r| <= 2**126
        inv = L.emit(Op.OpSelect, dt, L.emit(Op.OpIsInf, T.u1, r),   # (NVIDIA's f64 gave 1.0 for 1.5 ** INT_MIN)
                     L.emit(Op.OpFMul, dt, L.glsl(GLSL.FSign, dt, r), L.const(dt, 0.0)),
                     L.emit(Op.OpFDiv, dt, L.const(dt, 1.0), r))
    else:   # the truncation of x ** n for n < 0: x**|n| (= +-1) when x is 1 or -1, else 0
        unit = L.emit(Op.OpIEqual, T.u1, x, L.const(dt, 1))
        if dt == T.i32:
            unit = L.emit(Op.OpLogicalOr, T.u1, unit, L.emit(Op.OpIEqual, T.u1, x, L.const(dt, -1)))
        inv = L.emit(Op.OpSelect, dt, unit, r, L.const(dt, 0))
    return L.emit(Op.OpSelect, dt, neg, inv, r)


def _shift(opcode):
    # Shifting by >= 32 is undefined in SPIR-V: use the low 5 bits, as the interpreter does.
    def row(L, s, a):
        amount_t, amount = s.args[1].dtype, s.args[1]
        if isinstance(amount, N.Const):   # folded here: the math library shifts by constants in its hot loops
            return L.emit(opcode, s.dtype, a[0], L.const(amount_t, int(amount.value) & 31))
        return L.emit(opcode, s.dtype, a[0], L.emit(Op.OpBitwiseAnd, amount_t, a[1], L.const(amount_t, 31)))
    return row


def _cmp(opcode):
    return lambda L, s, a: L.emit(opcode, T.u1, *a)


def _bool_order(opcode):
    """Ordering comparisons of bools (False < True) on their 0/1 values."""
    def row(L, s, a):
        return L.emit(opcode, T.u1, *(L.emit(Op.OpSelect, T.u32, x, L.const(T.u32, 1), L.const(T.u32, 0))
                                      for x in a))
    return row


def _compare(f, i, u, b=None):
    rows = {"f": _cmp(f), "i": _cmp(i), "u": _cmp(u), "b": _bool_order(b) if b else None}
    return _kinds(**{k: v for k, v in rows.items() if v})


def _float_to_int(L, src, dst, x):
    """Truncation toward zero, saturating as the interpreter does: NaN -> 0, x beyond the type -> its
    nearest end (OpConvertFToS/U are undefined there, and drivers differ). Only
    values inside [lo, hi + 1) reach the conversion. An f32 `hi + 1` (2**31, 2**32) is exact."""
    lo, hi = T.INT_RANGE[dst.name]
    inside = L.emit(Op.OpLogicalAnd, T.u1, L.emit(Op.OpFOrdGreaterThanEqual, T.u1, x, L.const(src, float(lo))),
                    L.emit(Op.OpFOrdLessThan, T.u1, x, L.const(src, float(hi) + 1.0)))
    safe = L.emit(Op.OpSelect, src, inside, x, L.const(src, 0.0))
    converted = L.emit(Op.OpConvertFToS if dst.kind == "i" else Op.OpConvertFToU, dst, safe)
    below = L.const(dst, 0)   # NaN, and below 0 for u32
    if lo:
        below = L.emit(Op.OpSelect, dst, L.emit(Op.OpFOrdLessThan, T.u1, x, L.const(src, 0.0)), L.const(dst, lo),
                       below)
    end = L.emit(Op.OpSelect, dst, L.emit(Op.OpFOrdGreaterThan, T.u1, x, L.const(src, 0.0)), L.const(dst, hi),
                 below)
    return L.emit(Op.OpSelect, dst, inside, converted, end)


def _cast(L, s, a):
    src, dst, x = s.args[0].dtype, s.dtype, a[0]
    if src == dst:
        return x
    if src.is_bool:
        return L.emit(Op.OpSelect, dst, x, L.const(dst, 1), L.const(dst, 0))
    if dst.is_bool:   # `x != 0`, true for NaN as in Python
        ne = Op.OpFUnordNotEqual if src.is_float else Op.OpINotEqual
        return L.emit(ne, T.u1, x, L.const(src, 0))
    if src.is_float:
        return L.emit(Op.OpFConvert, dst, x) if dst.is_float else _float_to_int(L, src, dst, x)
    if dst.is_float:
        return L.emit(Op.OpConvertSToF if src.kind == "i" else Op.OpConvertUToF, dst, x)
    return L.emit(Op.OpBitcast, dst, x)   # i32 <-> u32 keep the bit pattern


def _word_pair(L):
    """The type of an f64's two u32 words (OpBitcast to it: component 0 the low word, 1 the high word)."""
    return L.m.type_vector(L.ty(T.u32), 2)


def _float_bits(L, s, a):
    if s.args[0].dtype == T.f32:
        return L.emit(Op.OpBitcast, T.i32, a[0])
    words = L.f.emit(Op.OpBitcast, _word_pair(L), a[0])
    return L.emit(Op.OpBitcast, T.i32, L.emit(Op.OpCompositeExtract, T.u32, words, 1))


def _float_low_bits(L, s, a):
    return L.emit(Op.OpCompositeExtract, T.u32, L.f.emit(Op.OpBitcast, _word_pair(L), a[0]), 0)


def _mul_hi(L, s, a):
    u32 = L.ty(T.u32)
    both = L.f.emit(Op.OpUMulExtended, L.m.type_struct((u32, u32)), a[0], a[1])
    return L.emit(Op.OpCompositeExtract, T.u32, both, 1)


def _f64_from_bits(L, s, a):
    hi, lo = a
    words = L.f.emit(Op.OpCompositeConstruct, _word_pair(L), lo, L.emit(Op.OpBitcast, T.u32, hi))
    return L.emit(Op.OpBitcast, T.f64, words)


LOWER = {
    IROp.NEG: _kinds(f=_op(Op.OpFNegate), i=_op(Op.OpSNegate), u=_op(Op.OpSNegate)),
    IROp.ABS: _kinds(f=_glsl(GLSL.FAbs), i=_i_abs, u=_same),
    IROp.SIGN: _kinds(f=_glsl(GLSL.FSign), i=_glsl(GLSL.SSign), u=_u_sign),
    IROp.STOP_GRADIENT: _same,   # the identity: its operand's id
    IROp.SIN: _glsl(GLSL.Sin, narrow=True),
    IROp.COS: _glsl(GLSL.Cos, narrow=True),
    IROp.TAN: _glsl(GLSL.Tan, narrow=True),
    IROp.ASIN: _glsl(GLSL.Asin, narrow=True),
    IROp.ACOS: _glsl(GLSL.Acos, narrow=True),
    IROp.ATAN: _glsl(GLSL.Atan, narrow=True),
    IROp.SINH: _glsl(GLSL.Sinh, narrow=True),
    IROp.COSH: _glsl(GLSL.Cosh, narrow=True),
    IROp.TANH: _glsl(GLSL.Tanh, narrow=True),
    IROp.EXP: _glsl(GLSL.Exp, narrow=True),
    IROp.LOG: _glsl(GLSL.Log, narrow=True),
    IROp.LOG2: _glsl(GLSL.Log2, narrow=True),
    IROp.EXP2: _glsl(GLSL.Exp2, narrow=True),
    IROp.LOG10: _in_f32(_log10),
    IROp.EXPM1: _in_f32(_expm1),
    IROp.LOG1P: _in_f32(_log1p),
    IROp.SQRT: _glsl(GLSL.Sqrt),
    IROp.RSQRT: _glsl(GLSL.InverseSqrt),
    IROp.FLOOR: _glsl(GLSL.Floor),
    IROp.CEIL: _glsl(GLSL.Ceil),
    IROp.ROUND: _glsl(GLSL.RoundEven),   # half to even, as numpy (Round leaves .5 to the driver)
    IROp.NOT: _op(Op.OpLogicalNot),
    IROp.BIT_NOT: _op(Op.OpNot),
    IROp.CAST: _cast,
    IROp.ADD: _kinds(f=_op(Op.OpFAdd), i=_op(Op.OpIAdd), u=_op(Op.OpIAdd)),
    IROp.SUB: _kinds(f=_op(Op.OpFSub), i=_op(Op.OpISub), u=_op(Op.OpISub)),
    IROp.MUL: _kinds(f=_op(Op.OpFMul), i=_op(Op.OpIMul), u=_op(Op.OpIMul)),
    IROp.DIV: _kinds(f=_op(Op.OpFDiv)),
    IROp.FLOORDIV: _kinds(f=_f_floordiv, i=_i_floordiv, u=_u_div(Op.OpUDiv)),
    IROp.MOD: _kinds(f=_op(Op.OpFMod), i=_i_mod, u=_u_div(Op.OpUMod)),
    IROp.POW: _in_f32(_pow),
    IROp.POWI: _powi,
    IROp.ATAN2: _in_f32(_atan2),
    IROp.HYPOT: _hypot,
    IROp.FMOD: _op(Op.OpFRem),   # the sign of the dividend (OpFMod, for MOD, takes the divisor's)
    IROp.MIN: _kinds(f=_glsl(GLSL.FMin), i=_glsl(GLSL.SMin), u=_glsl(GLSL.UMin)),
    IROp.MAX: _kinds(f=_glsl(GLSL.FMax), i=_glsl(GLSL.SMax), u=_glsl(GLSL.UMax)),
    IROp.BIT_AND: _op(Op.OpBitwiseAnd),
    IROp.BIT_OR: _op(Op.OpBitwiseOr),
    IROp.BIT_XOR: _op(Op.OpBitwiseXor),
    IROp.SHL: _shift(Op.OpShiftLeftLogical),
    IROp.SHR: _kinds(i=_shift(Op.OpShiftRightArithmetic), u=_shift(Op.OpShiftRightLogical)),
    IROp.LT: _compare(Op.OpFOrdLessThan, Op.OpSLessThan, Op.OpULessThan, Op.OpULessThan),
    IROp.LE: _compare(Op.OpFOrdLessThanEqual, Op.OpSLessThanEqual, Op.OpULessThanEqual, Op.OpULessThanEqual),
    IROp.GT: _compare(Op.OpFOrdGreaterThan, Op.OpSGreaterThan, Op.OpUGreaterThan, Op.OpUGreaterThan),
    IROp.GE: _compare(Op.OpFOrdGreaterThanEqual, Op.OpSGreaterThanEqual, Op.OpUGreaterThanEqual,
                      Op.OpUGreaterThanEqual),
    IROp.EQ: _kinds(f=_cmp(Op.OpFOrdEqual), i=_cmp(Op.OpIEqual), u=_cmp(Op.OpIEqual),
                    b=_cmp(Op.OpLogicalEqual)),
    # Python's `!=` is true when either side is NaN: unordered.
    IROp.NE: _kinds(f=_cmp(Op.OpFUnordNotEqual), i=_cmp(Op.OpINotEqual), u=_cmp(Op.OpINotEqual),
                    b=_cmp(Op.OpLogicalNotEqual)),
    IROp.AND: _op(Op.OpLogicalAnd),
    IROp.OR: _op(Op.OpLogicalOr),
    IROp.SELECT: _op(Op.OpSelect),
    IROp.FLOAT_BITS: _float_bits,
    IROp.FLOAT_LOW_BITS: _float_low_bits,
    IROp.F32_FROM_BITS: _op(Op.OpBitcast),
    IROp.F64_FROM_BITS: _f64_from_bits,
    IROp.MUL_HI: _mul_hi,
}


# ---- atomics: `old = a[idx]; a[idx] = op(old, v)` on a pointer to the element (spirv/lower_memory.py) ----
class NativeFloatAtomic(NamedTuple):
    """An f32 atomic instruction, used when the device reports `feature`."""
    opcode: int
    extension: str
    capability: int
    feature: str


@dataclass(frozen=True)
class AtomicLowering:
    """One atomic op: its instruction on i32 and on u32 elements; `combine(L, dtype, old, v)`, the value the
    compare-exchange loop of float elements stores (Memory.cas_loop); `f32`, the native f32 instruction
    where a device has one (else floats always take the loop)."""
    i: int
    u: int
    combine: object
    f32: NativeFloatAtomic = None


ATOMIC_LOWER = {
    IROp.ATOMIC_ADD: AtomicLowering(Op.OpAtomicIAdd, Op.OpAtomicIAdd,
                                    lambda L, dt, old, v: L.emit(Op.OpFAdd, dt, old, v),
                                    f32=NativeFloatAtomic(Op.OpAtomicFAddEXT, "SPV_EXT_shader_atomic_float_add",
                                                          Capability.AtomicFloat32AddEXT, "atomic_float32_add")),
    IROp.ATOMIC_MAX: AtomicLowering(Op.OpAtomicSMax, Op.OpAtomicUMax,
                                    lambda L, dt, old, v: L.glsl(GLSL.FMax, dt, old, v)),
    IROp.ATOMIC_MIN: AtomicLowering(Op.OpAtomicSMin, Op.OpAtomicUMin,
                                    lambda L, dt, old, v: L.glsl(GLSL.FMin, dt, old, v)),
}

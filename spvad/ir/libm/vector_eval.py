"""One Op's expansion evaluated over whole numpy arrays, for measuring the math library on millions of points (the
interpreter runs a thread at a time): each op rounded once in its dtype as scalar_ops.EVAL computes it, which
tests/spirv/test_libm_bits.py checks against the interpreter and the device."""
import numpy as np

from ... import types as T
from .. import nodes as N
from ..emit import Emitter
from ..ops import Op
from .expand import expand_block


def expansion_stmts(build, dtype, arity):
    """(parameters, statements, result) of `build(e, *params)` (placing IR with the Emitter `e`) for operands
    of `dtype`, every expandable Op in it expanded."""
    params = [N.ScalarArg(N.ScalarParam(f"x{k}", dtype, k)) for k in range(arity)]
    e = Emitter()
    e.block = N.Block()
    out = build(e, *params)
    mapping = {}
    expand_block(e.block, mapping)
    return params, e.block.stmts, mapping.get(out, out)


def evaluate(op, dtype, *arrays):
    """`op` over the arrays (of `dtype`'s numpy type) as its expansion computes it: a new array of `dtype`."""
    return evaluate_built(lambda e, *p: e.compute(op, *p), dtype, *arrays)


def evaluate_built(build, dtype, *arrays):
    """What `build(e, *params)` computes (ir/math_functions.py's expansions, an Op's), over the arrays."""
    params, stmts, result = expansion_stmts(build, dtype, len(arrays))
    env = {p: np.asarray(a, dtype.np) for p, a in zip(params, arrays)}
    with np.errstate(all="ignore"):
        for s in stmts:
            if isinstance(s, N.Const):
                env[s] = s.dtype.np.type(s.value) if not s.dtype.is_bool else np.bool_(s.value)
            else:
                env[s] = _ROWS[s.op](s, *(env[a] for a in s.args))
    return np.broadcast_to(env[result], np.broadcast(*arrays).shape).astype(dtype.np)


def _wrapping(fn):
    """An integer op on 32-bit arrays, wrapping as the GPU does (numpy int32 arrays wrap)."""
    return lambda s, *a: fn(*(np.asarray(x, s.dtype.np) for x in a)).astype(s.dtype.np)


def _cast(s, a):
    src, dst = np.asarray(a).dtype, s.dtype
    a = np.asarray(a)
    if dst.is_bool:
        return a != 0
    if src == np.bool_:
        return a.astype(dst.np)
    if dst.is_int and src.kind == "f":
        lo, hi = T.INT_RANGE[dst.name]
        inside = (a >= lo) & (a < float(hi) + 1.0)
        t = np.trunc(np.where(inside, a, 0)).astype(np.int64)
        return np.where(inside, t, np.where(a > 0, hi, np.where(a < 0, lo, 0))).astype(dst.np)
    if dst.is_int:   # i32 <-> u32: the bits kept
        return a.astype(np.int64).astype(dst.np)
    return a.astype(dst.np)


def _shift(fn):
    return lambda s, a, n: fn(np.asarray(a, s.dtype.np), (np.asarray(n).astype(np.int64) & 31).astype(s.dtype.np))


def _powi(s, x, n):
    """scalar_ops._powi over arrays: multiplication by squaring from bit 0 up, 1 / r for n < 0 (float bases)."""
    n = np.asarray(n).astype(np.int64)
    m = np.abs(n)
    r, b = np.ones_like(x), np.asarray(x)
    for k in range(32):
        r = np.where((m >> k) & 1 == 1, r * b, r)
        b = b * b
    return np.where(n < 0, s.dtype.np.type(1) / r, r)


def _float_bits(s, x):
    x = np.asarray(x)
    return x.view(np.int32) if x.dtype == np.float32 else (x.view(np.int64) >> 32).astype(np.int32)


_ROWS = {
    Op.NEG: lambda s, a: -a, Op.ABS: lambda s, a: np.abs(a), Op.STOP_GRADIENT: lambda s, a: a,
    Op.ADD: _wrapping(np.add), Op.SUB: _wrapping(np.subtract), Op.MUL: _wrapping(np.multiply),
    Op.DIV: lambda s, a, b: a / b, Op.SQRT: lambda s, a: np.sqrt(a),
    Op.FLOOR: lambda s, a: np.floor(a), Op.CEIL: lambda s, a: np.ceil(a), Op.ROUND: lambda s, a: np.rint(a),
    Op.MIN: lambda s, a, b: np.where(b < a, b, a), Op.MAX: lambda s, a, b: np.where(b > a, b, a),
    Op.LT: lambda s, a, b: a < b, Op.LE: lambda s, a, b: a <= b, Op.GT: lambda s, a, b: a > b,
    Op.GE: lambda s, a, b: a >= b, Op.EQ: lambda s, a, b: a == b, Op.NE: lambda s, a, b: a != b,
    Op.AND: lambda s, a, b: a & b, Op.OR: lambda s, a, b: a | b, Op.NOT: lambda s, a: ~np.asarray(a, bool),
    Op.SELECT: lambda s, c, a, b: np.where(c, a, b),
    Op.CAST: _cast,
    Op.BIT_AND: _wrapping(np.bitwise_and), Op.BIT_OR: _wrapping(np.bitwise_or),
    Op.BIT_XOR: _wrapping(np.bitwise_xor),
    Op.SHL: _shift(np.left_shift), Op.SHR: _shift(np.right_shift),
    Op.POWI: _powi, Op.FLOORDIV: lambda s, a, b: np.floor_divide(a, b),
    Op.FLOAT_BITS: _float_bits,
    Op.FLOAT_LOW_BITS: lambda s, x: (np.asarray(x).view(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32),
    Op.F32_FROM_BITS: lambda s, i: np.asarray(i, np.int32).view(np.float32),
    Op.F64_FROM_BITS: lambda s, hi, lo: ((np.asarray(hi, np.int32).astype(np.int64) << 32)
                                         | np.asarray(lo, np.uint32).astype(np.int64)).view(np.float64),
    Op.MUL_HI: lambda s, a, b: ((np.asarray(a, np.uint32).astype(np.uint64)
                                 * np.asarray(b, np.uint32).astype(np.uint64)) >> np.uint64(32)).astype(np.uint32),
}

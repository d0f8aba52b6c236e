"""Typed IR construction shared by the frontend: constants, casts, numpy-like promotion, Python-semantics ops.

`Emitter` appends statements to the current block; Python scalars stay "weak" (untyped) until combined
with a typed value, as literals do in numpy and Taichi.
"""
from .. import types as T
from ..errors import CompileError
from . import nodes as N
from .ops import Op, result_dtype

PY_SCALARS = (bool, int, float)

_ARITH = {"+": Op.ADD, "-": Op.SUB, "*": Op.MUL, "/": Op.DIV, "//": Op.FLOORDIV, "%": Op.MOD,
          "&": Op.BIT_AND, "|": Op.BIT_OR, "^": Op.BIT_XOR, "<<": Op.SHL, ">>": Op.SHR}
_CMP = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}
_PY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
       "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b,
       "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
       "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "<": lambda a, b: a < b,
       "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
       "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
MAX_EXACT_POWER = 32


def py_dtype(v):
    return T.u1 if isinstance(v, bool) else T.i32 if isinstance(v, int) else T.f32


class Emitter:
    def __init__(self):
        self.block = None   # the Block statements go to
        self.loc = None     # Loc of the Python statement being compiled

    def error(self, msg):
        loc = self.loc
        raise CompileError(msg, loc and loc.filename, loc and loc.lineno, loc and loc.source)

    def emit(self, stmt):
        stmt.loc = self.loc
        self.block.append(stmt)
        return stmt

    # ---- values ----
    def const(self, v, dtype=None):
        dtype = dtype or py_dtype(v)
        if dtype.is_bool:
            v = bool(v)
        elif dtype.is_int:
            v = int(v)
            v = (v & 0xFFFFFFFF) if dtype == T.u32 else ((v + 2**31) % 2**32) - 2**31
        else:
            v = float(v)
        return self.emit(N.Const(v, dtype))

    def typed(self, v, like=None):
        """An IR value for `v`; a weak Python scalar takes the type of `like` (a typed statement) if it fits."""
        if isinstance(v, N.Stmt):
            return v
        if isinstance(v, PY_SCALARS):
            lt = like.dtype if isinstance(like, N.Stmt) else None
            if isinstance(v, bool):
                return self.const(v)
            if isinstance(v, int):
                dt = T.i32 if lt is None or lt.is_bool else lt
                # as numpy 2 does, refuse a literal the integer type cannot hold (u32: any 32-bit pattern)
                if dt.is_int and not -2**31 <= v < (2**31 if dt == T.i32 else 2**32):
                    self.error(f"the integer {v} does not fit in {dt}")
                return self.const(v, dt)
            return self.const(v, lt if lt is not None and lt.is_float else T.DEFAULT_FLOAT)
        self.error(f"expected a number, got {type(v).__name__} {v!r}")

    def cast(self, v, dtype):
        v = self.typed(v)
        if v.dtype == dtype:
            return v
        return self.convert(v, dtype)

    def convert(self, v, dtype):
        """Statement `v` as another dtype (the frontend computes weak floats again in f64 instead)."""
        if isinstance(v, N.Const):
            return self.const(v.value, dtype)
        return self.emit(N.Compute(Op.CAST, (v,), dtype))

    def to_bool(self, v):
        if isinstance(v, PY_SCALARS):
            return bool(v)
        v = self.typed(v)
        if v.dtype.is_bool:
            return v
        return self.compute(Op.NE, v, self.const(0, v.dtype))

    def to_float(self, v):
        v = self.typed(v)
        return v if v.dtype.is_float else self.cast(v, T.DEFAULT_FLOAT)

    def compute(self, op, *args, dtype=None):
        try:
            rd = result_dtype(op, [a.dtype for a in args], dtype)
        except TypeError as e:
            self.error(str(e))
        return self.emit(N.Compute(op, tuple(args), rd))

    # ---- operators with Python/numpy semantics ----
    def unify(self, a, b):
        """Promote two operands (weak scalars adapt) to one dtype."""
        if not isinstance(a, N.Stmt) and not isinstance(b, N.Stmt):
            a, b = self.typed(a), self.typed(b)
        a = self.typed(a, like=b)
        b = self.typed(b, like=a)
        dt = T.promote(a.dtype, b.dtype) if a.dtype != b.dtype else a.dtype
        return self.cast(a, dt), self.cast(b, dt)

    def binop(self, sym, a, b):
        if isinstance(a, PY_SCALARS) and isinstance(b, PY_SCALARS):
            try:
                return _PY[sym](a, b)
            except (ZeroDivisionError, OverflowError, ValueError) as e:
                self.error(f"constant expression fails: {e}")
        if sym == "**":
            return self.power(a, b)
        if sym == "/":
            a, b = self.unify(a, b)
            return self.compute(Op.DIV, self.to_float(a), self.to_float(b))
        if sym in _CMP:
            a, b = self.unify(a, b)
            return self.compute(_CMP[sym], a, b)
        a, b = self.unify(a, b)
        if a.dtype.is_bool:
            if sym in ("&", "|", "^"):
                return self.compute({"&": Op.AND, "|": Op.OR, "^": Op.NE}[sym], a, b)
            a, b = self.cast(a, T.i32), self.cast(b, T.i32)
        if sym in ("&", "|", "^", "<<", ">>") and a.dtype.is_float:
            self.error(f"operator {sym} needs integers, got {a.dtype}")
        return self.compute(_ARITH[sym], a, b)

    def power(self, a, b):
        """`a ** b` as Python computes it, also for a < 0: a small constant integer b is exact repeated
        multiplication, any other integer b (a runtime int, a larger constant) Op.POWI (exponentiation by
        squaring), a float b Op.POW (C99 pow: also a < 0 with an integer-valued b, a = 0, infinities)."""
        if isinstance(b, float) and b.is_integer() and abs(b) < 2**31:
            b = int(b)
            a = self.to_float(a)
        if isinstance(b, bool):
            b = int(b)
        if isinstance(b, int) and abs(b) <= MAX_EXACT_POWER:
            return self.exact_power(a, b)
        if isinstance(b, int) and -2**31 <= b < 2**31:
            b = self.const(b, T.i32)
        if isinstance(b, N.Stmt) and not b.dtype.is_float:
            a = self.typed(a)
            if a.dtype.is_bool:
                a = self.cast(a, T.i32)
            if isinstance(b, N.Const) and b.value < 0 and not a.dtype.is_float:
                self.error("integer ** negative power is not supported")
            return self.compute(Op.POWI, a, self.cast(b, T.i32) if b.dtype.is_bool else b)
        a, b = self.unify(self.to_float(a) if isinstance(a, N.Stmt) else float(a),
                          self.to_float(b) if isinstance(b, N.Stmt) else float(b))
        return self.compute(Op.POW, a, b)

    def exact_power(self, a, k):
        """`a ** k` for a constant int k by repeated multiplication (exponentiation by squaring)."""
        a = self.typed(a)
        if a.dtype.is_bool:
            a = self.cast(a, T.i32)
        if k < 0 and not a.dtype.is_float:
            self.error("integer ** negative power is not supported")
        result, base, m = None, a, abs(k)
        while m:
            if m & 1:
                result = base if result is None else self.compute(Op.MUL, result, base)
            m >>= 1
            if m:
                base = self.compute(Op.MUL, base, base)
        if result is None:
            return self.const(1, a.dtype)
        return self.compute(Op.DIV, self.const(1.0, a.dtype), result) if k < 0 else result

    def unary(self, sym, v):
        if isinstance(v, PY_SCALARS):
            return {"-": lambda x: -x, "+": lambda x: +x, "not": lambda x: not x, "~": lambda x: ~x}[sym](v)
        if sym == "not":
            return self.compute(Op.NOT, self.to_bool(v))
        if sym == "+":
            return v
        if v.dtype.is_bool:
            v = self.cast(v, T.i32)
        if sym == "-":
            return self.compute(Op.NEG, v)
        if v.dtype.is_float:
            self.error("operator ~ needs an integer")
        return self.compute(Op.BIT_NOT, v)

    def math1(self, op, v):
        if op in (Op.ABS, Op.SIGN, Op.NEG):
            v = self.typed(v)
            return self.compute(op, self.cast(v, T.i32) if v.dtype.is_bool else v)
        return self.compute(op, self.to_float(v))

    def minmax(self, op, *vals):
        if len(vals) < 2:
            self.error("min/max need at least two arguments")
        acc = vals[0]
        for v in vals[1:]:
            a, b = self.unify(acc, v)
            acc = self.compute(op, a, b)
        return acc

    def extremum(self, op, *vals):
        """The max (min) of several values, `v.max()`: the value of `minmax`, its derivative split equally among
        the values equal to it, as JAX's reduce_max (pairs alone give three ties 1/2, 1/4, 1/4). With m that
        value, w = 1 / (number of ties): m - sum((m - v) w) over the ties where m is finite ((m - v) w = +0, so
        the value stays m, -0.0 too), sum(v w) where it is infinite (m - v is NaN there); w stays finite when
        nothing ties (a NaN), as the untaken side's derivative times zero must."""
        m = self.minmax(op, *vals)
        if len(vals) < 3 or not m.dtype.is_float:
            return m
        vals = [self.cast(self.typed(v, like=m), m.dtype) for v in vals]
        dt = m.dtype
        frozen = self.compute(Op.STOP_GRADIENT, m)
        zero, one = self.const(0.0, dt), self.const(1.0, dt)
        ties = [self.compute(Op.EQ, v, frozen) for v in vals]
        count = self._sum([self.compute(Op.SELECT, t, one, zero) for t in ties])
        w = self.compute(Op.DIV, one, self.compute(Op.MAX, count, one))
        finite = self.compute(Op.SUB, frozen, self._sum(
            [self.compute(Op.SELECT, t, self.compute(Op.MUL, self.compute(Op.SUB, frozen, v), w), zero)
             for t, v in zip(ties, vals)]))
        infinite = self._sum([self.compute(Op.SELECT, t, self.compute(Op.MUL, v, w), zero) for t, v in zip(ties, vals)])
        is_finite = self.compute(Op.LT, self.compute(Op.ABS, frozen), self.const(float("inf"), dt))
        split = self.compute(Op.SELECT, is_finite, finite, infinite)
        return self.compute(Op.SELECT, self.compute(Op.GT, count, one), split, m)

    def _sum(self, values):
        acc = values[0]
        for v in values[1:]:
            acc = self.compute(Op.ADD, acc, v)
        return acc

    def select(self, cond, a, b):
        cond = self.to_bool(cond)
        if isinstance(cond, bool):
            return a if cond else b
        a, b = self.unify(a, b)
        return self.compute(Op.SELECT, cond, a, b)

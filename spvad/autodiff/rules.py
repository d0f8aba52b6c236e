"""Derivatives, one row per Op: `PARTIALS[op](e, args, out) -> (d out / d arg, ...)` for a differentiable
Compute op, a mark (ZERO_GRADIENT, NO_FLOAT_OPERAND, AFTER_AUTODIFF) for the others, and ATOMIC_RULES for
atomics.

`e` is an Emitter placing IR; `args` and `out` are the primal values. `None` marks an operand that gets
no gradient (inactive, an integer or a bool). Reverse mode multiplies each partial by the output's
adjoint; forward mode by the operand's dual.
"""
import math
from dataclasses import dataclass

from ..ir.ops import BINARY_BITWISE, FLOAT_BIT_OPS, LOGICAL, Op


def _c(e, v, like):
    return e.const(v, like.dtype)


def _mul(e, a, b):
    return e.compute(Op.MUL, a, b)


def _div(e, a, b):
    return e.compute(Op.DIV, a, b)


def _sub(e, a, b):
    return e.compute(Op.SUB, a, b)


def _add(e, a, b):
    return e.compute(Op.ADD, a, b)


def _one_minus_sq(e, v):
    """1 - v^2 as (1 - v)(1 + v): exact-ish for |v| near 1, where 1 - v*v cancels (asin's x = 0.99: 25 ulp)."""
    return _mul(e, _sub(e, _c(e, 1.0, v), v), _add(e, _c(e, 1.0, v), v))


def _bool_to(e, cond, like, if_true=1.0, if_false=0.0):
    return e.compute(Op.SELECT, cond, _c(e, if_true, like), _c(e, if_false, like))


def _atan2(e, args, out):
    y, x = args
    r2 = _add(e, _mul(e, x, x), _mul(e, y, y))
    return _div(e, x, r2), e.compute(Op.NEG, _div(e, y, r2))


def _pow(e, args, out):
    a, b = args
    # As JAX: d/da a^b = b a^(b-1) (no division by a: +inf for b < 1 at a = 0, NaN for b = 0 there);
    # d/db a^b = a^b log a, with log(0) taken as 0 at a = 0 (d/db 0^b = 0), NaN for a < 0
    da = _mul(e, b, e.compute(Op.POW, a, _sub(e, b, _c(e, 1.0, b))))
    log_a = e.compute(Op.LOG, e.compute(Op.SELECT, e.compute(Op.EQ, a, _c(e, 0.0, a)), _c(e, 1.0, a), a))
    return da, _mul(e, out, log_a)


def _extremum(e, args, out):
    # As JAX's max/min: the operand equal to the result gets 1, each gets 1/2 when they tie
    a, b = args
    wins = [e.compute(Op.EQ, v, out) for v in (a, b)]
    return (e.compute(Op.SELECT, wins[0], _bool_to(e, wins[1], out, 0.5, 1.0), _c(e, 0.0, out)),
            e.compute(Op.SELECT, wins[1], _bool_to(e, wins[0], out, 0.5, 1.0), _c(e, 0.0, out)))


def _powi(e, args, out):
    x, n = args
    # d/dx x^n = n x^(n-1), exact for x < 0 like the value; no gradient for the integer n. n = 0 takes
    # x^0 instead of x^-1, so that 0 * (1/0) cannot make the partial NaN at x = 0.
    m = e.compute(Op.SELECT, e.compute(Op.EQ, n, _c(e, 0, n)), n, _sub(e, n, _c(e, 1, n)))
    return _mul(e, e.cast(n, x.dtype), e.compute(Op.POWI, x, m)), None


def _fmod(e, args, out):
    a, b = args
    # fmod(a, b) = a - b trunc(a / b): d/da = 1, d/db = -trunc(a / b)
    q = _div(e, a, b)
    positive = e.compute(Op.GE, q, _c(e, 0.0, q))
    trunc = e.compute(Op.SELECT, positive, e.compute(Op.FLOOR, q), e.compute(Op.CEIL, q))
    return _c(e, 1.0, out), e.compute(Op.NEG, trunc)


# Piecewise constant in their float operands (steps, comparisons): a derivative zero almost everywhere.
ZERO_GRADIENT = {Op.SIGN, Op.FLOOR, Op.CEIL, Op.ROUND, Op.FLOORDIV, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
ZERO_GRADIENT |= {Op.STOP_GRADIENT}   # zero by definition: sp.stop_gradient(v) is v as a constant
# Integer and bool operands only (ops.py type rules): nothing to differentiate.
NO_FLOAT_OPERAND = {Op.NOT, Op.BIT_NOT} | BINARY_BITWISE | LOGICAL
# The math library's float-bit ops (ir/libm/) appear only after autodiff: never differentiated.
AFTER_AUTODIFF = set(FLOAT_BIT_OPS)
NOT_DIFFERENTIABLE = ZERO_GRADIENT | NO_FLOAT_OPERAND | AFTER_AUTODIFF

PARTIALS = {
    Op.NEG: lambda e, a, out: (_c(e, -1.0, out),),
    Op.ABS: lambda e, a, out: (e.compute(Op.SIGN, a[0]),),
    Op.SIN: lambda e, a, out: (e.compute(Op.COS, a[0]),),
    Op.COS: lambda e, a, out: (e.compute(Op.NEG, e.compute(Op.SIN, a[0])),),
    Op.TAN: lambda e, a, out: (_add(e, _c(e, 1.0, out), _mul(e, out, out)),),
    Op.ASIN: lambda e, a, out: (e.compute(Op.RSQRT, _one_minus_sq(e, a[0])),),
    Op.ACOS: lambda e, a, out: (e.compute(Op.NEG, e.compute(Op.RSQRT, _one_minus_sq(e, a[0]))),),
    Op.ATAN: lambda e, a, out: (_div(e, _c(e, 1.0, out), _add(e, _c(e, 1.0, out), _mul(e, a[0], a[0]))),),
    Op.SINH: lambda e, a, out: (e.compute(Op.COSH, a[0]),),
    Op.COSH: lambda e, a, out: (e.compute(Op.SINH, a[0]),),
    Op.TANH: lambda e, a, out: (_one_minus_sq(e, out),),
    Op.EXP: lambda e, a, out: (out,),
    Op.LOG: lambda e, a, out: (_div(e, _c(e, 1.0, out), a[0]),),
    Op.LOG2: lambda e, a, out: (_div(e, _c(e, 1.0 / math.log(2.0), out), a[0]),),
    Op.EXP2: lambda e, a, out: (_mul(e, out, _c(e, math.log(2.0), out)),),
    Op.LOG10: lambda e, a, out: (_div(e, _c(e, 1.0 / math.log(10.0), out), a[0]),),
    Op.EXPM1: lambda e, a, out: (e.compute(Op.EXP, a[0]),),   # not expm1(x) + 1: it cancels for x < 0
    Op.LOG1P: lambda e, a, out: (_div(e, _c(e, 1.0, out), _add(e, _c(e, 1.0, out), a[0])),),
    Op.SQRT: lambda e, a, out: (_div(e, _c(e, 0.5, out), out),),
    Op.RSQRT: lambda e, a, out: (_div(e, _mul(e, _c(e, -0.5, out), out), a[0]),),
    Op.CAST: lambda e, a, out: (_c(e, 1.0, out),) if a[0].dtype.is_float and out.dtype.is_float else (None,),
    Op.ADD: lambda e, a, out: (_c(e, 1.0, out), _c(e, 1.0, out)),
    Op.SUB: lambda e, a, out: (_c(e, 1.0, out), _c(e, -1.0, out)),
    Op.MUL: lambda e, a, out: (a[1], a[0]),
    Op.DIV: lambda e, a, out: (_div(e, _c(e, 1.0, out), a[1]), e.compute(Op.NEG, _div(e, out, a[1]))),
    # a mod b = a - b floor(a/b)
    Op.MOD: lambda e, a, out: (_c(e, 1.0, out), e.compute(Op.NEG, e.compute(Op.FLOOR, _div(e, a[0], a[1])))),
    Op.POW: _pow,
    Op.POWI: _powi,
    Op.ATAN2: _atan2,
    Op.HYPOT: lambda e, a, out: (_div(e, a[0], out), _div(e, a[1], out)),
    Op.FMOD: _fmod,
    Op.MIN: _extremum,
    Op.MAX: _extremum,
    Op.SELECT: lambda e, a, out: (None, _bool_to(e, a[0], out), _bool_to(e, a[0], out, 0.0, 1.0)),
}


def partials(e, op, args, out):
    """The partials of `out = op(*args)`, `None` for operands that get no gradient (ints, bools, zero)."""
    if not out.dtype.is_float or op in NOT_DIFFERENTIABLE:
        return (None,) * len(args)
    ps = PARTIALS[op](e, args, out)
    return tuple(p if p is not None and a.dtype.is_float else None for p, a in zip(ps, args))


# ---- atomics: `a[idx] = op(a[idx], v)`, the final value of an element depending on every thread's v ---------
@dataclass(frozen=True)
class AtomicRule:
    """How the derivative of an element's final value (after a launch) reaches each contribution v.
    `winners` False: linear, d final / d v = 1 for every v (forward mode adds dual(v) into the element's
    dual atomically; reverse mode gives v the element's adjoint). True: only the contributions equal to the
    final value get it, split equally among tied winners; none when the element's old value won
    (autodiff/extremum_ties.py builds the counting and fix-up tasks around the derivative task)."""
    winners: bool


LINEAR, WINNERS = AtomicRule(winners=False), AtomicRule(winners=True)
ATOMIC_RULES = {Op.ATOMIC_ADD: LINEAR, Op.ATOMIC_MAX: WINNERS, Op.ATOMIC_MIN: WINNERS}

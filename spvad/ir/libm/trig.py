"""The trigonometric family as IR expansions (libm's interface, __init__.py): sin, cos, tan here, on an argument
reduced by pi/2 (trig_reduce.py); asin, acos, atan, atan2 in trig_inverse.py. Polynomials fitted against mpmath
(weighted least squares on Chebyshev nodes, near minimax; the coefficients rounded to the dtype), the kernels
in fdlibm's shape: the reduced argument's low word enters to first order, results as double-words where a
division follows (tan). f32 within 4 ulp and f64 within 2 ulp of the exact result (tests/ir/test_libm_trig.py).
"""
import math
from typing import NamedTuple

from ... import types as T
from ..ops import Op
from . import trig_f32
from .arith import Arith
from .trig_inverse import acos, asin, atan, atan2
from .trig_reduce import fast_two_sum, reduce, two_prod

# sin(r) = r + r z P(z), z = r^2, |r| <= 0.8: P's coefficients, highest power first (P(0) ~ -1/6)
SIN_F32 = (-0.00019503841758705676, 0.008332077413797379, -0.16666653752326965)
SIN_F64 = (1.5890474147290154e-10, -2.5050649883655073e-08, 2.7557313006235786e-06, -0.00019841269827846223,
           0.008333333333319974, -0.1666666666666662)
# cos(r) = 1 - z/2 + z^2 Q(z): Q's coefficients (Q(0) ~ 1/24)
COS_F32 = (2.4422226488240995e-05, -0.0013887223321944475, 0.04166664555668831)
COS_F64 = (-1.1355065409068715e-11, 2.0875635037374564e-09, -2.7557313704963816e-07, 2.4801587287244747e-05,
           -0.0013888888888870536, 0.04166666666666658)


def _kernels(f, r, rl):
    """sin and cos of r + rl (|rl| <= ulp(r), |r| <= 0.8), each as an unevaluated sum (head, tail), |tail| small:
    sin = r + (r^3 P(z) + rl (1 - z/2)); cos = w + (((1 - w) - z/2) + z^2 Q(z) - r rl), w = 1 - z/2 rounded and
    (1 - w) - z/2 its rounding error, exact (fdlibm's kernels)."""
    s_coeffs, c_coeffs = (SIN_F64, COS_F64) if f.f64 else (SIN_F32, COS_F32)
    z = f.mul(r, r)
    v = f.mul(z, r)
    p = f.poly(s_coeffs[:-1], z)
    s_tail = f.neg(f.sub(f.sub(f.mul(z, f.sub(f.mul(0.5, rl), f.mul(v, p))), rl), f.mul(v, s_coeffs[-1])))
    hz = f.mul(0.5, z)
    w = f.sub(1.0, hz)
    c_tail = f.add(f.sub(f.sub(1.0, w), hz), f.sub(f.mul(z, f.mul(z, f.poly(c_coeffs, z))), f.mul(r, rl)))
    return (r, s_tail), (w, c_tail)


def _finish(f, p, value):
    """`value` where x is finite, NaN (x - x) for infinities and NaN."""
    return f.where(p.finite, value, p.nan)


class _Parts(NamedTuple):
    """What sin, cos and tan of one x have in common."""
    neg: object      # x's sign bit
    q: object        # the quadrant, a float in 0..3
    odd: object      # whether q is odd
    sin: tuple       # sin and cos of the reduced argument as _kernels gives them (head, tail)
    cos: tuple
    finite: object   # |x| < inf
    nan: object      # x - x: NaN for infinities and NaN


def _parts(f, x):
    """The parts of x sin, cos and tan share (_Parts; trig_f32.Reduced for f32), computed once per operand where
    the pass shares work (expand.py: `e.shared`, the entries that dominate this expansion): sin, cos and tan of
    one x cost one reduction and one pair of polynomials, and give the bits each gives alone (the same
    statements)."""
    shared = getattr(f.e, "shared", None)   # None: called directly with a plain Emitter, nothing shared
    key = ("trig", x)
    if shared is not None and key in shared:
        return shared[key]
    if f.f64:
        ax = f.abs(x)
        q, r, rl = reduce(f, ax)
        parts = _Parts(f.sign_bit(x), q, _odd(f, q), *_kernels(f, r, rl), f.lt(ax, math.inf), f.sub(x, x))
    else:
        parts = trig_f32.reduce(f, x)
    if shared is not None:
        shared[key] = parts
    return parts


def _odd_n(f, p):
    return f.iop("ne", f.iop("bit_and", p.n, 1, dtype=T.u32), 0, dtype=T.u32)


def _flip(f, cond, v):
    return f.where(cond, f.neg(v), v)


def _odd(f, q):
    return f.eq(f.sub(q, f.mul(2.0, f.floor(f.mul(q, 0.5)))), 1.0)


def sin(e, x):
    """sin(|x|) by quadrant: sin, cos, -sin, -cos of r; odd: x's sign bit flips it."""
    f = Arith(e, x)
    p = _parts(f, x)
    if not f.f64:   # the quadrant's sign (n & 2) and x's, by bits
        flip = f.iop("bit_xor", f.iop("shl", f.iop("bit_and", p.n, 2, dtype=T.u32), 30, dtype=T.u32), p.sign,
                     dtype=T.u32)
        return trig_f32.with_sign(f, f.where(_odd_n(f, p), p.cos, p.sin), flip)
    (sh, st), (ch, ct) = p.sin, p.cos
    v = f.add(f.where(p.odd, ch, sh), f.where(p.odd, ct, st))
    return _finish(f, p, _flip(f, f.ne(f.ge(p.q, 2.0), p.neg), v))


def cos(e, x):
    """cos(|x|) by quadrant: cos, -sin, -cos, sin of r."""
    f = Arith(e, x)
    p = _parts(f, x)
    if not f.f64:   # negative in quadrants 1 and 2: bit 1 of n + 1
        flip = f.iop("shl", f.iop("bit_and", f.iop("add", p.n, 1, dtype=T.u32), 2, dtype=T.u32), 30, dtype=T.u32)
        return trig_f32.with_sign(f, f.where(_odd_n(f, p), p.sin, p.cos), flip)
    (sh, st), (ch, ct) = p.sin, p.cos
    v = f.add(f.where(p.odd, sh, ch), f.where(p.odd, st, ct))
    return _finish(f, p, _flip(f, e.compute(Op.OR, f.eq(p.q, 1.0), f.eq(p.q, 2.0)), v))


def tan(e, x):
    """sin/cos of r (even quadrant) or -cos/sin (odd), a double-word quotient: a = n / d rounded, then
    a + (n - a d) / d with a d exact (Dekker), so that only the last rounding and the kernels' errors count."""
    f = Arith(e, x)
    p = _parts(f, x)
    if not f.f64:
        return _tan_f32(f, p)
    odd = p.odd
    sh, sl = fast_two_sum(f, *p.sin)
    ch, cl = fast_two_sum(f, *p.cos)
    nh, nl = f.where(odd, ch, sh), f.where(odd, cl, sl)
    dh, dl = f.where(odd, f.neg(sh), ch), f.where(odd, f.neg(sl), cl)
    a = f.div(nh, dh)
    ad, ade = two_prod(f, a, dh)
    rem = f.sub(f.add(f.sub(f.sub(nh, ad), ade), nl), f.mul(a, dl))
    return _finish(f, p, _flip(f, p.neg, f.add(a, f.div(rem, dh))))


def _tan_f32(f, p):
    """sin/cos (even quadrant) or -cos/sin (odd) of r, one division: near the poles r's own rounding counts, so the
    shared sin and cos of r move to first order by d = r - fl(r) (trig_f32.r_error): within 3.5 ulp."""
    d = trig_f32.r_error(f, p)
    s = f.add(p.sin, f.mul(d, p.cos))
    c = f.sub(p.cos, f.mul(d, p.sin))
    odd = _odd_n(f, p)
    t = f.div(f.where(odd, c, s), f.where(odd, f.neg(s), c))
    return trig_f32.with_sign(f, t, p.sign)


EXPANSIONS = {Op.SIN: sin, Op.COS: cos, Op.TAN: tan, Op.ASIN: asin, Op.ACOS: acos, Op.ATAN: atan,
              Op.ATAN2: atan2}

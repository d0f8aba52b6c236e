"""sinh, cosh and tanh as IR expansions on exp_log's expm1 and exp (musl's forms of fdlibm's designs): expm1 near
0 so that nothing cancels, exp(|x|) / 2 as y 2^(k-1) where exp(-|x|) is below the rounding (no overflow before
the result's own), the sign restored last (odd functions: -0.0 stays -0.0). f32 tanh is one short formula
instead (_tanh_f32), for speed.
"""
import math

from ... import types as T
from ..ops import Op
from .arith import Arith
from .exp_log import EXP_MAX, LN2, LN2_HI, LN2_LO, exp_parts, expm1

# |x| from which exp(-|x|) is below half an ulp of exp(|x|): sinh, cosh = exp(|x|) / 2
LARGE = {T.f64: 22.0, T.f32: 9.0}
TINY = {T.f64: 2.0 ** -28, T.f32: 2.0 ** -12}   # |x| below: sinh(x), tanh(x) round to x
# sinh(x) = x + x^3 P(x^2) for |x| < 1, tanh(x) = x + x^3 P(x^2) for |x| <= log(3)/2 (f64; f32's tanh is
# _tanh_f32): least-squares fits of relative error 2e-18 and 2e-17 (f64), 1e-9 (f32) (mpmath, 80 Chebyshev
# nodes); the x^3 term is at most a tenth of x there, so its rounding costs little
SINH_P = {T.f64: (7.746016149368509e-13, 1.605768451714064e-10, 2.505211764064581e-08, 2.7557319191669366e-06,
                  0.00019841269841323523, 0.0083333333333333, 0.16666666666666666),
          T.f32: (2.8061366008631993e-06, 0.0001983812359908686, 0.008333339594615598, 0.16666666647293216)}
TANH_P = {T.f64: (-2.061693678581207e-05, 8.513223936472215e-05, -0.00023464551969549761, 0.0005889393528070772,
                  -0.0014556624245583981, 0.00359211044238918, -0.008863234401719258, 0.02186948849378975,
                  -0.05396825396743551, 0.13333333333332714, -0.3333333333333333)}

# f32 tanh: expm1(r) = r + r^2 Q(r) on |r| <= ln2 / 2, a fit of relative error 1.8e-8 (weighted least squares on
# 400 Chebyshev nodes, reweighted toward minimax, float64); the |x| beyond which tanh is 1 (it rounds to 1 from 9.01)
TANH_EXPM1_Q = (0.0013881995109841228, 0.008368832990527153, 0.041667304933071136, 0.1666651964187622,
                0.4999999701976776)
TANH_CLAMP = 9.1


def _half_exp(f, a):
    """exp(a) / 2 for a >= LARGE, rounded once (inf beyond the largest finite result)."""
    y, k = exp_parts(f, f.where(f.lt(a, LARGE[f.dt]), LARGE[f.dt], a))
    return f.where(f.gt(a, EXP_MAX[f.dt] + 1.0), math.inf, f.scale(y, f.iop("sub", k, 1)))


def _odd_poly(f, a, coeffs):
    """a + a^3 P(a^2)."""
    s = f.mul(a, a)
    return f.add(a, f.mul(f.mul(a, s), f.poly(coeffs[f.dt], s)))


def sinh(e, x):
    f = Arith(e, x)
    a = f.abs(x)
    t = expm1(e, f.where(f.lt(a, LARGE[f.dt]), a, 1.0))
    below_one = _odd_poly(f, f.where(f.lt(a, 1.0), a, 0.5), SINH_P)
    above_one = f.mul(0.5, f.add(t, f.div(t, f.add(t, 1.0))))
    r = f.where(f.lt(a, 1.0), below_one, f.where(f.lt(a, LARGE[f.dt]), above_one, _half_exp(f, a)))
    r = f.where(f.sign_bit(x), f.neg(r), r)
    return f.where(f.either(f.lt(a, TINY[f.dt]), f.is_nan(x)), x, r)


def cosh(e, x):
    f = Arith(e, x)
    a = f.abs(x)
    small = f.lt(a, math.log(2.0))
    t = expm1(e, f.where(small, a, 0.0))
    near = f.add(1.0, f.div(f.mul(t, t), f.mul(2.0, f.add(1.0, t))))
    mid_a = f.where(f.lt(a, LARGE[f.dt]), a, 1.0)
    y, k = exp_parts(f, mid_a)
    u = f.scale(y, k)
    mid = f.mul(0.5, f.add(u, f.div(1.0, u)))
    r = f.where(small, near, f.where(f.lt(a, LARGE[f.dt]), mid, _half_exp(f, a)))
    return f.where(f.is_nan(x), x, r)


def _tanh_f32(f, x):
    """tanh(a) = t / (t + 2) for a = |x| clamped to 9.1 (where tanh rounds to 1), t = expm1(2a) = 2^k expm1(r) +
    (2^k - 1) >= 0 (nothing cancels; for x < 0 this form would lose an ulp near -1), the sign restored last.
    2a = k ln2 + r (Cody-Waite: k LN2_HI exact for k <= 27), expm1(r) = r + r^2 Q(r), 2^k by its bits. One
    formula for every x, as lavapipe pays for every side of a select: within 3 ulp over every f32 (the roundings
    of t, t + 2 and the quotient; the two-branch form of f64 is within 1.3 in f32, at four times the statements)."""
    a = f.abs(x)
    y = f.add(a, a)
    y = f.where(f.gt(y, 2.0 * TANH_CLAMP), 2.0 * TANH_CLAMP, y)   # (NaN stays NaN)
    kf = f.round(f.mul(y, 1.0 / LN2))
    r = f.sub(f.sub(y, f.mul(kf, LN2_HI[T.f32])), f.mul(kf, LN2_LO[T.f32]))
    em1_r = f.add(r, f.mul(f.mul(r, r), f.poly(TANH_EXPM1_Q, r)))
    two_k = f.pow2(f.to_int(kf))
    t = f.add(f.mul(em1_r, two_k), f.sub(two_k, 1.0))
    th = f.div(t, f.add(t, 2.0))
    return f.where(f.lt(a, TINY[T.f32]), x, f.where(f.lt(x, 0.0), f.neg(th), th))   # x: tiny, -0.0


def tanh(e, x):
    """f64: a + a^3 P(a^2) up to log(3)/2 (a = |x|); above, 1 - 2 / (expm1(2a) + 2) (2a exact), and 1 beyond 20,
    where tanh rounds to 1. f32: _tanh_f32, a quarter of the statements (35, from 143: both sides of a select cost
    on lavapipe, and the issue's elementwise tanh must run within 1.10x the driver's)."""
    f = Arith(e, x)
    if not f.f64:
        return _tanh_f32(f, x)
    a = f.abs(x)
    cap = 20.0
    upper = f.gt(a, 0.5493061443340548)
    ac = f.where(upper, f.where(f.lt(a, cap), a, cap), 1.0)   # (NaN -> cap, selected away)
    t = expm1(e, f.add(ac, ac))
    r = f.where(upper, f.sub(1.0, f.div(2.0, f.add(t, 2.0))), _odd_poly(f, f.where(upper, 0.5, a), TANH_P))
    r = f.where(f.gt(a, cap), 1.0, r)
    r = f.where(f.sign_bit(x), f.neg(r), r)
    return f.where(f.either(f.lt(a, TINY[f.dt]), f.is_nan(x)), x, r)


EXPANSIONS = {Op.SINH: sinh, Op.COSH: cosh, Op.TANH: tanh}

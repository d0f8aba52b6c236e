"""exp, exp2, expm1, log, log2, log10 and log1p as IR expansions, one algorithm per function for f32 and f64 (the
constants per dtype): fdlibm's designs (Sun's, as musl keeps them), written for plain IEEE arithmetic without
FMA. exp: x = k ln2 + r (Cody-Waite, k ln2_hi exact), exp(r) from a rational form of a minimax polynomial in r^2,
2^k as exact powers of two (subnormal results rounded once). log: x = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1,
log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f / (2 + f), subnormal x scaled up first.
"""
import math

from ... import types as T
from ..ops import Op
from .arith import Arith

LN2 = math.log(2.0)
# per dtype: ln2 = LN2_HI + LN2_LO with k LN2_HI exact for every k of a finite result
LN2_HI = {T.f64: 6.93147180369123816490e-01, T.f32: 6.9314575195e-01}
LN2_LO = {T.f64: 1.90821492927058770002e-10, T.f32: 1.4286067653e-06}
# exp(r) = 1 + r + r c / (2 - c), c = r - r^2 P(r^2) on |r| <= ln2 / 2
EXP_P = {T.f64: (4.13813679705723846039e-08, -1.65339022054652515390e-06, 6.61375632143793436117e-05,
                 -2.77777777770155933842e-03, 1.66666666666666019037e-01),
         T.f32: (-2.7667332906e-3, 1.6666625440e-1)}
# log(1 + f) = f - hfsq + s (hfsq + R), R = z LG_ODD(w) + w LG_EVEN(w), z = s^2, w = z^2
LG_ODD = {T.f64: (1.479819860511658591e-01, 1.818357216161805012e-01, 2.857142874366239149e-01,
                  6.666666666666735130e-01),
          T.f32: (0.28498786688, 0.66666662693)}
LG_EVEN = {T.f64: (1.531383769920937332e-01, 2.222219843214978396e-01, 3.999999999940941908e-01),
           T.f32: (0.24279078841, 0.40000972152)}
# expm1(r) correction: r1 = 1 + hxs Q(hxs), hxs = r^2 / 2
EXPM1_Q = {T.f64: (-2.01099218183624371326e-07, 4.00821782732936239552e-06, -7.93650757867487942473e-05,
                   1.58730158725481460165e-03, -3.33333333333331316428e-02, 1.0),
           T.f32: (1.5807170421e-3, -3.3333212137e-2, 1.0)}
LN2_HI_M1 = {T.f64: 6.93147180369123816490e-01, T.f32: 6.9313812256e-01}   # expm1's and log's split
LN2_LO_M1 = {T.f64: 1.90821492927058770002e-10, T.f32: 9.0580006145e-06}
TINY = {T.f64: 2.0 ** -54, T.f32: 2.0 ** -25}   # |x| below: expm1(x) and log1p(x) round to x
# the largest x with a finite exp(x), the x below which exp(x) rounds to 0
EXP_MAX = {T.f64: 709.782712893383973096, T.f32: 88.72283935546875}
EXP_MIN = {T.f64: -745.13321910194110842, T.f32: -103.972084045410}
# ln2's high part (9 bits for f32, 21 for f64: r_hi ln2_hi is exact) and what the f64 ln2 misses of ln 2 (exp2)
LN2_SPLIT = {T.f64: float.fromhex("0x1.62e43p-1"), T.f32: float.fromhex("0x1.63p-1")}
LN2_TAIL = 2.319046813846299558e-17
# m in [sqrt(2)/2, sqrt(2)): the exponent field offset that sends m >= sqrt(2) to the next binade (log's reduction)
SQRT_HALF_BITS = {T.f64: 0x3fe6a09e, T.f32: 0x3f3504f3}


def exp_core(f, hi, lo):
    """exp(hi - lo) for |hi - lo| <= ln2 / 2, lo the rounding error of the argument (fdlibm)."""
    r = f.sub(hi, lo)
    t = f.mul(r, r)
    c = f.sub(r, f.mul(t, f.poly(EXP_P[f.dt], t)))
    return f.sub(1.0, f.sub(f.sub(lo, f.div(f.mul(r, c), f.sub(2.0, c))), hi))


def exp_parts(f, x):
    """(y, k) with exp(x) = y 2^k (k an i32 statement) for x inside the range of results; x beyond it (NaN too)
    is clamped, and the caller selects inf, 0 or NaN there (_exp_result)."""
    lo_end, hi_end = EXP_MIN[f.dt] - 1.0, EXP_MAX[f.dt] + 1.0
    xs = f.where(f.lt(x, hi_end), f.where(f.gt(x, lo_end), x, lo_end), hi_end)   # NaN -> hi_end
    kf = f.round(f.mul(xs, 1.0 / LN2))
    hi = f.sub(xs, f.mul(kf, LN2_HI[f.dt]))
    lo = f.mul(kf, LN2_LO[f.dt])
    return exp_core(f, hi, lo), f.to_int(kf)


def _exp_result(f, x, value):
    """`value`, or inf beyond the largest finite result, 0 below the smallest, NaN for NaN."""
    value = f.where(f.gt(x, EXP_MAX[f.dt]), math.inf, f.where(f.lt(x, EXP_MIN[f.dt]), 0.0, value))
    return f.where(f.is_nan(x), x, value)


def exp(e, x):
    f = Arith(e, x)
    y, k = exp_parts(f, x)
    return _exp_result(f, x, f.scale(y, k))


def exp2(e, x):
    """2^x = 2^k 2^r, k = round(x), r = x - k exact; 2^r = exp(r ln2), r ln2 = hi - lo to twice the precision
    (Dekker: r_hi ln2_hi exact)."""
    f = Arith(e, x)
    big = 1100.0 if f.f64 else 160.0
    xs = f.where(f.lt(x, big), f.where(f.gt(x, -big), x, -big), big)   # NaN -> big, selected away
    kf = f.round(xs)
    r = f.sub(xs, kf)
    rh, rl = f.split(r)
    l_hi = LN2_SPLIT[f.dt]
    l_lo = LN2 - l_hi
    hi = f.mul(rh, l_hi)
    lo = f.add(f.add(f.mul(rh, l_lo), f.mul(rl, l_hi)), f.add(f.mul(rl, l_lo), f.mul(r, LN2_TAIL)))
    y = exp_core(f, hi, f.neg(lo))
    return f.where(f.is_nan(x), x, f.scale(y, f.to_int(kf)))


def expm1(e, x):
    """fdlibm's expm1: x = k ln2 + r (hi - lo, c the error of rounding r), expm1(r) from a rational form,
    then exp(x) - 1 = 2^k (expm1(r) + 1 - 2^-k) arranged per k so that nothing cancels."""
    f = Arith(e, x)
    dt = f.dt
    xs = f.where(f.lt(x, EXP_MAX[dt] + 1.0), f.where(f.gt(x, -45.0), x, -45.0), EXP_MAX[dt] + 1.0)   # NaN -> big
    kf = f.round(f.mul(xs, 1.0 / LN2))
    hi = f.sub(xs, f.mul(kf, LN2_HI_M1[dt]))
    lo = f.mul(kf, LN2_LO_M1[dt])
    r = f.sub(hi, lo)
    c = f.sub(f.sub(hi, r), lo)
    hfx = f.mul(0.5, r)
    hxs = f.mul(r, hfx)
    r1 = f.poly(EXPM1_Q[dt], hxs)
    t = f.sub(3.0, f.mul(r1, hfx))
    ee = f.mul(hxs, f.div(f.sub(r1, t), f.sub(6.0, f.mul(r, t))))
    k0 = f.sub(r, f.sub(f.mul(r, ee), hxs))   # k = 0: c = 0
    ee = f.sub(f.sub(f.mul(r, f.sub(ee, c)), c), hxs)
    k_minus1 = f.sub(f.mul(0.5, f.sub(r, ee)), 0.5)
    k_plus1 = f.where(f.lt(r, -0.25), f.mul(-2.0, f.sub(ee, f.add(r, 0.5))), f.add(1.0, f.mul(2.0, f.sub(r, ee))))
    k = f.to_int(kf)
    far = f.sub(f.scale(f.sub(1.0, f.sub(ee, r)), k), 1.0)   # k <= -2 or k > 56: the - 1 rounds once, late
    kc = f.iop("min", f.iop("max", k, 0), 60)   # (a harmless power for the lanes the near forms do not take)
    two_minus_k = f.pow2(f.iop("neg", kc))
    near = f.scale(f.sub(f.sub(1.0, two_minus_k), f.sub(ee, r)), k)   # 2 <= k < fraction bits: 1 - 2^-k exact
    mid = f.scale(f.add(f.sub(r, f.add(ee, two_minus_k)), 1.0), k)
    wide = 20.0 if f.f64 else 23.0   # fdlibm's bound of the `near` form
    res = f.where(f.le(kf, -2.0), far, f.where(f.gt(kf, 56.0), far, f.where(f.lt(kf, wide), near, mid)))
    res = f.where(f.eq(kf, 1.0), k_plus1, res)
    res = f.where(f.eq(kf, -1.0), k_minus1, res)
    res = f.where(f.eq(kf, 0.0), k0, res)
    res = f.where(f.lt(f.abs(x), TINY[dt]), x, res)   # x itself below half an ulp of 1 (-0.0 too)
    res = f.where(f.gt(x, EXP_MAX[dt]), math.inf, res)
    return f.where(f.is_nan(x), x, res)


# log2(x) = k + (hi + lo) / ln2 and log10(x) = k log10(2) + (hi + lo) / ln10, each constant split so that the
# chopped hi times its high part is exact
IVLN2 = {T.f64: (1.44269504072144627571e+00, 1.67517131648865118353e-10),
         T.f32: (1.4428710938e+00, -1.7605285393e-04)}
IVLN10 = {T.f64: (4.34294481878168880939e-01, 2.50829467116452752298e-11),
          T.f32: (4.3432617188e-01, -3.1689971365e-05)}
LOG10_2 = {T.f64: (3.01029995663611771306e-01, 3.69423907715893078616e-13),
           T.f32: (3.0102920532e-01, 7.9034151668e-07)}
SUBNORMAL_SCALE = {T.f64: 54, T.f32: 25}   # log's scaling of a subnormal x into the normal range


def _reduce(f, u, k_extra=None):
    """(m - 1, k) with u = 2^k m, m in [sqrt(2)/2, sqrt(2)), for a normal positive finite u (musl's form:
    the exponent field moved so that m >= sqrt(2) lands in the next binade)."""
    sh = f.high_shift
    base = SQRT_HALF_BITS[f.dt]
    hu = f.iop("add", f.high_word(u), (f.bias << sh) - base)
    k = f.iop("sub", f.iop("shr", hu, sh), f.bias)
    if k_extra is not None:
        k = f.iop("add", k, k_extra)
    hm = f.iop("add", f.iop("bit_and", hu, (1 << sh) - 1), base)
    m = f.from_high_word(hm, f.low_word(u)) if f.f64 else f.from_high_word(hm)
    return f.sub(m, 1.0), k


def _log_terms(f, fm):
    """(hfsq, s, R) of log(1 + fm) = fm - hfsq + s (hfsq + R) for fm in [sqrt(2)/2 - 1, sqrt(2) - 1)."""
    hfsq = f.mul(f.mul(0.5, fm), fm)
    s = f.div(fm, f.add(2.0, fm))
    z = f.mul(s, s)
    w = f.mul(z, z)
    r = f.add(f.mul(z, f.poly(LG_ODD[f.dt], w)), f.mul(w, f.poly(LG_EVEN[f.dt], w)))
    return hfsq, s, r


def _log_parts(f, x):
    """(fm, k, hfsq, s, R) for x sanitized to a positive finite value (subnormals scaled up exactly)."""
    ok = f.both(f.gt(x, 0.0), f.lt(x, math.inf))
    xs = f.where(ok, x, 1.0)
    sub = f.lt(xs, 2.0 ** f.min_exp)
    n = SUBNORMAL_SCALE[f.dt]
    xs = f.where(sub, f.mul(xs, 2.0 ** n), xs)
    fm, k = _reduce(f, xs, f.iwhere(sub, -n, 0))
    return (fm, f.to_float(k)) + _log_terms(f, fm)


def _log_specials(f, x, value):
    """`value` for positive finite x; log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays."""
    value = f.where(f.gt(x, 0.0), f.where(f.eq(x, math.inf), math.inf, value),
                    f.where(f.eq(x, 0.0), -math.inf, math.nan))
    return f.where(f.is_nan(x), x, value)


def log(e, x):
    f = Arith(e, x)
    fm, dk, hfsq, s, r = _log_parts(f, x)
    v = f.add(f.add(f.sub(f.add(f.mul(s, f.add(hfsq, r)), f.mul(dk, LN2_LO_M1[f.dt])), hfsq), fm),
              f.mul(dk, LN2_HI_M1[f.dt]))
    return _log_specials(f, x, v)


def _hi_lo(f, fm, hfsq, s, r):
    """log(1 + fm) = hi + lo with hi chopped (products by the high halves of constants exact)."""
    hi = f.chop(f.sub(fm, hfsq))
    lo = f.add(f.sub(f.sub(fm, hi), hfsq), f.mul(s, f.add(hfsq, r)))
    return hi, lo


def _two_sum_tail(f, y, val_hi, val_lo):
    """y + val_hi + val_lo with the rounding error of y + val_hi kept (|y| >= |val_hi| or y = 0)."""
    w = f.add(y, val_hi)
    return f.add(f.add(val_lo, f.add(f.sub(y, w), val_hi)), w)


def log2(e, x):
    f = Arith(e, x)
    fm, dk, hfsq, s, r = _log_parts(f, x)
    hi, lo = _hi_lo(f, fm, hfsq, s, r)
    c_hi, c_lo = IVLN2[f.dt]
    val_hi = f.mul(hi, c_hi)
    val_lo = f.add(f.mul(f.add(lo, hi), c_lo), f.mul(lo, c_hi))
    return _log_specials(f, x, _two_sum_tail(f, dk, val_hi, val_lo))


def log10(e, x):
    f = Arith(e, x)
    fm, dk, hfsq, s, r = _log_parts(f, x)
    hi, lo = _hi_lo(f, fm, hfsq, s, r)
    c_hi, c_lo = IVLN10[f.dt]
    l_hi, l_lo = LOG10_2[f.dt]
    val_hi = f.mul(hi, c_hi)
    val_lo = f.add(f.add(f.mul(dk, l_lo), f.mul(f.add(lo, hi), c_lo)), f.mul(lo, c_hi))
    return _log_specials(f, x, _two_sum_tail(f, f.mul(dk, l_hi), val_hi, val_lo))


def log1p(e, x):
    """fdlibm's log1p: fm = x itself near 0 (k = 0); else u = 1 + x reduced as log's, with c = the rounding
    error of 1 + x over u as the correction."""
    f = Arith(e, x)
    dt = f.dt
    ok = f.both(f.gt(x, -1.0), f.lt(x, math.inf))
    xs = f.where(ok, x, 0.0)
    small = f.both(f.gt(xs, -0.2928932188134524), f.lt(xs, 0.41421356237309503))
    u = f.add(1.0, xs)
    fm_u, k = _reduce(f, u)
    dk_u = f.to_float(k)
    c = f.div(f.where(f.ge(dk_u, 2.0), f.sub(1.0, f.sub(u, xs)), f.sub(xs, f.sub(u, 1.0))), u)
    c = f.where(f.lt(dk_u, float(f.frac_bits + 2)), c, 0.0)
    fm = f.where(small, xs, fm_u)
    dk = f.where(small, 0.0, dk_u)
    c = f.where(small, 0.0, c)
    hfsq, s, r = _log_terms(f, fm)
    v = f.add(f.add(f.sub(f.add(f.mul(s, f.add(hfsq, r)), f.add(f.mul(dk, LN2_LO_M1[dt]), c)), hfsq), fm),
              f.mul(dk, LN2_HI_M1[dt]))
    v = f.where(f.lt(f.abs(xs), TINY[dt]), xs, v)   # x itself (-0.0 too)
    v = f.where(ok, v, f.where(f.eq(x, -1.0), -math.inf, f.where(f.eq(x, math.inf), math.inf, math.nan)))
    return f.where(f.is_nan(x), x, v)


EXPANSIONS = {Op.EXP: exp, Op.EXP2: exp2, Op.EXPM1: expm1, Op.LOG: log, Op.LOG2: log2, Op.LOG10: log10,
              Op.LOG1P: log1p}

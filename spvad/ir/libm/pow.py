"""pow(x, y) as an IR expansion: fdlibm's design (log2|x| as t1 + t2 to about twice the precision, y split so that
y1 t1 is exact, then 2^(y log2|x|) with the product's tail carried into exp's argument), written for plain IEEE
arithmetic, one algorithm for f32 and f64. C99's special values around it, as ir/scalar_ops._pow (numpy's).
"""
import math

from ... import types as T
from ..ops import Op
from .arith import Arith
from .exp_log import EXP_P

# log2(ax) = n + dp_h[k] + z_h + z_l, ax = 2^n (bp[k] + ...), bp = (1, 1.5)
DP_H = {T.f64: (0.0, 5.84962487220764160156e-01), T.f32: (0.0, 5.84960938e-01)}
DP_L = {T.f64: (0.0, 1.35003920212974897128e-08), T.f32: (0.0, 1.56322085e-06)}
L_POLY = {T.f64: (2.06975017800338417784e-01, 2.30660745775561754067e-01, 2.72728123808534006489e-01,
                  3.33333329818377432918e-01, 4.28571428578550184252e-01, 5.99999999999994648725e-01),
          T.f32: (2.0697501302e-01, 2.3066075146e-01, 2.7272811532e-01, 3.3333334327e-01, 4.2857143283e-01,
                  6.0000002384e-01)}
CP = {T.f64: (9.61796693925975554329e-01, 9.61796700954437255859e-01, -7.02846165095275826516e-09),
      T.f32: (9.6179670095e-01, 9.6191406250e-01, -1.1736857402e-04)}   # 2 / (3 ln2): value, high, low
LG2 = {T.f64: (6.93147180559945286227e-01, 6.93147182464599609375e-01, -1.90465429995776804525e-09),
       T.f32: (6.9314718246e-01, 6.93145752e-01, 1.42860654e-06)}   # ln2: value, high, low
# where the mantissa's interval changes: |m| < sqrt(3/2) -> bp 1, < sqrt(3) -> bp 1.5, else the next binade
SQRT_3_2 = {T.f64: 0x3988E, T.f32: 0x1cc471}
SQRT_3 = {T.f64: 0xBB67A, T.f32: 0x5db3d7}
FAR = {T.f64: 1100.0, T.f32: 160.0}   # |y log2|x|| beyond: the result overflows or underflows whatever the tail


def _log2_parts(f, ax):
    """log2(ax) = t1 + t2, t1 chopped, for finite ax > 0 (fdlibm's e_pow.c)."""
    dt, sh = f.dt, f.high_shift
    mask = (1 << sh) - 1
    sub = f.lt(ax, 2.0 ** f.min_exp)
    scale_bits = 53 if f.f64 else 24
    ax = f.where(sub, f.mul(ax, 2.0 ** scale_bits), ax)
    ix = f.high_word(ax)
    n = f.iop("add", f.iop("sub", f.iop("shr", ix, sh), f.bias), f.iwhere(sub, -scale_bits, 0))
    j = f.iop("bit_and", ix, mask)
    one_bits = f.bias << sh
    mid = f.iop("lt", j, SQRT_3[dt])
    low = f.iop("le", j, SQRT_3_2[dt])
    k1 = f.both(mid, f.e.compute(Op.NOT, low))   # bp = 1.5
    n = f.iop("add", n, f.iwhere(f.either(low, mid), 0, 1))
    ix = f.iop("bit_or", j, one_bits)
    ix = f.iwhere(f.either(low, mid), ix, f.iop("sub", ix, 1 << sh))
    ax = f.from_high_word(ix, f.low_word(ax)) if f.f64 else f.from_high_word(ix)
    bp = f.where(k1, 1.5, 1.0)
    dp_h = f.where(k1, DP_H[dt][1], 0.0)
    dp_l = f.where(k1, DP_L[dt][1], 0.0)
    # ss = s_h + s_l = (ax - bp) / (ax + bp)
    u = f.sub(ax, bp)
    v = f.div(1.0, f.add(ax, bp))
    ss = f.mul(u, v)
    s_h = f.chop(ss)
    # t_h = ax + bp, chopped, built from the bits
    kbit = f.iwhere(k1, 1 << (sh - 2), 0)
    if f.f64:
        th_bits = f.iop("add", f.iop("add", f.iop("bit_or", f.iop("shr", ix, 1), 0x20000000), 0x00080000), kbit)
    else:
        th_bits = f.iop("add", f.iop("add", f.iop("bit_or", f.iop("bit_and", f.iop("shr", ix, 1), -4096), 0x20000000),
                                     0x00400000), kbit)
    t_h = f.from_high_word(th_bits, 0) if f.f64 else f.from_high_word(th_bits)
    t_l = f.sub(ax, f.sub(t_h, bp))
    s_l = f.mul(v, f.sub(f.sub(u, f.mul(s_h, t_h)), f.mul(s_h, t_l)))
    # log(ax) = 2 (ss + ss^3 / 3 + ...): r the tail of the series
    s2 = f.mul(ss, ss)
    r = f.mul(f.mul(s2, s2), f.poly(L_POLY[dt], s2))
    r = f.add(r, f.mul(s_l, f.add(s_h, ss)))
    s2 = f.mul(s_h, s_h)
    t_h = f.chop(f.add(f.add(3.0, s2), r))
    t_l = f.sub(r, f.sub(f.sub(t_h, 3.0), s2))
    u = f.mul(s_h, t_h)
    v = f.add(f.mul(s_l, t_h), f.mul(t_l, ss))
    p_h = f.chop(f.add(u, v))
    p_l = f.sub(v, f.sub(p_h, u))
    cp, cp_h, cp_l = CP[dt]
    z_h = f.mul(cp_h, p_h)
    z_l = f.add(f.add(f.mul(cp_l, p_h), f.mul(p_l, cp)), dp_l)
    t = f.to_float(n)
    t1 = f.chop(f.add(f.add(f.add(z_h, z_l), dp_h), t))
    t2 = f.sub(z_l, f.sub(f.sub(f.sub(t1, t), dp_h), z_h))
    return t1, t2



def _pow_positive(f, ax, y):
    """ax^y for finite ax > 0, ax != 1, and finite y: 2^(p_h + p_l), p_h + p_l = y log2(ax)."""
    dt = f.dt
    t1, t2 = _log2_parts(f, ax)
    y1 = f.chop(y)
    p_l = f.add(f.mul(f.sub(y, y1), t1), f.mul(y, t2))
    p_h = f.mul(y1, t1)
    z = f.add(p_l, p_h)
    over, under = f.gt(z, FAR[dt]), f.lt(z, -FAR[dt])
    inside = f.both(f.le(z, FAR[dt]), f.ge(z, -FAR[dt]))   # (also false for NaN: inf - inf)
    p_h = f.where(inside, p_h, 0.0)
    p_l = f.where(inside, p_l, 0.0)
    nf = f.round(p_h)
    p_h = f.sub(p_h, nf)   # exact
    t = f.chop(f.add(p_l, p_h), -32768)   # f32: 0xffff8000
    lg2, lg2_h, lg2_l = LG2[dt]
    u = f.mul(t, lg2_h)
    v = f.add(f.mul(f.sub(p_l, f.sub(t, p_h)), lg2), f.mul(t, lg2_l))
    z = f.add(u, v)
    w = f.sub(v, f.sub(z, u))
    tt = f.mul(z, z)
    t1 = f.sub(z, f.mul(tt, f.poly(EXP_P[T.f64] if f.f64 else _EXP_P32, tt)))
    r = f.sub(f.div(f.mul(z, t1), f.sub(t1, 2.0)), f.add(w, f.mul(z, w)))
    z = f.sub(1.0, f.sub(r, z))
    res = f.scale(z, f.to_int(nf))
    return f.where(over, math.inf, f.where(under, 0.0, res))


# fdlibm's powf keeps the five-term exp polynomial (expf's two terms would cost accuracy here)
_EXP_P32 = (4.1381369442e-08, -1.6533901999e-06, 6.6137559770e-05, -2.7777778450e-03, 1.6666667163e-01)


def pow(e, x, y):
    """C99 pow, as ir/scalar_ops._pow: y = 0 or x = 1: 1; NaN: x + y; finite x < 0 with y not an integer: NaN;
    |x| = 1: 1; |x| = 0 or inf or |y| = inf: inf where (|x| > 1) == (y > 0), else 0; negated where y is an
    odd integer and x's sign bit is set."""
    f = Arith(e, x)
    ax = f.abs(x)
    plain = f.both(f.both(f.gt(ax, 0.0), f.lt(ax, math.inf)), f.both(f.ne(ax, 1.0), f.lt(f.abs(y), math.inf)))
    power = _pow_positive(f, f.where(plain, ax, 2.0), f.where(plain, y, 1.0))
    big = f.e.compute(Op.EQ, f.gt(ax, 1.0), f.gt(y, 0.0))
    edge = f.where(f.eq(ax, 1.0), 1.0, f.where(big, math.inf, 0.0))
    mag = f.where(plain, power, edge)
    integer = f.eq(f.floor(y), y)
    half = f.mul(y, 0.5)
    odd = f.both(integer, f.ne(f.floor(half), half))
    sign_bit = f.sign_bit(x)
    r = f.where(f.both(odd, sign_bit), f.neg(mag), mag)
    negative = f.both(f.both(f.lt(x, 0.0), f.gt(x, -math.inf)), f.e.compute(Op.NOT, integer))
    r = f.where(negative, math.nan, r)
    r = f.where(f.either(f.is_nan(x), f.is_nan(y)), f.add(x, y), r)
    return f.where(f.either(f.eq(y, 0.0), f.eq(x, 1.0)), 1.0, r)



EXPANSIONS = {Op.POW: pow}

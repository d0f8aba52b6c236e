"""asin, acos, atan and atan2 as IR expansions (gathered by trig.py), fdlibm's reductions made branchless.

atan: |q| split at 7/16, 11/16, 19/16, 39/16 into atan(c) + atan(t), |t| <= 7/16, t = (q - c) / (1 + c q) taken
from the two operands of atan2 directly (no rounded quotient). asin/acos: |x| < 1/2 by the odd polynomial,
above through asin(|x|) = pi/2 - 2 asin(s), s = sqrt((1 - |x|) / 2) with sqrt's rounding error carried.
Polynomials fitted against mpmath (near minimax); atan2 follows numpy's np.arctan2 at zeros, infinities, NaN.
"""
import math

from ..ops import Op
from .arith import Arith
from .trig_reduce import PIO2_HI, PIO2_HI_F32, PIO2_LO, PIO2_LO_F32, fast_two_sum, two_prod, two_sum

# atan(t) = t + t z P(z), z = t^2 <= (7/16)^2: P's coefficients, highest power first (P(0) ~ -1/3)
ATAN_F32 = (-0.05811607092618942, 0.10487135499715805, -0.14228950440883636, 0.19997693598270416,
            -0.33333301544189453)
ATAN_F64 = (-0.016247547050530983, 0.03649101102386897, -0.04975019868900518, 0.058330885326161354,
            -0.06660995515875301, 0.07691868154218263, -0.09090886596063934, 0.11111110383054132,
            -0.1428571427195793, 0.19999999999869722, -0.333333333333329)
# asin(y) = y + y z P(z), z = y^2 <= 1/4 (P(0) ~ 1/6)
ASIN_F32 = (0.04214736446738243, 0.024188648909330368, 0.04546918720006943, 0.07495298236608505,
            0.16666753590106964)
ASIN_F64 = (0.03256950285085093, -0.020904939185592837, 0.021641408484405354, 0.0037332587328423017,
            0.010773256451690326, 0.011400132004304689, 0.013980676388246932, 0.017351623457583357,
            0.02237221439686639, 0.030381942726351436, 0.04464285717430074, 0.07499999999970997,
            0.1666666666666676)
# atan(0.5), atan(1) = pi/4, atan(1.5), pi/2 and pi as (hi, lo): f64 words, f32 words
ATAN_BASE_F64 = ((0.4636476090008061, 2.2698777452961687e-17), (0.7853981633974483, 3.061616997868383e-17),
                 (0.982793723247329, 1.3903311031230998e-17), (PIO2_HI, PIO2_LO))
ATAN_BASE_F32 = ((0.46364760398864746, 5.01215868808913e-09), (0.7853981852531433, -2.1855694143368964e-08),
                 (0.9827937483787537, -2.5131424052915463e-08), (PIO2_HI_F32, PIO2_LO_F32))
PI_F64 = (3.141592653589793, 1.2246467991473532e-16)
PI_F32 = (3.1415927410125732, -8.742277657347586e-08)


def _flip(f, cond, v):
    return f.where(cond, f.neg(v), v)


def atan_ratio(f, ay, ax):
    """atan(ay / ax) as a double-word, for finite ay, ax >= 0, not both 0: the bucket's t = num / den, num and den
    from ay and ax (the differences exact, Sterbenz). A bucket's 3 ay or 3 ax may overflow only where another
    bucket is taken (atan: ax = 1; atan2 scales both first)."""
    base = ATAN_BASE_F64 if f.f64 else ATAN_BASE_F32
    two_ay, two_ax = f.add(ay, ay), f.add(ax, ax)
    buckets = [   # (below this ratio, numerator, denominator, base), last to first
        (None, f.neg(ax), ay, base[3]),
        (2.4375, f.sub(two_ay, f.mul(3.0, ax)), f.add(two_ax, f.mul(3.0, ay)), base[2]),
        (1.1875, f.sub(ay, ax), f.add(ax, ay), base[1]),
        (0.6875, f.sub(two_ay, ax), f.add(two_ax, ay), base[0]),
        (0.4375, ay, ax, (0.0, 0.0)),
    ]
    _, num, den, (b_hi, b_lo) = buckets[0]
    b_hi, b_lo = f.c(b_hi), f.c(b_lo)
    for limit, n, d, (h, lo) in buckets[1:]:
        below = f.lt(ay, f.mul(ax, limit))
        num, den = f.where(below, n, num), f.where(below, d, den)
        b_hi, b_lo = f.where(below, h, b_hi), f.where(below, lo, b_lo)
    t = f.div(num, den)
    z = f.mul(t, t)
    v = f.add(t, f.add(f.mul(f.mul(t, z), f.poly(ATAN_F64 if f.f64 else ATAN_F32, z)), b_lo))
    return fast_two_sum(f, b_hi, v)


def atan(e, x):
    """sign(x) atan(|x| / 1): odd, -0.0 kept, +-pi/2 at +-inf."""
    f = Arith(e, x)
    hi, lo = atan_ratio(f, f.abs(x), f.c(1.0))
    return _flip(f, f.sign_bit(x), f.add(hi, lo))


def atan2(e, y, x):
    """numpy's arctan2: atan(|y| / |x|) of both scaled by one power of two (max in [1, 2)), pi - it where x's
    sign bit is set, y's sign; infinities as (1, 0), (0, 1) or (1, 1), (0, 0) as (0, 1), NaN as x + y."""
    f = Arith(e, x)
    ax, ay = f.abs(x), f.abs(y)
    x_inf, y_inf = f.eq(ax, math.inf), f.eq(ay, math.inf)
    ax1 = f.where(y_inf, f.where(x_inf, 1.0, 0.0), f.where(x_inf, 1.0, ax))
    ay1 = f.where(y_inf, 1.0, f.where(x_inf, 0.0, ay))
    ax1 = f.where(f.eq(ay1, 0.0), 1.0, ax1)
    m = f.max(ax1, ay1)   # finite and > 0 (NaN: replaced at the end)
    k = f.iop("sub", f.bias, f.iop("shr", f.high_word(f.where(f.lt(m, math.inf), m, 1.0)), f.high_shift))
    hi, lo = atan_ratio(f, f.scale(ay1, k), f.scale(ax1, k))
    pi_hi, pi_lo = PI_F64 if f.f64 else PI_F32
    d, err = two_sum(f, f.c(pi_hi), f.neg(hi))
    mirrored = f.add(d, f.add(err, f.sub(pi_lo, lo)))
    r = f.where(f.sign_bit(x), mirrored, f.add(hi, lo))
    r = _flip(f, f.sign_bit(y), r)
    return f.where(e.compute(Op.OR, f.ne(x, x), f.ne(y, y)),
                   f.add(x, y), r)


def _asin_parts(f, a):
    """For a = |x|: (z, P(z), s, c) with z = a^2 below 1/2, else z = (1 - a) / 2 (exact) and s + c = sqrt(z)
    to twice the precision (c = (z - s^2) / 2s, s^2 exact)."""
    small = f.lt(a, 0.5)
    z = f.where(small, f.mul(a, a), f.mul(f.sub(1.0, a), 0.5))
    p = f.poly(ASIN_F64 if f.f64 else ASIN_F32, z)
    zb = f.where(small, 0.25, z)
    s = f.sqrt(zb)
    sq, sq_err = two_prod(f, s, s)
    c = f.div(f.sub(f.sub(zb, sq), sq_err), f.where(f.eq(s, 0.0), 1.0, f.add(s, s)))
    return small, z, p, s, c


def asin(e, x):
    """x + x z P below 1/2; pi/2 - 2 (s + c + s z P) above: pi/2_hi - 2s by a two-sum, then the small terms."""
    f = Arith(e, x)
    a = f.abs(x)
    small, z, p, s, c = _asin_parts(f, a)
    r_small = f.add(a, f.mul(a, f.mul(z, p)))
    v = f.add(c, f.mul(s, f.mul(z, p)))
    ph, pl = (PIO2_HI, PIO2_LO) if f.f64 else (PIO2_HI_F32, PIO2_LO_F32)
    d, err = two_sum(f, f.c(ph), f.neg(f.add(s, s)))
    r_big = f.add(d, f.add(err, f.sub(pl, f.add(v, v))))
    return _flip(f, f.sign_bit(x), f.where(small, r_small, r_big))


def acos(e, x):
    """pi/2 - asin(x) below 1/2; 2 (s + c + s z P) for x >= 1/2; pi - that for x <= -1/2."""
    f = Arith(e, x)
    small, z, p, s, c = _asin_parts(f, f.abs(x))
    ph, pl = (PIO2_HI, PIO2_LO) if f.f64 else (PIO2_HI_F32, PIO2_LO_F32)
    r_small = f.sub(ph, f.sub(x, f.sub(pl, f.mul(x, f.mul(z, p)))))
    v = f.add(c, f.mul(s, f.mul(z, p)))
    two_s, two_v = f.add(s, s), f.add(v, v)
    pi_hi, pi_lo = PI_F64 if f.f64 else PI_F32
    r_pos = f.add(two_s, two_v)
    r_neg = f.sub(pi_hi, f.add(two_s, f.sub(two_v, pi_lo)))
    return f.where(small, r_small, f.where(f.sign_bit(x), r_neg, r_pos))

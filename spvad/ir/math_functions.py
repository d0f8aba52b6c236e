"""Math library functions as IR expansions into the Op table's ops (sp.erf, sp.cbrt, sp.sigmoid, ...): each
`fn(e, *args)` places its statements with the Emitter `e` (emit.py) on scalar float statements of one dtype
and returns the result. Derivatives are those of the expansion (both modes differentiate the ops it emits), so
each is written to have JAX's derivative at kinks and no NaN from an untaken branch: both sides of a SELECT see
safe operands, and a sign is a product, not a SELECT, where the derivative can be infinite (the derivative
passes treat a SELECT as the products c a + (1 - c) b, and 0 inf is NaN). The f32 and f64 error of each, measured in
ulps against mpmath, is in docs/language.md. The error-free steps (Dekker splits, Cody-Waite reduction,
Fast2Sum) need the arithmetic computed as written, which fast_math=True does not promise: lavapipe keeps them
(the same ulps in both modes), another driver might not.
"""
import math
from fractions import Fraction

from .. import types as T
from .ops import Op

# erf and erfc: fdlibm's s_erf.c coefficients (Sun Microsystems, 1993), highest power first
ERX = 8.45062911510467529297e-01   # erf(1) to 24 bits
ERF_PP = (-2.37630166566501626084e-05, -5.77027029648944159157e-03, -2.84817495755985104766e-02,
          -3.25042107247001499370e-01, 1.28379167095512558561e-01)
ERF_QQ = (-3.96022827877536812320e-06, 1.32494738004321644526e-04, 5.08130628187576562776e-03,
          6.50222499887672944485e-02, 3.97917223959155352819e-01, 1.0)
ERF_PA = (-2.16637559486879084300e-03, 3.54783043256182359371e-02, -1.10894694282396677476e-01,
          3.18346619901161753674e-01, -3.72207876035701323847e-01, 4.14856118683748331666e-01,
          -2.36211856075265944077e-03)
ERF_QA = (1.19844998467991074170e-02, 1.36370839120290507362e-02, 1.26171219808761642112e-01,
          7.18286544141962662868e-02, 5.40397917702171048937e-01, 1.06420880400844228286e-01, 1.0)
ERFC_RA = (-9.81432934416914548592e+00, -8.12874355063065934246e+01, -1.84605092906711035994e+02,
           -1.62396669462573470355e+02, -6.23753324503260060396e+01, -1.05586262253232909814e+01,
           -6.93858572707181764372e-01, -9.86494403484714822705e-03)
ERFC_SA = (-6.04244152148580987438e-02, 6.57024977031928170135e+00, 1.08635005541779435134e+02,
           4.29008140027567833386e+02, 6.45387271733267880336e+02, 4.34565877475229228821e+02,
           1.37657754143519042600e+02, 1.96512716674392571292e+01, 1.0)
ERFC_RB = (-4.83519191608651397019e+02, -1.02509513161107724954e+03, -6.37566443368389627722e+02,
           -1.60636384855821916062e+02, -1.77579549177547519889e+01, -7.99283237680523006574e-01,
           -9.86494292470009928597e-03)
ERFC_SB = (-2.24409524465858183362e+01, 4.74528541206955367215e+02, 2.55305040643316442583e+03,
           3.19985821950859553908e+03, 1.53672958608443695994e+03, 3.25792512996573918826e+02,
           3.03380607434824582924e+01, 1.0)

# d/ds (erf(x) / x) sqrt(pi) / 2 at s = x^2, its series to s^5 (terms below 1e-5 at s = 0.72): sum over n >= 1
# of (-s)^(n-1) (-1) / ((n - 1)! (2n + 1))
DERF_SERIES = tuple(float(Fraction((-1) ** n, math.factorial(n - 1) * (2 * n + 1))) for n in range(6, 0, -1))


def _less(c, num, den):
    """Numerator coefficients of R/S - c = (R - c S)/S (exact, then rounded): the tail's R/S is moved by a short
    constant c into exp's exact part, so that the rounding in evaluating it is that of a smaller number."""
    num = (0.0,) * (len(den) - len(num)) + tuple(num)
    return tuple(float(Fraction(r) - Fraction(c) * Fraction(q)) for r, q in zip(num, den))


# erfc's tail: (c, numerator of R/S - c, S) per interval, c near the middle of R/S there (-0.21 to -0.064 on
# [1.25, 1/0.35], -0.064 to -0.0105 above); c and 0.5625 - c have 7 bits, so -z^2 - (0.5625 - c) is exact
ERFC_NEAR = (-0.140625, _less(-0.140625, ERFC_RA, ERFC_SA), ERFC_SA)
ERFC_FAR = (-0.0390625, _less(-0.0390625, ERFC_RB, ERFC_SB), ERFC_SB)
LN2 = math.log(2.0)
LN2_TAIL = 2.319046813846299558e-17   # ln 2 - LN2


class _Ops:
    """Arithmetic on statements of one float dtype, spelled as operators would be."""

    def __init__(self, e, like):
        self.e, self.dt = e, like.dtype

    def c(self, v):
        return self.e.const(v, self.dt) if isinstance(v, (int, float)) else v

    def __getattr__(self, name):   # add, sub, mul, div, exp, log1p, lt, ge, ...: one Compute of that Op
        op = Op[name.upper()]
        return lambda *a: self.e.compute(op, *map(self.c, a))

    def where(self, cond, a, b):
        return self.e.compute(Op.SELECT, cond, self.c(a), self.c(b))

    def poly(self, coeffs, x):
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.add(self.mul(acc, x), k)
        return acc

    def split(self, x, spare=0):
        """Dekker: x = hi + lo with hi of half the significand's bits (less `spare`), so that hi * hi is exact
        (with `spare` bits to spare)."""
        big = self.mul(x, float(2 ** ((12 if self.dt == T.f32 else 27) + spare) + 1))
        hi = self.sub(big, self.sub(big, x))
        return hi, self.sub(x, hi)

    def two_sum(self, a, b):
        """(s, err): s = a + b rounded and its error a + b - s, exactly (Knuth)."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        return s, self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))

    def product_error(self, a, b, p):
        """a b - p for p = a b rounded, exactly (Dekker; a, b far from overflow and underflow)."""
        ah, al = self.split(a)
        bh, bl = self.split(b)
        return self.add(self.add(self.add(self.sub(self.mul(ah, bh), p), self.mul(ah, bl)), self.mul(al, bh)),
                        self.mul(al, bl))

    def stop(self, v):
        """v without a derivative: a rounding correction, whose derivative would be 0 computed from big terms."""
        return self.e.compute(Op.STOP_GRADIENT, v)

    def exp_pair(self, hi, lo):
        """exp(hi + lo), |lo| << |hi|, without the error of rounding hi + lo: 2^n exp(r), n = round(hi / ln 2),
        r = (hi - n ln2_hi) - n ln2_lo + lo (Cody-Waite: n ln2_hi is exact and so is the subtraction), 2^n as
        two exact powers of two (POWI), each in range also where the result is subnormal or near overflow."""
        n = self.round(self.mul(hi, 1.0 / LN2))
        # |n| beyond the range of finite results (and NaN, inf): n = 0, exp(hi) gives inf, 0 or NaN itself
        n = self.where(self.lt(self.abs(n), 1000.0 if self.dt == T.f32 else 2000.0), n, 0.0)
        ln2_hi = math.ldexp(round(math.ldexp(LN2, 16)), -16)   # 16 bits: n ln2_hi exact for every finite result
        # (LN2 - ln2_hi is exact, and what the f64 LN2 misses of ln 2 counts too: n is up to 1075)
        r = self.sub(self.sub(self.sub(hi, self.mul(n, ln2_hi)), self.mul(n, LN2 - ln2_hi)), self.mul(n, LN2_TAIL))
        r = self.add(r, lo)
        k = self.e.compute(Op.CAST, n, dtype=T.i32)
        half = self.e.compute(Op.FLOORDIV, k, self.e.const(2, T.i32))
        two, rest = self.c(2.0), self.e.compute(Op.SUB, k, half)
        return self.mul(self.mul(self.exp(r), self.e.compute(Op.POWI, two, half)), self.e.compute(Op.POWI, two, rest))


def _sign_abs(f, x):
    """(sign, |x|, x's sign bit) with sign = -1 or 1 by the sign bit and |x| = x sign: derivative -1 or 1 also at
    0 (ABS's is 0), and products rather than selects, since an infinite derivative times a select's 0 is NaN."""
    neg = signbit(f.e, x)
    sign = f.where(neg, -1.0, 1.0)
    return sign, f.mul(x, sign), neg


def square(e, x):
    return _Ops(e, x).mul(x, x)


def degrees(e, x):
    return _Ops(e, x).mul(x, 180.0 / math.pi)


def radians(e, x):
    return _Ops(e, x).mul(x, math.pi / 180.0)


def lerp(e, a, b, t):
    """a (1 - t) + b t, as GLSL's mix and Warp's lerp: a at t = 0 and b at t = 1 exactly."""
    f = _Ops(e, a)
    return f.add(f.mul(a, f.sub(1.0, t)), f.mul(b, t))


def smoothstep(e, edge0, edge1, x):
    """GLSL: t = clamp((x - edge0) / (edge1 - edge0), 0, 1); t^2 (3 - 2t)."""
    f = _Ops(e, x)
    t = f.max(f.min(f.div(f.sub(x, edge0), f.sub(edge1, edge0)), 1.0), 0.0)
    return f.mul(f.mul(t, t), f.sub(3.0, f.mul(2.0, t)))


def trunc(e, x):
    """Toward zero (-0.0 stays -0.0, NaN stays NaN); derivative 0 as floor's and ceil's."""
    f = _Ops(e, x)
    return f.where(f.ge(x, 0.0), f.floor(x), f.ceil(x))


def signbit(e, y):
    """y's sign bit, -0.0 included (1 / -0.0 = -inf); a NaN's counts as clear."""
    f = _Ops(e, y)
    return e.compute(Op.OR, f.lt(y, 0.0), e.compute(Op.AND, e.compute(Op.EQ, y, f.c(0.0)), f.lt(f.div(1.0, y), 0.0)))


def copysign(e, x, y):
    """|x| with y's sign, as JAX's where(signbit(y), -|x|, |x|): d/dx = +-sign(x), none for y."""
    f = _Ops(e, x)
    ax = f.abs(x)
    return f.where(signbit(e, y), f.neg(ax), ax)


def exp10(e, x):
    """10^x = exp(x ln10), x ln10 taken as x_hi l_hi (exact: 12 + 12 bits in f32, 26 + 27 in f64) plus the
    small rest (Dekker), so that rounding x ln10 (|x ln10| 2^-24, ~90 ulp at x = 38) costs nothing."""
    f = _Ops(e, x)
    bits = 10 if f.dt == T.f32 else 25
    l_hi = math.ldexp(round(math.ldexp(math.log(10.0), bits)), -bits)
    l_lo = math.log(10.0) - l_hi
    finite = f.lt(f.abs(x), 1e30)
    x_hi, x_lo = f.split(f.where(finite, x, 0.0))
    hi = f.mul(x_hi, l_hi)
    lo = f.add(f.add(f.mul(x_hi, l_lo), f.mul(x_lo, l_hi)), f.mul(x_lo, l_lo))
    lo = f.add(lo, f.mul(x, -2.1707562233822494e-16))   # ln 10 - math.log(10.0): up to 60 ulp at |x| = 300
    return f.where(finite, f.exp_pair(hi, lo), f.exp(f.mul(x, math.log(10.0))))   # beyond: inf, 0 or NaN


def cbrt(e, x):
    """sign(x) y for y = |x|^(1/3) by pow, then one Newton step y - (y - |x| / y^2) / 3: correctly rounded
    almost always, and its derivative is 1 / (3 y^2) whatever pow's error (inf at 0, as JAX)."""
    f = _Ops(e, x)
    sign = f.where(signbit(e, x), -1.0, 1.0)   # cbrt(-0.0) = -0.0
    ax = f.mul(x, sign)   # a product, not a select: an infinite adjoint times a select's 0 would be NaN
    y0 = f.pow(ax, 1.0 / 3.0)
    ok = e.compute(Op.AND, f.lt(0.0, ax), f.lt(ax, math.inf))
    axs = f.where(ok, ax, 1.0)   # the Newton step sees finite operands only: no NaN derivative at 0 and inf
    ys = f.pow(axs, 1.0 / 3.0)
    y1 = f.sub(ys, f.div(f.sub(ys, f.div(axs, f.mul(ys, ys))), 3.0))
    return f.mul(f.where(ok, y1, y0), sign)


def asinh(e, x):
    """sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x| (accurate at small a); log(a) + ln 2 for
    a > 2^13 (f64: 2^27), where a^2 may overflow and the rest, 1 / (4 a^2), is below the rounding."""
    f = _Ops(e, x)
    sign, ax, _ = _sign_abs(f, x)
    cut = 2.0 ** (13 if f.dt == T.f32 else 27)
    large = f.lt(cut, ax)
    a = f.where(large, 1.0, ax)
    small = f.log1p(f.add(a, f.div(f.mul(a, a), f.add(1.0, f.sqrt(f.add(1.0, f.mul(a, a)))))))
    r = f.where(large, f.add(f.log(f.where(large, ax, 1.0)), LN2), small)
    return f.mul(r, sign)


def acosh(e, x):
    """log1p(t + sqrt(2t + t^2)), t = x - 1 (exact for x in [1, 2]) up to 2; log(2x - 1 / (x + sqrt(x^2 - 1)))
    up to 2^13 (f64: 2^27); log(x) + ln 2 beyond. NaN below 1."""
    f = _Ops(e, x)
    cut = 2.0 ** (13 if f.dt == T.f32 else 27)
    near, large = f.lt(x, 2.0), f.lt(cut, x)
    t = f.sub(f.where(near, x, 1.5), 1.0)
    # sqrt(2t + t^2) as sqrt(t) sqrt(2 + t): an infinite derivative at t = 0 stays off a product's 0 partial.
    # The value is corrected (no derivative: 0 times an infinite one would be NaN) by what that form and the sum
    # t + s lose to rounding: c = the sum's error (Fast2Sum, s >= t) + sqrt(2t + t t) - s (one square root rounds
    # less than two and their product), log1p(u + c) = log1p(u) + c / (1 + u): f64 from 2.8 ulp to 1.9.
    s = f.mul(f.sqrt(t), f.sqrt(f.add(2.0, t)))
    u = f.add(t, s)
    c = f.add(f.sub(f.sub(t, u), f.neg(s)), f.sub(f.sqrt(f.add(f.add(t, t), f.mul(t, t))), s))
    r_near = f.add(f.log1p(u), e.compute(Op.STOP_GRADIENT, f.div(c, f.add(1.0, u))))
    m = f.where(e.compute(Op.OR, near, large), 2.0, x)
    r_mid = f.log(f.sub(f.mul(2.0, m), f.div(1.0, f.add(m, f.sqrt(f.sub(f.mul(m, m), 1.0))))))
    r_large = f.add(f.log(f.where(large, x, 2.0)), LN2)
    return f.where(near, r_near, f.where(large, r_large, r_mid))


def atanh(e, x):
    """sign(x) atanh(a), a = |x|: log1p(2a + 2a^2 / (1 - a)) / 2 below 1/2 (fdlibm's form, accurate at small a),
    (log1p(a) - log(1 - a)) / 2 above (1 - a exact, no cancellation; derivative inf at a = 1, as JAX)."""
    f = _Ops(e, x)
    sign, ax, _ = _sign_abs(f, x)
    small = f.lt(ax, 0.5)
    a = f.where(small, ax, 0.0)
    two_a = f.add(a, a)
    r_small = f.log1p(f.add(two_a, f.div(f.mul(two_a, a), f.sub(1.0, a))))
    b = f.where(small, 0.75, ax)
    r = f.mul(0.5, f.where(small, r_small, f.sub(f.log1p(b), f.log(f.sub(1.0, b)))))
    return f.mul(r, sign)


def sigmoid(e, x):
    """1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below: exp never overflows."""
    f = _Ops(e, x)
    _, ax, neg = _sign_abs(f, x)
    q = f.exp_pair(f.neg(ax), f.c(0.0))
    d = f.add(1.0, q)
    return f.where(neg, f.div(q, d), f.div(1.0, d))


def softplus(e, x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)); derivative sigmoid(x) (1/2 at 0, as JAX)."""
    f = _Ops(e, x)
    _, ax, neg = _sign_abs(f, x)
    return f.add(f.where(neg, 0.0, x), f.log1p(f.exp_pair(f.neg(ax), f.c(0.0))))


def log_sigmoid(e, x):
    f = _Ops(e, x)
    return f.neg(softplus(e, f.neg(x)))


def logaddexp(e, a, b):
    """log(exp(a) + exp(b)) = max(a, b) + log1p(exp(-|a - b|)), as JAX: a + b where a - b is NaN (both inf
    of one sign, or a NaN); the derivative splits 1/2, 1/2 at a = b (max's ties)."""
    f = _Ops(e, a)
    d = f.sub(a, b)
    r = f.add(f.max(a, b), f.log1p(f.exp_pair(f.neg(f.abs(d)), f.c(0.0))))
    return f.where(e.compute(Op.NE, d, d), f.add(a, b), r)


def _ratio(f, num, den, s):
    return f.div(f.poly(num, s), f.poly(den, s))


def _horner_carried(f, coeffs, s, last=2):
    """(value, error) of the polynomial at s: Horner, its last `last` steps with their product's and sum's
    rounding errors carried (Graillat's compensated Horner): value + error is the polynomial to about an ulp of
    the earlier steps' sum times s^last."""
    acc, err = f.poly(coeffs[:-last], s), f.c(0.0)
    for c in coeffs[-last:]:
        prod = f.mul(acc, s)
        e_prod = f.product_error(acc, s, prod)
        acc, e_sum = f.two_sum(prod, c)
        err = f.add(f.mul(err, s), f.add(e_prod, e_sum))
    return acc, err


def _quotient_error(f, num, den, q, e_num, e_den):
    """(num + e_num) / (den + e_den) - q for q = num / den rounded, to first order in the small errors: the
    quotient's rounding (exact remainder, Dekker) and (e_num - q e_den) / den."""
    q_den = f.mul(q, den)
    e_div = f.div(f.sub(f.sub(num, q_den), f.product_error(q, den, q_den)), den)
    return f.add(e_div, f.div(f.sub(e_num, f.mul(q, e_den)), den))


def _erf_pieces(f, x):
    """fdlibm's s_erf.c design, branchless: (erf_small, erfc_small, (P1/Q1, its carried error), erfc(|x|)'s
    tail, sign(x), the masks |x| < 0.84375 and |x| < 1.25), each piece computed on operands clamped into its own
    interval (no NaN or inf on an untaken side). The carried errors are STOP_GRADIENT: their derivative is 0."""
    sign, ax, _ = _sign_abs(f, x)
    small, mid, near = f.lt(ax, 0.84375), f.lt(ax, 1.25), f.lt(ax, 1 / 0.35)
    # [0, 0.84375]: erf(x) = x + x R(x^2), R = P/Q fitted to erf(x)/x - 1 (relative error 2^-57.9)
    xs = f.where(small, x, 0.5)
    sq = f.mul(xs, xs)
    num, e_num = _horner_carried(f, ERF_PP, sq)
    den, e_den = _horner_carried(f, ERF_QQ, sq)
    ratio = f.div(num, den)
    xr = f.mul(xs, ratio)
    erf_small = f.add(xs, xr)
    # erfc there: 1 - erf(x) below 1/4, above 0.5 + ((0.5 - x) - x R) (0.5 - x exact), with the roundings of
    # x^2 (times dR/ds, its series), of R's Horner sums and quotient, of x R and of both sums carried (f64 from
    # 2.4 ulp to 0.65 there)
    e_ratio = f.add(_quotient_error(f, num, den, ratio, e_num, e_den),
                    f.mul(f.mul(f.poly(DERF_SERIES, sq), 2 / math.sqrt(math.pi)), f.product_error(xs, xs, sq)))
    s1, e1 = f.two_sum(f.sub(0.5, xs), f.neg(xr))
    w = f.add(0.5, s1)
    e_xr = f.add(f.product_error(xs, ratio, xr), f.mul(xs, e_ratio))
    carried = f.stop(f.sub(f.add(e1, f.sub(s1, f.sub(w, 0.5))), e_xr))
    erfc_small = f.where(f.lt(xs, 0.25), f.sub(1.0, erf_small), f.add(w, carried))
    # [0.84375, 1.25]: erf(1 + s) = ERX + P1(s)/Q1(s), ERX = erf(1) to 24 bits (|P1/Q1| < 0.078); erfc =
    # (1 - ERX) - P1/Q1 cancels to 0.077 at 1.25, so P1's last product and sum and the quotient's rounding are
    # carried: pq_mid + mid_carried is P1/Q1 to about an ulp of P1's and Q1's Horner sums (f64 from 2.3 ulp
    # to 1.2)
    s_mid = f.sub(f.where(mid, ax, 1.0), 1.0)
    num, e_num = _horner_carried(f, ERF_PA, s_mid)
    den, e_den = _horner_carried(f, ERF_QA, s_mid)
    pq_mid = f.div(num, den)
    mid_carried = f.stop(_quotient_error(f, num, den, pq_mid, e_num, e_den))
    # [1.25, 28]: erfc(a) = exp(-a^2 - 0.5625 + R(1/a^2)/S(1/a^2)) / a, two fits split at 1/0.35; -a^2 as
    # -z^2 + (z - a)(z + a) with z a's high bits (Dekker, one bit to spare: z^2 + 0.5625 is exact also where
    # it crosses a power of 2, which cost f32 64 ulp near 8), the rest small
    a = f.where(mid, 2.0, f.min(ax, 28.0))   # erfc(28) underflows f64
    a_near = f.where(near, a, 2.0)
    a_far = f.where(near, 4.0, a)
    s_near, s_far = f.div(1.0, f.mul(a_near, a_near)), f.div(1.0, f.mul(a_far, a_far))
    rs = f.where(near, _ratio(f, *ERFC_NEAR[1:], s_near), _ratio(f, *ERFC_FAR[1:], s_far))
    z, _ = f.split(a, spare=1)
    hi = f.sub(f.neg(f.mul(z, z)), f.where(near, 0.5625 - ERFC_NEAR[0], 0.5625 - ERFC_FAR[0]))
    lo = f.add(f.mul(f.sub(z, a), f.add(z, a)), rs)
    tail = f.div(f.exp_pair(hi, lo), a)
    return erf_small, erfc_small, (pq_mid, mid_carried), tail, sign, small, mid


def erf(e, x):
    """sign(x) erf(|x|): x + x R(x^2) below 0.84375, ERX + P1/Q1 below 1.25, 1 - erfc(|x|) beyond (fdlibm's
    design; derivative that of the expansion, 2/sqrt(pi) exp(-x^2) to the fits' accuracy)."""
    f = _Ops(e, x)
    erf_small, _, pq_mid, tail, sign, small, mid = _erf_pieces(f, x)
    r = f.where(mid, f.add(ERX, pq_mid[0]), f.sub(1.0, tail))
    r = f.where(small, erf_small, f.mul(r, sign))
    return f.where(e.compute(Op.NE, x, x), x, r)


def erfc(e, x):
    """1 - erf(x) below |x| = 0.84375 (0.5 + ((0.5 - x) - x R) above 1/4), (1 - ERX) - P1/Q1 or
    1 + (ERX + P1/Q1) below 1.25, erfc(|x|) or 2 - erfc(|x|) beyond, which keeps its relative accuracy down to
    underflow."""
    f = _Ops(e, x)
    _, erfc_small, pq_mid, tail, sign, small, mid = _erf_pieces(f, x)
    neg = f.lt(x, 0.0)
    pq, carried = pq_mid
    r_mid = f.where(neg, f.add(1.0, f.add(ERX, pq)), f.sub(f.sub(1.0 - ERX, pq), carried))   # 1 - ERX - pq exact
    r = f.where(mid, r_mid, f.where(neg, f.sub(2.0, tail), tail))
    r = f.where(small, erfc_small, r)
    return f.where(e.compute(Op.NE, x, x), x, r)


# name -> (function, number of float operands)
FUNCTIONS = {"square": (square, 1), "degrees": (degrees, 1), "radians": (radians, 1), "trunc": (trunc, 1),
             "exp10": (exp10, 1), "cbrt": (cbrt, 1), "asinh": (asinh, 1), "acosh": (acosh, 1), "atanh": (atanh, 1),
             "sigmoid": (sigmoid, 1), "softplus": (softplus, 1), "log_sigmoid": (log_sigmoid, 1),
             "erf": (erf, 1), "erfc": (erfc, 1), "copysign": (copysign, 2), "logaddexp": (logaddexp, 2),
             "lerp": (lerp, 3), "mix": (lerp, 3), "smoothstep": (smoothstep, 3)}

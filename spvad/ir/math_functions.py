"""Math library functions as IR expansions into the Op table's ops (sp.erf, sp.cbrt, sp.sigmoid, ...): each
`fn(e, *args)` places its statements with the Emitter `e` (emit.py) on scalar float statements of one dtype
and returns the result. Derivatives are those of the expansion (both modes differentiate the ops it emits), so
each is written to have JAX's derivative at kinks and no NaN from an untaken branch: both sides of a SELECT see
safe operands, and a sign is a product, not a SELECT, where the derivative can be infinite (the derivative
passes treat a SELECT as the products c a + (1 - c) b, and 0 inf is NaN). The f32 error of each, measured in
ulps against mpmath, is in docs/language.md. The error-free steps (Dekker splits, Cody-Waite reduction,
Fast2Sum) need the arithmetic computed as written, which fast_math=True does not promise: lavapipe keeps them
(the same ulps in both modes), another driver might not.
"""
import math

from .. import types as T
from .ops import Op

# erf(x) / x as a polynomial in s = x^2 on [0, 1] (relative error 3e-11, least squares near minimax in float64)
ERF_SMALL = (-9.641504184276536e-06, 0.00011256943710713507, -0.0008482828259512853, 0.005220945391914145,
             -0.026865400027282396, 0.11283781973842984, -0.37612638434633194, 1.1283791670580205)
# erfc(x) exp(x^2) as a polynomial in t = 1 / (1 + x) for x in [0.5, 27] (relative error 2.7e-9, fitted alike)
ERFC_LARGE = (1.9846954676712112, -6.281793049495955, 5.955917741542347, 2.3832430814491, -9.466736936218956,
              7.616749378809133, -1.8971629785164272, -0.3790461323360766, -0.321502923742532,
              0.2851441948796358, 0.5640458841850109, 0.5641932867820363, -3.9546410590673986e-08)
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

    def split(self, x):
        """Dekker: x = hi + lo with hi of half the significand's bits, so that hi * hi is exact."""
        big = self.mul(x, float(2 ** (12 if self.dt == T.f32 else 27) + 1))
        hi = self.sub(big, self.sub(big, x))
        return hi, self.sub(x, hi)

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


def _erfc_large(f, ax):
    """erfc(a) for a >= 0.5: exp(-a^2) P(1 / (1 + a)), exp(-a^2) from the exact split a^2 = h^2 + l (a + h)."""
    a = f.min(ax, 28.0)   # erfc(28) underflows f64 (P is fitted up to 27)
    hi, lo = f.split(a)
    ex = f.exp_pair(f.neg(f.mul(hi, hi)), f.neg(f.mul(lo, f.add(a, hi))))
    s = f.add(1.0, a)
    t = f.div(1.0, s)   # 1 / (1 + a), less the rounding error of 1 + a (Fast2Sum): P is sensitive to t
    t = f.sub(t, f.mul(f.mul(t, t), f.add(f.sub(f.max(a, 1.0), s), f.min(a, 1.0))))
    return f.mul(ex, f.poly(ERFC_LARGE, t))


def erf(e, x):
    """x P(x^2) for |x| < 1, else sign(x) (1 - erfc(|x|)); derivative that of the expansion (2/sqrt(pi)
    exp(-x^2) to the fit's accuracy)."""
    f = _Ops(e, x)
    ax = f.abs(x)
    small = f.lt(ax, 1.0)
    xs = f.where(small, x, 0.5)
    r_small = f.mul(xs, f.poly(ERF_SMALL, f.mul(xs, xs)))
    r_large = f.sub(1.0, _erfc_large(f, f.where(small, 1.0, ax)))
    r_large = f.where(f.lt(x, 0.0), f.neg(r_large), r_large)
    return f.where(small, r_small, f.where(e.compute(Op.NE, x, x), x, r_large))


def erfc(e, x):
    """1 - erf(x) for |x| < 0.5; erfc(x) (x >= 0.5) and 2 - erfc(-x) (x <= -0.5) from _erfc_large, which keeps
    its relative accuracy down to underflow."""
    f = _Ops(e, x)
    ax = f.abs(x)
    small = f.lt(ax, 0.5)
    xs = f.where(small, x, 0.25)
    r_small = f.sub(1.0, f.mul(xs, f.poly(ERF_SMALL, f.mul(xs, xs))))
    tail = _erfc_large(f, f.where(small, 1.0, ax))
    r_large = f.where(f.lt(x, 0.0), f.sub(2.0, tail), tail)
    return f.where(small, r_small, f.where(e.compute(Op.NE, x, x), x, r_large))


# name -> (function, number of float operands)
FUNCTIONS = {"square": (square, 1), "degrees": (degrees, 1), "radians": (radians, 1), "trunc": (trunc, 1),
             "exp10": (exp10, 1), "cbrt": (cbrt, 1), "asinh": (asinh, 1), "acosh": (acosh, 1), "atanh": (atanh, 1),
             "sigmoid": (sigmoid, 1), "softplus": (softplus, 1), "log_sigmoid": (log_sigmoid, 1),
             "erf": (erf, 1), "erfc": (erfc, 1), "copysign": (copysign, 2), "logaddexp": (logaddexp, 2),
             "lerp": (lerp, 3), "mix": (lerp, 3), "smoothstep": (smoothstep, 3)}

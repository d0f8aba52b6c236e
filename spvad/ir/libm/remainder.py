"""fmod (C99: the sign of the dividend) and mod (Python's and numpy's %: the sign of the divisor) of floats,
exact as C99 and numpy are: the true remainder a - q b is always a float, so it is computed exactly, not as the
driver's a - b trunc(a / b) rounded (OpFRem/OpFMod: up to 256 ulp off on lavapipe, 0.0275 for fmod(8.26, 2.74)).

A step takes q = trunc(x / b) and x - q b exactly (the product by Dekker's split, the difference by Sterbenz:
x and q b are within a factor of two); q may be one too large where x / b rounds up to an integer, which the
last step's fix-up (+ b, exact because the true remainder is a float) corrects. A quotient of more than the
fraction's bits is not held exactly by q; each step removes about that many bits of it, so STEPS steps are
exact for |a / b| below 2^(STEPS x 23) in f32 and 2^(STEPS x 52) in f64. Past that the result is NaN, not a
wrong number (C99's exact answer there would take up to 13 steps in f32 on every call: docs/language.md). A
divisor whose split would overflow is scaled down with the dividend by a power of two first (HUGE)."""
from ..ops import Op
from .arith import Arith

STEPS = 2


def _trunc(f, v):
    return f.where(f.lt(v, 0.0), f.ceil(v), f.floor(v))


def _two_product_error(f, a, b, p):
    """The rounding error of p = fl(a b): a b - p, exactly (Dekker)."""
    ah, al = f.split(a)
    bh, bl = f.split(b)
    return f.add(f.add(f.add(f.sub(f.mul(ah, bh), p), f.mul(ah, bl)), f.mul(al, bh)), f.mul(al, bl))


def _step(f, x, b):
    q = _trunc(f, f.div(x, b))
    p = f.mul(q, b)
    return f.sub(f.sub(x, p), _two_product_error(f, q, b, p))


# |b| from which Dekker's split of b (x (2^12 + 1), x (2^27 + 1)) would overflow, and the power of two both operands
# are scaled by there: exact, since |a| >= |b| is then far above the subnormals, and so is a non-zero remainder
# (a multiple of b's last place); |a| < |b| is a itself
HUGE = {False: (2.0 ** 100, -64), True: (2.0 ** 990, -512)}


def _abs_remainder(f, a, b):
    """fmod(|a|, |b|) for finite a and finite non-zero b: in [0, |b|)."""
    huge, k = HUGE[f.f64]
    scale = f.where(f.ge(f.abs(b), huge), 2.0 ** k, 1.0)
    ax, bx = f.mul(f.abs(a), scale), f.mul(f.abs(b), scale)
    r = ax
    for _ in range(STEPS):
        r = _step(f, r, bx)
    r = f.div(f.where(f.lt(r, 0.0), f.add(r, bx), r), scale)
    return f.where(f.lt(f.abs(a), f.abs(b)), f.abs(a), r)


def fmod(e, a, b):
    f = Arith(e, a)
    r = _abs_remainder(f, a, b)
    signed = f.where(f.sign_bit(a), f.neg(r), r)
    too_far = f.ge(f.div(f.abs(a), f.abs(b)), float(2.0 ** (STEPS * f.frac_bits)))
    nan = f.either(f.either(f.is_nan(a), f.is_nan(b)), f.either(f.eq(f.abs(a), float("inf")), f.eq(b, 0.0)))
    nan = f.either(nan, f.both(too_far, f.ne(f.abs(b), float("inf"))))
    return f.where(nan, float("nan"), f.where(f.eq(f.abs(b), float("inf")), a, signed))


def mod(e, a, b):
    """numpy's: m = fmod(a, b); where m is not zero and its sign differs from b's, m + b; a zero takes b's sign."""
    f = Arith(e, a)
    m = fmod(e, a, b)
    differs = f.both(f.ne(m, 0.0), f.ne(f.sign_bit(m), f.sign_bit(b)))
    zero = f.where(f.sign_bit(b), -0.0, 0.0)
    return f.where(f.eq(m, 0.0), zero, f.where(differs, f.add(m, b), m))


EXPANSIONS = {Op.FMOD: fmod, Op.MOD: mod}

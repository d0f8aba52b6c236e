"""rsqrt and hypot as IR expansions on the driver's square root (correctly rounded on lavapipe, as IEEE asks; Vulkan
promises less, as it does of division): computed as written, their results are the same bits on every backend,
where the driver's InverseSqrt and a contracted hypot need not be."""
from ..ops import Op
from .arith import Arith


def rsqrt(e, x):
    """1 / sqrt(x): two correctly rounded steps, within 1 ulp (inf at +-0, NaN below 0)."""
    f = Arith(e, x)
    return f.div(1.0, f.sqrt(x))


def hypot(e, a, b):
    """m sqrt(1 + (n / m)^2), m = max(|a|, |b|), n = min(|a|, |b|): no overflow of a a; n == m (0 and inf too)
    takes ratio 1, as scalar_ops._hypot."""
    f = Arith(e, a)
    aa, ab = f.abs(a), f.abs(b)
    m = f.where(f.gt(ab, aa), ab, aa)   # Python's max and min, as scalar_ops._hypot (NaN and inf alike)
    n = f.where(f.lt(ab, aa), ab, aa)
    t = f.where(f.eq(n, m), 1.0, f.div(n, m))
    return f.mul(m, f.sqrt(f.add(1.0, f.mul(t, t))))


EXPANSIONS = {Op.RSQRT: rsqrt, Op.HYPOT: hypot}

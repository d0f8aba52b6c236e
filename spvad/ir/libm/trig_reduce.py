"""Reduction of an f64 trigonometric argument by pi/2 for the trig expansions (trig.py; f32's is trig_f32.py):
|x| = (n + r / (pi/2)) pi/2 with r = r_hi + r_lo in [-pi/4, pi/4] (a double-word), returning (n mod 4, r_hi,
r_lo), branchless.

Moderate |x|: Cody-Waite, n = round(|x| 2/pi), pi/2 split into parts whose products with n are exact, each
subtraction caught by an error-free two-sum. Huge |x|: Payne-Hanek, |x| = M 2^E with M an integer; only the bits
of 2/pi from 2^-(E+some) on matter mod 4, chosen from a table of limbs by E (two levels of SELECT), multiplied by
M limb by limb exactly (24-bit limbs held in f64: every product and column sum exact), the carries propagated,
the quadrant taken from the top bits and the rest turned into a double-word.
"""
import math

from ..ops import Op

# The fraction bits of 2/pi (1400 bits, hex): 2/pi = 0.a2f9836e... in base 16
TWO_OVER_PI = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921cfe1deb1cb1"
    "29a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980fef2f118b5a0a6d1f6d36"
    "7ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f78a5292ea6bfb5fb11f8d5d0856033046fc7b6babf0cfbc209af436"
    "1da9e391615ee61b086599855f14a068")
PIO2_HI = 1.5707963267948966            # pi/2 = PIO2_HI + PIO2_LO (f64)
PIO2_LO = 6.123233995736766e-17
PIO2_HI_F32 = 1.5707963705062866        # pi/2 = PIO2_HI_F32 + PIO2_LO_F32 (f32 values: trig_inverse.py)
PIO2_LO_F32 = -4.371138828673793e-08
# Cody-Waite parts of pi/2 (fdlibm's): three of 33 bits (n <= 2^20: each n * part exact) and one of 53
CW_F64 = (1.5707963267341256, 6.077100506303966e-11, 2.0222662487111665e-21, 8.4784276603689e-32)
# Beyond these |x| the Cody-Waite n outgrows its exact products: Payne-Hanek
HUGE = 1.6e6


def two_sum(f, a, b):
    """(s, err) with s = fl(a + b) and s + err = a + b exactly (Knuth)."""
    s = f.add(a, b)
    bb = f.sub(s, a)
    return s, f.add(f.sub(a, f.sub(s, bb)), f.sub(b, bb))


def two_diff(f, a, b):
    """(d, err) with d = fl(a - b) and d + err = a - b exactly: two_sum(a, -b) without the negation."""
    d = f.sub(a, b)
    bb = f.sub(d, a)
    return d, f.sub(f.sub(a, f.sub(d, bb)), f.add(b, bb))


def fast_two_sum(f, a, b):
    """(s, err) with s + err = a + b exactly, for |a| >= |b| (Dekker)."""
    s = f.add(a, b)
    return s, f.sub(b, f.sub(s, a))


def two_prod(f, a, b):
    """(p, err) with p = fl(a b) and p + err = a b exactly (Dekker's split, no FMA), for moderate a, b."""
    p = f.mul(a, b)
    ah, al = f.split(a)
    bh, bl = f.split(b)
    err = f.add(f.add(f.add(f.sub(f.mul(ah, bh), p), f.mul(ah, bl)), f.mul(al, bh)), f.mul(al, bl))
    return p, err


def cody_waite(f, ax):
    """(n mod 4 as a float, r_hi, r_lo) for 0 <= ax below HUGE: r = ax - n (pi/2) to about 2^-100."""
    n = f.round(f.mul(ax, 2.0 / math.pi))
    parts = CW_F64
    s, err = f.sub(ax, f.mul(n, parts[0])), None   # exact: n p0 is, and the difference is small
    for p in parts[1:-1]:
        s, e = two_diff(f, s, f.mul(n, p))
        err = e if err is None else f.add(err, e)
    err = f.sub(err, f.mul(n, parts[-1]))
    hi, lo = fast_two_sum(f, s, err)
    return f.sub(n, f.mul(4.0, f.floor(f.mul(n, 0.25)))), hi, lo


class _FloatLimbs:
    """24-bit limbs held in f64 (f64's reduction): products < 2^48, column sums < 2^51, all exact. Nine limbs of
    2/pi leave the fraction within 2^76 2^-214 = 2^-138 (the closest f64, 6381956970095103 2^797, is 2^-61 off)."""
    BITS, SLOTS, STEP = 24, 9, 8

    def __init__(self, f):
        self.f = f

    def const(self, v):
        return self.f.c(float(v))

    def mul(self, a, b):
        return self.f.mul(a, b)

    def add(self, a, b):
        return self.f.add(a, b)

    def carry(self, v, low, high):
        """(v mod 2^24 if `low`, floor(v / 2^24) if `high`)."""
        hi = self.f.floor(self.f.mul(v, 2.0 ** -24))
        return (self.f.sub(v, self.f.mul(hi, 2.0 ** 24)) if low else None), hi

    def mantissa(self, ax, E, s):
        """The limbs of M 2^s = ax 2^(s - E), exact (a power-of-two scaling), split by floor."""
        v = self.f.scale(ax, self.f.iop("sub", s, E))
        out = []
        for _ in range(3):
            lo, v = self.carry(v, True, True)
            out.append(lo)
        return out + [v]

    def fraction(self, t):
        """(quadrant mod 4, lead, mid, low) from T's top limbs t[2:]: the top two bits the quadrant (plus one
        where the fraction is past 1/2), the rest as three non-overlapping doubles of two limbs each (exact: 48
        bits), the lead less 1 where rounded up."""
        f, top = self.f, t[-1]
        q = f.floor(f.mul(top, 2.0 ** -22))
        frac_top = f.sub(top, f.mul(q, 2.0 ** 22))
        up = f.ge(frac_top, 2.0 ** 21)
        q = f.where(up, f.add(q, 1.0), q)
        q = f.sub(q, f.mul(4.0, f.floor(f.mul(q, 0.25))))
        lead = f.mul(f.add(f.mul(frac_top, 2.0 ** 24), t[-2]), 2.0 ** -46)
        lead = f.where(up, f.sub(lead, 1.0), lead)
        mid = f.mul(f.add(f.mul(t[-3], 2.0 ** 24), t[-4]), 2.0 ** -94)
        return q, lead, mid, f.mul(f.add(f.mul(t[-5], 2.0 ** 24), t[-6]), 2.0 ** -142)


_TWO_OVER_PI_BITS = int(TWO_OVER_PI, 16)


def _limb(k, bits):
    """2/pi's k-th limb of `bits` bits after the binary point (0 before it)."""
    below = len(TWO_OVER_PI) * 4 - bits * (k + 1)
    assert below >= 0, "a limb past the table of 2/pi"
    return 0 if k < 0 else (_TWO_OVER_PI_BITS >> below) & ((1 << bits) - 1)


def _floor_div(f, v, d, lo, hi):
    """floor(v / d) for an i32 v in [lo, hi]: ((v + c d) m) >> 15 - c with m = ceil(2^15 / d), exact over the
    range (checked here), since an integer division is scalar code on SIMD CPUs (lavapipe: 20% of sin's time)."""
    c, m = -(lo // d), -(-(1 << 15) // d)
    assert all(((w + c * d) * m >> 15) - c == w // d for w in range(lo, hi + 1)), (d, lo, hi)
    return f.iop("sub", f.iop("shr", f.iop("mul", f.iop("add", v, c * d), m), 15), c)


def _chain(f, limbs, index, values, conds):
    """values[index] by a chain of SELECTs (conds[i] = index >= i); equal neighbours cost nothing."""
    acc, last = limbs.const(values[0]), values[0]
    for i in range(1, len(values)):
        if values[i] != last:
            acc, last = f.e.compute(Op.SELECT, conds[i], limbs.const(values[i]), acc), values[i]
    return acc


def _window(f, limbs, k0, k_min, k_max):
    """The SLOTS limbs of 2/pi from limb k0 on (k_min <= k0 <= k_max): a coarse SELECT chain by
    (k0 - k_min) // STEP over windows of SLOTS + STEP - 1 limbs, then the offset within by its bits (STEP a
    power of two), one halving of the shift per level."""
    B, J, step = limbs.BITS, limbs.SLOTS, limbs.STEP
    rel = f.iop("sub", k0, k_min)
    coarse = f.iop("shr", rel, step.bit_length() - 1)
    n_coarse = (k_max - k_min) // step + 1
    cc = [None] + [f.iop("ge", coarse, i) for i in range(1, n_coarse)]
    wide = [_chain(f, limbs, coarse, [_limb(k_min + a * step + t, B) for a in range(n_coarse)], cc)
            for t in range(J + step - 1)]
    shift = step // 2
    while shift:
        bit = f.iop("ne", f.iop("bit_and", rel, shift), 0)
        wide = [f.e.compute(Op.SELECT, bit, wide[j + shift], wide[j]) for j in range(len(wide) - shift)]
        shift //= 2
    return wide


def payne_hanek(f, ax):
    """(n mod 4 as a float, r_hi, r_lo) for finite ax >= HUGE: r to about 2^-136 absolute."""
    limbs = _FloatLimbs(f)
    B, J = limbs.BITS, limbs.SLOTS
    biased = f.iop("shr", f.high_word(ax), f.high_shift)   # ax > 0: no sign bit
    E = f.iop("sub", biased, f.bias + f.frac_bits)         # ax = M 2^E, M an integer of frac_bits + 1 bits
    e_min = int(math.floor(math.log2(HUGE))) - f.frac_bits
    e_max = f.max_exp - f.frac_bits
    k0 = _floor_div(f, f.iop("sub", E, 2), B, e_min - 2, e_max - 2)   # the first limb not giving multiples of 4
    s = f.iop("sub", f.iop("sub", E, 2), f.iop("mul", k0, B))
    window = _window(f, limbs, k0, (e_min - 2) // B, (e_max - 2) // B)
    m = limbs.mantissa(ax, E, s)
    # T = (M 2^s) sum_j window[j] 2^(B (J - 1 - j)), and |x| 2/pi = T 2^-(B J - 2) mod 4: T's columns below B J,
    # carried; the limbs below the fraction's three chunks (six limbs) only carry
    t, carry = [], None
    for c in range(J):
        col = carry
        for i, mi in enumerate(m):
            j = J - 1 - c + i
            if j < J and i <= c:
                p = limbs.mul(mi, window[j])
                col = p if col is None else limbs.add(col, p)
        low, carry = limbs.carry(col, c >= J - 6, c < J - 1)
        t.append(low)
    q, lead, mid, low = limbs.fraction(t)
    hi, lo = two_sum(f, lead, mid)
    hi, lo = fast_two_sum(f, hi, f.add(lo, low))
    p, pe = two_prod(f, hi, PIO2_HI)   # f64: times pi/2 as double-words
    pe = f.add(pe, f.add(f.mul(hi, PIO2_LO), f.mul(lo, PIO2_HI)))
    r_hi, r_lo = fast_two_sum(f, p, pe)
    return q, r_hi, r_lo


def reduce(f, ax):
    """(n mod 4, r_hi, r_lo) for 0 <= ax (finite; other values give finite garbage the caller replaces)."""
    huge = f.ge(ax, HUGE)
    q1, h1, l1 = cody_waite(f, f.where(huge, 0.0, ax))
    q2, h2, l2 = payne_hanek(f, f.where(huge, f.where(f.lt(ax, math.inf), ax, HUGE), HUGE))
    return f.where(huge, q2, q1), f.where(huge, h2, h1), f.where(huge, l2, l1)

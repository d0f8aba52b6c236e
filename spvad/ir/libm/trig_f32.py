"""f32 sin, cos and tan's shared part (trig.py): the argument reduced by pi/2 in integer arithmetic, exactly, for
every f32, and the two kernels in plain f32 arithmetic.

|x| = m 2^(e - 150) with m the 24-bit significand and e the exponent field. |x| 2/pi mod 4 needs 2/pi's bits from
2^-K on, K = e - 151: a 96-bit window W of them, three words funnel-shifted out of four of eight constant words.
R = floor(m W / 2^32) mod 2^64 is then |x| 2/pi 2^62 mod 2^64 to within 2^-31: the quadrant is its top two bits
rounded, the rest a signed fraction F 2^-62 of pi/2 (GLibc's sinf does this in 64-bit integers, its window read
from a table; here u32 words with Op.MUL_HI). The f32 closest to a multiple of pi/2 (16367173 2^72) leaves
|F| >= 2^32, so F's float conversion keeps its precision.

No branches and no table: llvmpipe runs both sides of every branch, and reads a per-thread table lane by lane (a
GLSL twin reading a Private table of 2/pi words ran 8% slower on lavapipe; GPUs usually place dynamically
indexed per-thread arrays in local memory). The five-way selects of constants stay in registers. Errors at most
2.7 ulp (sin), 2.5 (cos) and 2.8 (tan) on benchmarks/libm_ulps.py's samples, 4 the goal (tests/ir/test_libm_trig.py):
r's rounding counts in full near the zeros of sin and cos, and near tan's poles, where tan corrects for it
(`r_error`).
"""
import math
from typing import NamedTuple

from ... import types as T
from ..ops import Op
from .trig_reduce import TWO_OVER_PI

# sin(r) = r + r z P(z), cos(r) = 1 - z/2 + z^2 Q(z), z = r^2, |r| <= pi/4 (trig.py's fits)
SIN_P = (-0.00019503841758705676, 0.008332077413797379, -0.16666653752326965)
COS_Q = (2.4422226488240995e-05, -0.0013887223321944475, 0.04166664555668831)
PIO2 = math.pi / 2
PIO2_HI = float.fromhex("0x1.92p0")          # pi/2's top 8 bits: A1 PIO2_HI exact for A1 of 12 bits
PIO2_LO = PIO2 - PIO2_HI


class Reduced(NamedTuple):
    sign: object    # x's sign bit, as a u32 (0 or 0x80000000)
    n: object       # the quadrant, a u32 in 0..3
    r: object       # |x| - n pi/2 (NaN for infinities and NaN), within about an ulp
    sin: object     # sin(r), cos(r)
    cos: object
    fhi: object     # F's words (n = 0 below pi/4): what `r_error` refines r from
    flo: object
    tiny: object    # |x| < pi/4: r = |x|


def _u(f, name, *a):
    return f.iop(name, *a, dtype=T.u32)


def _words():
    """2/pi's fraction bits as 32-bit words: A[j] holds bits 32 (j - 1) to 32 j - 1 (bit b weighs 2^-b; bit 0 and
    before, the integer part, are 0)."""
    bits, total = int(TWO_OVER_PI, 16), len(TWO_OVER_PI) * 4
    bit = lambda b: (bits >> (total - b)) & 1 if b >= 1 else 0   # noqa: E731
    return tuple(sum(bit(32 * (j - 1) + i) << (31 - i) for i in range(32)) for j in range(8))


WORDS = _words()


def _window(f, ix):
    """(n, F's signed high word, F's low word) of the reduction, for |x| from 1/2 on (below, the caller's r is |x|):
    the window W = A[q..q+3] << s, q and s from K + 32 = e - 119, the word selected from five constants each."""
    e = f.iop("max", f.iop("shr", ix, 23), 126)
    kk = f.iop("sub", e, 119)
    q = f.iop("shr", kk, 5)
    s = f.e.compute(Op.CAST, f.iop("bit_and", kk, 31), dtype=T.u32)
    rs = _u(f, "sub", 31, s)
    at_least = [f.iop("ge", q, c) for c in range(1, 5)]
    a = []
    for t in range(4):
        word = f.i(WORDS[t], T.u32)
        for c, cond in enumerate(at_least, 1):
            word = f.iwhere(cond, WORDS[t + c], word, dtype=T.u32)
        a.append(word)
    w0, w1, w2 = (_u(f, "bit_or", _u(f, "shl", a[t], s), _u(f, "shr", _u(f, "shr", a[t + 1], 1), rs))
                  for t in range(3))
    m = f.e.compute(Op.CAST, f.iop("bit_or", f.iop("bit_and", ix, 0x7FFFFF), 0x800000), dtype=T.u32)
    lo1 = _u(f, "mul", m, w1)
    lo = _u(f, "add", lo1, f.e.compute(Op.MUL_HI, m, w2))
    carry = f.e.compute(Op.CAST, _u(f, "lt", lo, lo1), dtype=T.u32)
    hi = _u(f, "add", _u(f, "add", _u(f, "mul", m, w0), f.e.compute(Op.MUL_HI, m, w1)), carry)
    n = _u(f, "shr", _u(f, "add", hi, 1 << 29), 30)
    fhi = f.e.compute(Op.CAST, _u(f, "sub", hi, _u(f, "shl", n, 30)), dtype=T.i32)
    return n, fhi, lo


def reduce(f, x):
    """The Reduced parts of an f32 x, computed once per operand where the pass shares work (trig.py)."""
    bits = f.high_word(x)
    ix = f.iop("bit_and", bits, 0x7FFFFFFF)
    ax = f.from_high_word(ix)
    n, fhi, flo = _window(f, ix)
    v = f.add(f.mul(f.to_float(fhi), 2.0 ** 32), f.e.compute(Op.CAST, flo, dtype=T.f32))
    tiny = f.lt(ax, math.pi / 4)
    r = f.add(f.where(tiny, ax, f.mul(v, PIO2 * 2.0 ** -62)), f.sub(ax, ax))   # + (x - x): NaN for inf, NaN
    n = f.e.compute(Op.SELECT, tiny, f.i(0, T.u32), n)
    z = f.mul(r, r)
    s = f.add(r, f.mul(f.mul(r, z), f.poly(SIN_P, z)))
    hz = f.mul(0.5, z)
    w = f.sub(1.0, hz)
    c = f.add(w, f.add(f.sub(f.sub(1.0, w), hz), f.mul(f.mul(z, z), f.poly(COS_Q, z))))
    sign = f.e.compute(Op.CAST, f.iop("bit_and", bits, -0x80000000), dtype=T.u32)
    return Reduced(sign, n, r, s, c, fhi, flo, tiny)


def r_error(f, p):
    """The reduced argument's rounding error, (r exactly) - p.r, to first order (tan, near its poles, divides by
    r): F = a 2^32 + lo with a = fl(F's high word) and lo its rest, exact to 2^-25 of F; r = F 2^-62 pi/2 as a
    double-word, a's product split (Dekker's halves: A1 PIO2_HI exact) and the rest a small correction. 0 where
    r is |x| (below pi/4); NaN where p.r is."""
    a = f.to_float(p.fhi)
    rest = f.to_float(f.iop("sub", p.fhi, f.to_int(a)))
    lo = f.add(f.mul(rest, 2.0 ** 32), f.e.compute(Op.CAST, p.flo, dtype=T.f32))
    big = f.mul(a, 2.0 ** -30)
    a1 = f.chop(big)
    p0 = f.mul(a1, PIO2_HI)
    corr = f.add(f.mul(f.sub(big, a1), PIO2_HI), f.add(f.mul(big, PIO2_LO), f.mul(lo, PIO2 * 2.0 ** -62)))
    hi = f.add(p0, corr)
    r_lo = f.sub(corr, f.sub(hi, p0))
    return f.where(p.tiny, 0.0, f.add(f.sub(hi, p.r), r_lo))


def with_sign(f, v, flip):
    """v with its sign bit xor'ed with the u32 `flip` (0 or 0x80000000)."""
    bits = f.e.compute(Op.CAST, f.high_word(v), dtype=T.u32)
    return f.from_high_word(f.e.compute(Op.CAST, _u(f, "bit_xor", bits, flip), dtype=T.i32))

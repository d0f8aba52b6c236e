"""Arithmetic for the math library's expansions: `Arith(e, like)` spells IR statements of one float dtype (and
the i32 words of its bits) as method calls, one Compute each, computed as written (expand.py marks them)."""
from ... import types as T
from ..ops import Op

# (bits of the fraction, exponent bias, smallest normal exponent, largest exponent) per float dtype
FORMAT = {T.f32: (23, 127, -126, 127), T.f64: (52, 1023, -1022, 1023)}


class Arith:
    """Operations on statements of `like`'s float dtype: `f.add(a, b)`, `f.lt(a, b)`, ... (any Op by its name,
    Python numbers becoming constants of the dtype), `f.where`, `f.poly`, and the integer side (`f.i`, `f.iop`)."""

    def __init__(self, e, like):
        self.e, self.dt = e, like.dtype
        self.f64 = self.dt == T.f64
        self.frac_bits, self.bias, self.min_exp, self.max_exp = FORMAT[self.dt]

    def c(self, v):
        """A float constant of the dtype for a Python number; a statement as it is."""
        return self.e.const(v, self.dt) if isinstance(v, (int, float)) else v

    def i(self, v, dtype=T.i32):
        """An integer constant (i32 unless said) for a Python int; a statement as it is."""
        return self.e.const(v, dtype) if isinstance(v, int) else v

    def __getattr__(self, name):   # add, sub, mul, div, sqrt, floor, lt, ge, ...: one Compute of that Op
        op = Op[name.upper()]
        return lambda *a: self.e.compute(op, *map(self.c, a))

    def iop(self, name, *a, dtype=T.i32):
        """An integer op (`f.iop("shr", k, 23)`): Python ints become constants of `dtype`."""
        return self.e.compute(Op[name.upper()], *(self.i(v, dtype) for v in a))

    def where(self, cond, a, b):
        return self.e.compute(Op.SELECT, cond, self.c(a), self.c(b))

    def iwhere(self, cond, a, b, dtype=T.i32):
        return self.e.compute(Op.SELECT, cond, self.i(a, dtype), self.i(b, dtype))

    def both(self, a, b):
        return self.e.compute(Op.AND, a, b)

    def either(self, a, b):
        return self.e.compute(Op.OR, a, b)

    def to_float(self, k):
        return self.e.compute(Op.CAST, k, dtype=self.dt)

    def to_int(self, x):
        return self.e.compute(Op.CAST, x, dtype=T.i32)

    def poly(self, coeffs, x):
        """Horner: coeffs[0] x^n + ... + coeffs[n]."""
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.add(self.mul(acc, x), k)
        return acc

    def split(self, x):
        """Dekker: x = hi + lo with hi of half the significand's bits, so that products of halves are exact."""
        big = self.mul(x, float(2 ** (27 if self.f64 else 12) + 1))
        hi = self.sub(big, self.sub(big, x))
        return hi, self.sub(x, hi)

    # ---- bits: f32 as one i32, f64 as its high i32 word (sign, exponent, top 20 fraction bits) and low u32 ----
    def high_word(self, x):
        return self.e.compute(Op.FLOAT_BITS, x)

    def low_word(self, x):
        return self.e.compute(Op.FLOAT_LOW_BITS, x)

    def from_high_word(self, hi, lo=0):
        """The float whose bits are `hi` (f32), or whose words are `hi` and `lo` (f64)."""
        if not self.f64:
            return self.e.compute(Op.F32_FROM_BITS, hi)
        return self.e.compute(Op.F64_FROM_BITS, hi, self.i(lo, T.u32))

    @property
    def high_shift(self):
        """Where the exponent field starts in the high word: 23 (f32), 20 (f64)."""
        return 20 if self.f64 else 23

    def pow2(self, k):
        """2^k exactly, for an i32 `k` from the smallest normal exponent to the largest."""
        return self.from_high_word(self.iop("shl", self.iop("add", k, self.bias), self.high_shift))

    def scale(self, x, k):
        """x 2^k rounded once (also to a subnormal), for x of exponent near 0 and |k| up to twice the
        largest exponent: two exact powers of two, k = h + (k - h), the first product exact."""
        h = self.iop("shr", k, 1)
        return self.mul(self.mul(x, self.pow2(h)), self.pow2(self.iop("sub", k, h)))

    def chop(self, x, f32_mask=-4096):
        """x with its low fraction bits cleared, so that products of chopped values are exact: f64, the low
        word (32 bits); f32, the bits outside `f32_mask` (0xfffff000: the low 12)."""
        if self.f64:
            return self.from_high_word(self.high_word(x), 0)
        return self.from_high_word(self.iop("bit_and", self.high_word(x), f32_mask))

    def sign_bit(self, x):
        """Whether x's sign bit is set (-0.0 included; a NaN's too, by its bits)."""
        return self.iop("lt", self.high_word(x), 0)

    def is_nan(self, x):
        return self.ne(x, x)

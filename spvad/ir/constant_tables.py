"""Constant tables that IR operations read: 2/pi's fraction bits, as the math library's argument reduction
(ir/libm/trig_reduce.py) takes them, and as 32-bit words at byte offsets (Op.TWO_OVER_PI_BITS: the
interpreter's evaluation and the SPIR-V module's Private array hold these same words)."""

# The fraction bits of 2/pi (1400 bits, hex): 2/pi = 0.a2f9836e... in base 16
TWO_OVER_PI = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921cfe1deb1cb1"
    "29a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff897ffde05980fef2f118b5a0a6d1f6d36"
    "7ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f78a5292ea6bfb5fb11f8d5d0856033046fc7b6babf0cfbc209af436"
    "1da9e391615ee61b086599855f14a068")

# Op.TWO_OVER_PI_BITS(k), k in [0, 40): the 32 bits of 2/pi from 2^-(8k - 151) on, the bits before the binary point
# zero: word k + 4 continues word k. Indexed by an f32's exponent field over 8 (its top bits), words k, k + 4,
# k + 8 hold every bit of 2/pi that the f32's product with 2/pi needs mod 4 (trig_reduce.py).
TWO_OVER_PI_WORDS = 40
_FIRST_BIT = -151


def _two_over_pi_words():
    bits, total = int(TWO_OVER_PI, 16), len(TWO_OVER_PI) * 4
    words = []
    for k in range(TWO_OVER_PI_WORDS):
        first = 8 * k + _FIRST_BIT   # the word's top bit is 2/pi's bit 2^-first
        word = 0
        for b in range(first, first + 32):
            word = (word << 1) | ((bits >> (total - b)) & 1 if b >= 1 else 0)
        words.append(word)
    return tuple(words)


TWO_OVER_PI_TABLE = _two_over_pi_words()

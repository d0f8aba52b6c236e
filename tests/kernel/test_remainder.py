"""fmod and float % are exact, as C99 and numpy are (ir/libm/remainder.py): bit for bit numpy's on random
operands with quotients up to 2^40, and on every pair of special values (signed zeros, infinities, NaN), in f32
and f64, on Vulkan and the interpreter; NaN, not a wrong number, past the quotients the expansion holds (2^46 in
f32, 2^104 in f64). (The driver's OpFRem was up to 256 ulp off: fmod(8.26, 2.74).)"""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -3.0, 7.5, 1e-30, -2.5e-38, 1.7e36, -2.7e36, 3.3e38]


@sp.kernel
def remainders(a: sp.Array, b: sp.Array, y: sp.Array, z: sp.Array):
    for i in range(a.shape[0]):
        y[i] = sp.fmod(a[i], b[i])
        z[i] = a[i] % b[i]


def same_bits(got, want):
    return ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_fmod_and_mod_exact(dtype, rng):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")
    n = 4096
    b = (rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
    b[:64] *= np.finfo(dtype).max / 4 / np.abs(b[:64]).max()     # divisors whose split would overflow
    with np.errstate(over="ignore"):   # quotients up to 2^40 of the huge divisors: inf, a special value too
        a = (b.astype(np.float64) * rng.uniform(-1, 1, n) * 2.0 ** rng.uniform(0, 40, n)).astype(dtype)
    a[:64] = b[:64] * rng.uniform(-3.9, 3.9, 64).astype(dtype)
    a = np.concatenate([a, np.repeat(np.array(SPECIAL, dtype), len(SPECIAL))])
    b = np.concatenate([b, np.tile(np.array(SPECIAL, dtype), len(SPECIAL))])
    dt = sp.f32 if dtype == np.float32 else sp.f64
    y, z = sp.ndarray(dt, a.shape), sp.ndarray(dt, a.shape)
    remainders(sp.from_numpy(a), sp.from_numpy(b), y, z)
    with np.errstate(all="ignore"):
        want = {"fmod": np.fmod(a, b), "%": np.mod(a, b)}
        beyond = (np.abs(a.astype(np.float64) / b) >= 2.0 ** (46 if dtype == np.float32 else 104)) & np.isfinite(b)
    for w in want.values():
        w[beyond] = np.nan
    assert beyond.sum() >= 3          # (1, 1e-30), (-3, -2.5e-38), ... in f32
    for name, got in (("fmod", y.to_numpy()), ("%", z.to_numpy())):
        bad = np.flatnonzero(~same_bits(got, want[name]))
        assert bad.size == 0, f"{name}: " + "; ".join(f"({a[j]!r}, {b[j]!r}) -> {got[j]!r}, numpy "
                                                     f"{want[name][j]!r}" for j in bad[:5])

"""The on-disk compile cache: a fresh specialisation is loaded instead of compiled, and anything that
changes the kernel (its code, a constant it reads, its argument types) misses the cache."""
import sys

import numpy as np
import pytest

import spvad as sp
from spvad import cache

kernel_module = sys.modules["spvad.kernel"]   # `spvad.kernel` the attribute is the decorator

SCALE = 2.0


@sp.func
def twice(v):
    return v * SCALE


@sp.kernel
def scaled(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = twice(x[i]) + 1.0


def run(x_np):
    x, y = sp.from_numpy(x_np), sp.ndarray(sp.f32, x_np.shape)
    scaled(x, y)
    return y.to_numpy()


@pytest.fixture
def no_compiler(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the disk cache holds this kernel")
    return lambda: monkeypatch.setattr(kernel_module, "compile_kernel", refuse)


def test_a_second_compile_loads_from_disk(rng, no_compiler):
    x = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    first = run(x)
    scaled._cache.clear()          # as in a fresh process
    no_compiler()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(run(x), first)


def test_changing_a_constant_the_kernel_reads_misses_the_cache(rng, monkeypatch):
    global SCALE
    x = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    run(x)
    key_before = cache.fingerprint(scaled.fn)
    SCALE = 3.0
    try:
        assert cache.fingerprint(scaled.fn) != key_before
        scaled._cache.clear()
        np.testing.assert_allclose(run(x), x * 3.0 + 1.0, rtol=1e-6)
    finally:
        SCALE = 2.0


def test_cache_off(monkeypatch, rng):
    monkeypatch.setenv("SPVAD_CACHE", "0")
    assert cache.cache_dir() is None
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    scaled._cache.clear()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)


def test_a_corrupt_entry_is_recompiled(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("SPVAD_CACHE_DIR", str(tmp_path))
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    scaled._cache.clear()
    run(x)
    for entry in tmp_path.iterdir():
        entry.write_bytes(b"not a pickle")
    scaled._cache.clear()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)

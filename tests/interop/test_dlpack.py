"""DLPack: np.from_dlpack(a) / torch.from_dlpack(a) view an ndarray's memory without a copy (what that
aliasing means is in docs/interop.md); the view keeps the array alive, and the device stays open past
sp.reset() until the last view goes; sp.from_dlpack copies another library's array into a new ndarray."""
import gc

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import spvad as sp
from spvad import runtime


@sp.kernel
def add_one(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


def test_the_export_is_a_view_of_the_device_memory(rng):
    data = rng.uniform(-1, 1, 32).astype(np.float32)
    a = sp.from_numpy(data)
    assert a.__dlpack_device__() == (1, 0)
    t, n = torch.from_dlpack(a), np.from_dlpack(a)
    assert t.shape == (32,) and t.dtype == torch.float32 and n.dtype == np.float32
    add_one(a)   # a later launch writes the memory both views show ...
    sp.sync()    # ... once it ran
    np.testing.assert_allclose(t.numpy(), data + 1, rtol=1e-6)
    np.testing.assert_allclose(n, data + 1, rtol=1e-6)
    t[0] = 42.0   # and a write through a view is the array's
    assert a[0] == 42.0


def test_matrices_export_their_storage_shape(rng):
    data = rng.uniform(-1, 1, (4, 3, 3)).astype(np.float32)
    a = sp.from_numpy(data, dtype=sp.mat3)
    np.testing.assert_array_equal(np.from_dlpack(a), data)


def test_a_view_keeps_the_array_alive(rng):
    data = rng.uniform(-1, 1, 100_000)
    a = sp.from_numpy(data)
    t = torch.from_dlpack(a)
    del a
    gc.collect()
    for _ in range(3):   # new arrays must not take the memory the view shows
        sp.from_numpy(np.zeros(100_000))
    np.testing.assert_array_equal(t.numpy(), data)


def test_the_device_outlives_reset_while_a_view_is_left(rng, fresh):
    data = rng.uniform(-1, 1, 1 << 18).astype(np.float32)   # 1 MiB: its own mapping
    a = sp.from_numpy(data)
    device = runtime.get().device
    t = torch.from_dlpack(a)
    del a
    sp.reset()
    sp.init()   # a new runtime; the old device stays open for the view
    np.testing.assert_array_equal(t.numpy(), data)
    assert not getattr(device, "_closed", False)
    del t
    gc.collect()
    assert getattr(device, "_closed", True)


def test_bool_arrays_export_a_copy():
    a = sp.from_numpy(np.array([True, False, True]))
    np.testing.assert_array_equal(np.from_dlpack(a), [True, False, True])
    with pytest.raises(BufferError, match="32-bit words"):
        a.__dlpack__(copy=False)


def test_an_exported_array_of_a_reset_runtime_is_refused(fresh):
    a = sp.from_numpy(np.ones(3, np.float32))
    sp.init()
    with pytest.raises(sp.DeviceError, match="reset"):
        np.from_dlpack(a)


@pytest.mark.parametrize("make", [lambda d: torch.from_numpy(d), lambda d: d, lambda d: jnp.asarray(d),
                                  lambda d: sp.from_numpy(d)], ids=["torch", "numpy", "jax", "spvad"])
def test_from_dlpack_copies_into_a_new_array(rng, make):
    data = rng.uniform(-1, 1, 15).astype(np.float32)
    source = make(data.copy())
    a = sp.from_dlpack(source, needs_grad=True)
    assert a.dtype == sp.f32 and a.shape == (15,) and a.needs_grad and a is not source
    np.testing.assert_array_equal(a.to_numpy(), data)
    add_one(a)
    sp.sync()
    np.testing.assert_array_equal(np.from_dlpack(source) if not isinstance(source, np.ndarray) else source, data)


def test_from_dlpack_converts_as_from_numpy():
    assert sp.from_dlpack(torch.arange(5)).dtype == sp.i32
    assert sp.from_dlpack(np.arange(5.0)).dtype == sp.f64
    with pytest.raises(sp.ArgumentError, match="int64 values .* do not fit in i32"):
        sp.from_dlpack(torch.tensor([2**40]))

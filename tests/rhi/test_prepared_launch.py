"""Prepared launches (Device.prepare_launch): a replayed dispatch looks its descriptor set up once, and again
after a buffer it binds was released; the interpreter's default preparation launches as `launch` does."""
import struct

import numpy as np
import pytest

import spvad as sp
from spvad.errors import DeviceError
from test_vulkan import add_module, dev, groups_for, upload  # noqa: F401 (dev: the fixture)


def test_a_prepared_launch_repeats_with_new_push_constants(dev):  # noqa: F811
    n = 200
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    A, B, C = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    send = dev.prepare_launch(pipe, [A, B, C], groups_for(n))
    for m in (n, 64, 130):   # the element count is the push constant
        C.view(np.float32)[:] = 0
        send(struct.pack("<I", m))
        dev.sync()
        np.testing.assert_array_equal(C.view(np.float32)[:m], a[:m] + b[:m])
        assert not C.view(np.float32)[m:].any()


def test_a_prepared_launch_after_a_buffer_it_binds_was_released_is_refused(dev):  # noqa: F811
    """Its cached descriptor set is freed with the buffer: the launch looks it up again and is refused, where
    binding the freed set would be a use-after-free (the validation layer reports it). Other buffers' sets
    stay, and the device keeps working: a new buffer (which may reuse the memory) gets right values."""
    n = 100
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.25, np.float32)
    A, B, C = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n)
    other = dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    send = dev.prepare_launch(pipe, [A, B, C], groups_for(n))
    keep = dev.prepare_launch(pipe, [A, B, other], groups_for(n))
    send(struct.pack("<I", n))
    dev.sync()
    C.release()
    dev.sync()   # the set is freed once no batch uses it
    with pytest.raises(DeviceError, match="released"):
        send(struct.pack("<I", n))
    keep(struct.pack("<I", n))
    D = dev.create_buffer(4 * n)
    dev.prepare_launch(pipe, [A, B, D], groups_for(n))(struct.pack("<I", n))
    dev.sync()
    np.testing.assert_array_equal(other.view(np.float32), a + b)
    np.testing.assert_array_equal(D.view(np.float32), a + b)


def test_prepared_groups_over_the_limit_raise_at_once(dev):  # noqa: F811
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    bufs = [dev.create_buffer(16) for _ in range(3)]
    with pytest.raises(DeviceError, match="maxComputeWorkGroupCount"):
        dev.prepare_launch(pipe, bufs, (dev.info["limits"]["max_workgroup_count"][0] + 1, 1, 1))


@pytest.mark.backends
def test_replays_after_arrays_are_freed_and_made_again():
    """A kernel replayed, its arrays dropped (their buffers freed) and made again, possibly in the same
    memory: every launch computes from the arrays it is given."""
    n = 300

    @sp.kernel
    def scaled(x: sp.Array, y: sp.Array, s: sp.f32):
        for i in range(x.shape[0]):
            y[i] = x[i] * s + y[i]

    rng = np.random.default_rng(7)
    for round_ in range(4):
        xv, yv = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        x, y = sp.from_numpy(xv), sp.from_numpy(yv)
        want = yv.astype(np.float64)
        for s in (0.5, -1.25, 2.0):   # new scalars: the replay repacks the push constants
            scaled(x, y, s)
            want = xv.astype(np.float64) * s + want
        np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-5, atol=1e-5)
        del x, y

"""The interpreter backend: sp.init(backend="interp") runs kernels, gradients and forward-mode kernels on the
IR interpreter with the ndarray / Tape / error behaviour of a device."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.rhi.interp.device import InterpDevice


@pytest.fixture
def interp():
    sp.init(backend="interp")
    yield
    sp.init()


def rand(rng, n, lo=0.2, hi=1.0):
    return (np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, n)).astype(np.float32)


@sp.kernel
def integrate(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while k < n:
            v = v + 0.1 * sp.sin(v) * w[i]
            k += 1
        y[i] = v


def integrate_ref(x, w, n):
    v = x.astype(np.float64)
    for _ in range(n):
        v = v + 0.1 * np.sin(v) * w
    return v


def integrate_grad_ref(x, w, n):
    """d sum(y) / dx and / dw by the chain rule in float64."""
    v, dv_dx, dv_dw = x.astype(np.float64), np.ones_like(x, np.float64), np.zeros_like(x, np.float64)
    for _ in range(n):
        step = 1 + 0.1 * np.cos(v) * w
        dv_dw = dv_dw * step + 0.1 * np.sin(v)
        dv_dx = dv_dx * step
        v = v + 0.1 * np.sin(v) * w
    return dv_dx, dv_dw


def test_device_contract():
    dev = InterpDevice()
    a, b = dev.create_buffer(16), dev.create_buffer(16)
    assert not a.view(np.float32).any()
    a.view(np.float32)[:] = [1, 2, 3, 4]
    dev.copy_buffer(a, b, 16)
    dev.fill_buffer(a, 4, 8, 0x3F800000)
    assert not b.view(np.float32).any()            # recorded, not run: nothing happens before sync
    dev.sync()
    assert b.view(np.float32).tolist() == [1, 2, 3, 4]
    assert a.view(np.float32).tolist() == [1, 1, 1, 4]
    dev.copy_regions(b, a, np.array([[12, 0, 4], [0, 8, 8]], np.uint64))   # (from, to, bytes)
    dev.sync()
    assert a.view(np.float32).tolist() == [4, 1, 1, 2]
    with pytest.raises(sp.DeviceError, match="past the end"):
        dev.copy_regions(a, b, np.array([[8, 12, 8]], np.uint64))
    a.release()
    assert a.released
    with pytest.raises(sp.DeviceError):
        dev.copy_buffer(a, b, 16)


def test_backend_is_selected_by_init_and_env(interp, monkeypatch):
    assert sp.device_info()["backend"] == "interp"
    monkeypatch.setenv("SPVAD_BACKEND", "interp")
    sp.init(backend="vulkan")   # the environment wins, as for the other backends
    assert sp.device_info()["backend"] == "interp"
    monkeypatch.delenv("SPVAD_BACKEND")
    with pytest.raises(sp.DeviceError, match="unknown backend 'nope'.*interp"):
        sp.init(backend="nope")


def test_kernel_gradient_and_forward_mode(interp, rng):
    x0, w0 = rand(rng, 10), rand(rng, 10)
    x = sp.from_numpy(x0, needs_grad=True, needs_dual=True)
    w = sp.from_numpy(w0, needs_grad=True, needs_dual=True)
    y = sp.ndarray(sp.f32, (10,), needs_grad=True, needs_dual=True)
    integrate(x, w, y, 7)
    np.testing.assert_allclose(y.to_numpy(), integrate_ref(x0, w0, 7), rtol=1e-5)
    y.grad.fill(1.0)
    integrate.grad(x, w, y, 7)
    gx, gw = integrate_grad_ref(x0, w0, 7)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-4)
    np.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-4, atol=1e-6)
    t = rand(rng, 10)
    x.dual.from_numpy(t)
    integrate.fwd(x, w, y, 7)
    np.testing.assert_allclose(y.dual.to_numpy(), gx * t, rtol=1e-4, atol=1e-6)


def test_a_tape_over_two_kernels(interp, rng):
    @sp.kernel
    def square_sum(y: sp.Array, loss: sp.Array):
        for i in range(y.shape[0]):
            loss[None] += y[i] * y[i]

    x0, w0 = rand(rng, 6), rand(rng, 6)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y, loss = sp.ndarray(sp.f32, (6,), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        integrate(x, w, y, 4)
        square_sum(y, loss)
    v = integrate_ref(x0, w0, 4)
    gx, gw = integrate_grad_ref(x0, w0, 4)
    assert loss[None] == pytest.approx(float(np.sum(v * v)), rel=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * v * gx, rtol=1e-4)
    np.testing.assert_allclose(w.grad.to_numpy(), 2 * v * gw, rtol=1e-4, atol=1e-6)


def test_adstack_overflow_is_raised_at_sync_and_the_runtime_goes_on(interp, rng):
    small = sp.kernel(integrate.fn, ad_stack_size=2)
    x0, w0 = rand(rng, 4), rand(rng, 4)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, (4,), needs_grad=True)
    small(x, w, y, 5)
    y.grad.fill(1.0)
    small.grad(x, w, y, 5)
    with pytest.raises(sp.AdStackOverflowError, match=r"capacity 2, the loop needed 6\); pass ad_stack_size>=6"):
        sp.sync()
    x.grad.fill(0.0)
    y.grad.fill(1.0)             # the gradient launch consumed the seed (y's old contents were overwritten)
    integrate.grad(x, w, y, 5)   # measured capacities: exact
    np.testing.assert_allclose(x.grad.to_numpy(), integrate_grad_ref(x0, w0, 5)[0], rtol=1e-4)


def test_an_out_of_bounds_access_is_a_device_error_naming_it(interp):
    @sp.kernel
    def shifted(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = x[i + 1]

    x, y = sp.from_numpy(np.ones(4, np.float32)), sp.ndarray(sp.f32, (4,))
    shifted(x, y)
    with pytest.raises(sp.DeviceError, match=r"shifted.*x\[4\] is out of bounds for shape \(4,\)"):
        sp.sync()
    y.fill(2.0)
    assert y.to_numpy().tolist() == [2.0] * 4
    assert runtime.get().device.info["backend"] == "interp"


def ones_up_to(n: sp.Array, y: sp.Array):
    for i in range(n[None]):
        y[i] = 1.0


def test_an_indirect_launch_reads_its_groups_when_it_runs():
    """As on a GPU: the groups are read at sync, after the launches before it; none: nothing runs; else the
    task runs over the count its header reads from the arrays."""
    from spvad import types as T
    from spvad.frontend import ArraySpec, build_kernel
    from spvad.rhi.interp.program import lower_for_interp
    kernel = build_kernel(ones_up_to, [ArraySpec(T.i32, 0), ArraySpec(T.f32, 1)])[0]
    prog = lower_for_interp(kernel, kernel.tasks[0])
    assert prog.bindings == [(0, "primal"), (1, "primal")]   # the header's array is bound too
    dev = InterpDevice()
    pipe = dev.create_pipeline(prog, name="ones", num_buffers=2, push_constant_size=prog.push_size)
    n, y, groups = dev.create_buffer(4), dev.create_buffer(32), dev.create_buffer(12)
    n.view(np.int32)[0] = 5
    push = np.array([8], np.int32).tobytes()   # y's extent
    groups.view(np.uint32)[:] = [1, 1, 1]
    dev.launch_indirect(pipe, [n, y], push, groups, 0)
    groups.view(np.uint32)[0] = 0              # before the sync: the launch runs no thread
    dev.sync()
    assert not y.view(np.float32).any()
    groups.view(np.uint32)[0] = 1
    dev.launch_indirect(pipe, [n, y], push, groups, 0)
    dev.sync()
    assert y.view(np.float32).tolist() == [1] * 5 + [0] * 3
    with pytest.raises(sp.DeviceError, match="indirect arguments at byte 4"):
        dev.launch_indirect(pipe, [n, y], push, groups, 4)


def test_a_backend_without_indirect_dispatch_says_so():
    from spvad.rhi.base import Device

    class Minimal(InterpDevice):
        launch_indirect = Device.launch_indirect
    dev = Minimal()
    pipe = dev.create_pipeline(None, name="k", num_buffers=0, push_constant_size=0)
    with pytest.raises(sp.DeviceError, match="interp backend has no indirect dispatch"):
        dev.launch_indirect(pipe, [], b"", dev.create_buffer(12), 0)

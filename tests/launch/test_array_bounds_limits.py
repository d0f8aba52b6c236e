"""Counts read from arrays at their limits: past 2**31 - 1 threads a ThreadCountError at the next sync (never a
wrapped launch), a bound read outside its array a DeviceError there, a loop writing its own bound a
CompileError; launches past the group-count limit fold into 2-D; coarsened tasks run their last n % 4
elements; no launch syncs unless the host needs the count (a depth probe, stacks in a buffer); repeated
launches replay; the counting module survives the disk cache."""
import sys

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from tests.adcheck import assert_close, rand
from tests.launch.test_array_bounds import iterated_np, steps, triangle

N = 12


@sp.kernel
def doubled(n: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(n[None]):   # elementwise: four elements per thread on Vulkan (lower_coarse.py)
        y[i] = x[i] * 2.0


@sp.kernel
def grid_count(s: sp.Array, total: sp.Array):
    for i, j in sp.ndrange(s[0], s[1]):
        sp.atomic_add(total[None], 1)


@sp.kernel
def window_count(b: sp.Array, total: sp.Array):
    for i in range(b[0], b[1]):
        sp.atomic_add(total[None], 1)


@sp.kernel
def unsigned_count(n: sp.Array, total: sp.Array):
    for i in range(n[0]):
        sp.atomic_add(total[None], 1)


@sp.kernel
def bound_past_the_end(b: sp.Array, total: sp.Array):
    for i in range(b[2]):
        sp.atomic_add(total[None], 1)


def iterated(n, x, trips):
    y = np.zeros(len(x))
    iterated_np(n, x.astype(np.float64), y, trips)
    return y


TOO_MANY = [   # kernel, a bound array whose exact count needs more than 32 bits somewhere, a small one
    (grid_count, [65536, 32768], [3, 4]),
    (grid_count, [2**31 - 1, 2], [5, 2]),
    (window_count, [-2**31, 2**31 - 1], [-3, 4]),   # hi - lo
    (unsigned_count, [2**31], [6]),
    (unsigned_count, [2**32 - 1], [7]),
]


@pytest.mark.backends
@pytest.mark.parametrize("kernel,big,small", TOO_MANY, ids=[f"{k.name}-{b}" for k, b, _ in TOO_MANY])
def test_a_count_past_2_31_is_an_error_at_sync_and_runs_nothing(kernel, big, small):
    dtype = np.uint32 if kernel is unsigned_count else np.int32
    total = sp.ndarray(sp.i32, ())
    bound = sp.from_numpy(np.array(big, dtype))
    kernel(bound, total)                          # queued: nothing is known yet
    with pytest.raises(sp.ThreadCountError, match=r"2\*\*31 - 1 threads.*ran no thread") as info:
        sp.sync()
    assert kernel.name in str(info.value) and "range(" in str(info.value)
    assert total[None] == 0
    bound.from_numpy(np.array(small, dtype))      # the runtime goes on
    kernel(bound, total)
    assert total[None] == (small[1] - small[0] if kernel is window_count else np.prod(small))


@pytest.mark.backends
def test_a_bound_read_outside_its_array_is_a_device_error_at_sync():
    total = sp.ndarray(sp.i32, ())
    b = sp.from_numpy(np.array([5, 6], np.int32))
    bound_past_the_end(b, total)
    with pytest.raises(sp.DeviceError, match=r"read 'b' outside its shape, so that launch ran no thread"):
        sp.sync()
    assert total[None] == 0


def test_a_loop_that_writes_its_own_bound_is_refused():
    @sp.kernel
    def shrinking(n: sp.Array, y: sp.Array):
        for i in range(n[None]):
            n[None] = 0
            y[i] = 1.0
    with pytest.raises(sp.CompileError, match="bounds read 'n', which the loop writes") as info:
        shrinking(sp.from_numpy(np.array(3, np.int32)), sp.ndarray(sp.f32, (4,)))
    assert "for i in range(n[None])" in str(info.value)


@sp.kernel
def marks(n: sp.Array, y: sp.Array):
    for i in range(n[None]):
        if i % 1048576 == 0:
            y[i // 1048576] = i + 1


def test_a_count_past_the_group_limit_folds_into_2d():
    groups_x = sp.device_info()["limits"]["max_workgroup_count"][0]
    count = groups_x * 512 + 3 * 1048576 + 1     # past the groups of the widest workgroup (lavapipe: 512)
    y = sp.ndarray(sp.i32, (64,))
    marks(sp.from_numpy(np.array(count, np.int32)), y)
    want = np.zeros(64, np.int64)
    last = (count - 1) // 1048576
    want[:last + 1] = np.arange(last + 1) * 1048576 + 1
    np.testing.assert_array_equal(y.to_numpy(), want)


@pytest.mark.backends
def test_a_coarsened_task_runs_its_last_elements(rng):
    xv = rand(rng, N)
    x, y, n = sp.from_numpy(xv), sp.ndarray(sp.f32, (N,)), sp.ndarray(sp.i32, ())
    for count in range(N + 1):
        y.fill(-1.0)
        n.fill(count)
        doubled(n, x, y)
        want = np.where(np.arange(N) < count, 2.0 * xv, -1.0)
        np.testing.assert_array_equal(y.to_numpy(), want.astype(np.float32))
    if sp.device_info()["backend"] == "vulkan":
        assert next(iter(doubled._cache.values()))[0].tasks[0].lowered.per_thread == 4   # (variants by global names)


@pytest.fixture
def syncs(monkeypatch):
    """The number of device syncs so far (a list holding it)."""
    rt, seen = runtime.get(), [0]
    real = rt.device.sync

    def counted():
        seen[0] += 1
        real()
    monkeypatch.setattr(rt.device, "sync", counted)
    return seen


@pytest.mark.backends
def test_launches_do_not_sync_unless_the_host_needs_the_count(rng, syncs):
    xv = rand(rng, N)
    x = sp.from_numpy(xv, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    n = sp.from_numpy(np.array(7, np.int32))
    y.grad.fill(1.0)
    before = syncs[0]   # host writes sync (ndarray.from_numpy)
    for _ in range(3):
        doubled(n, x, y)
        steps(n, x, y, 4)
        steps.grad(n, x, y, 4)
    assert syncs[0] == before
    assert doubled._replay is not None and doubled._replay.records[0].n is None   # repeated as recorded
    triangle(n, x, y)
    assert syncs[0] == before
    triangle.grad(n, x, y)            # its depth probe needs the count: it syncs
    assert syncs[0] > before
    assert_close(y.to_numpy(), iterated(7, xv, lambda i: i), 1e-5, "triangle")


def test_adstacks_in_a_storage_buffer_take_the_count_from_the_host(rng, monkeypatch):
    """A buffer holds one stack slice per thread: its size needs the count, so that launch syncs for it."""
    monkeypatch.setenv("SPVAD_ADSTACK_HOME", "buffer")
    xv = rand(rng, N)
    x, y = sp.from_numpy(xv, needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    n = sp.ndarray(sp.i32, ())
    n.fill(9)
    steps(n, x, y, 6)
    y.grad.fill(1.0)
    steps.grad(n, x, y, 6)
    xd = xv.astype(np.float64)
    fd = (iterated(9, xd + 1e-6, lambda i: 6) - iterated(9, xd - 1e-6, lambda i: 6)) / 2e-6
    assert_close(x.grad.to_numpy(), fd, 1e-4, "gradient with buffer-home stacks")


def test_the_counting_module_comes_back_from_the_disk_cache(rng, monkeypatch):
    kernel_module = sys.modules["spvad.kernel"]
    xv = rand(rng, N)
    x, y, n = sp.from_numpy(xv), sp.ndarray(sp.f32, (N,)), sp.from_numpy(np.array(5, np.int32))
    doubled(n, x, y)
    doubled._cache.clear()
    doubled._replay = None

    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the disk cache holds this kernel")
    monkeypatch.setattr(kernel_module, "compile_kernel", refuse)
    y.fill(0.0)
    doubled(n, x, y)
    assert next(iter(doubled._cache.values()))[0].tasks[0].thread_count is not None
    np.testing.assert_array_equal(y.to_numpy()[:6], np.append(2.0 * xv[:5], 0.0).astype(np.float32))

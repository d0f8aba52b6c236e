"""Adstack homes through the public API: Function-scope arrays and per-thread slices of a storage buffer give
bit-identical gradients (forced with SPVAD_ADSTACK_HOME), both match float64 references, `auto` moves
long stacks to the buffer by itself (so loops of 100,000 iterations need no setting and compile fast),
overflow is reported in both homes, and a buffer past maxStorageBufferRange is refused with advice."""
import math
import time

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.launch.device_task import task_on_device
from spvad.spirv.lower_adstack import choose_homes, function_budget_words
from tests import common_kernels


def held_homes(ct):
    """The stack homes the runtime picked for compiled task `ct` at its last launch."""
    held = task_on_device(runtime.get(), ct)
    return held.homes(held.last_spec)


def check_homes(ct, lavapipe_home):
    """The homes of `ct`'s last launch are what this device's budget gives (lavapipe: 256 Function words
    per thread, GPUs 1,024; see lower_adstack.FUNCTION_BUDGET_WORDS), or all in the buffer where the driver
    refused the Function-scope variant; on lavapipe they are `lavapipe_home` for every stack."""
    held = task_on_device(runtime.get(), ct)
    info = runtime.get().device.info
    by_budget = choose_homes(ct.stack_shapes, held.last_spec, function_budget_words(info))
    assert held_homes(ct) in (by_budget, ("buffer",) * len(by_budget))
    assert held_homes(ct) in ct.variants
    if "llvmpipe" in info["name"].lower():
        assert held_homes(ct) == (lavapipe_home,) * len(ct.stack_shapes)

N = 6   # threads: the per-thread slices differ, launches stay small


@pytest.fixture(autouse=True, scope="module")
def default_runtime():
    """No ad_stack_size anywhere: capacities are exact, launch-time or measured."""
    sp.init()
    yield
    sp.reset()


def compiled_task(kernel, *args):
    specs, _, _ = kernel._bind(args)
    return kernel._compiled(specs, "reverse").tasks[0]


def gradients(kernel, args, out, wrt, monkeypatch=None, home=None):
    """Launch the gradient with y.grad = 1 for output `out`; returns [grad of args[k] for k in wrt]."""
    if monkeypatch is not None:
        if home is None:
            monkeypatch.delenv("SPVAD_ADSTACK_HOME", raising=False)
        else:
            monkeypatch.setenv("SPVAD_ADSTACK_HOME", home)
    dev = [sp.from_numpy(a, needs_grad=k in wrt or k == out) if isinstance(a, np.ndarray) else a
           for k, a in enumerate(args)]
    kernel(*dev)
    dev[out].grad.fill(1.0)
    kernel.grad(*dev)
    sp.sync()
    return [dev[k].grad.to_numpy() for k in wrt], dev


def fd_gradients(ref, args, out, wrt, h=1e-6):
    """Central differences of a float64 reference; every y[i] depends on the i-th inputs only."""
    grads = []
    for k in wrt:
        def run(delta):
            a = [np.array(v, np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
                 for v in args]
            a[k] = a[k] + delta
            ref(*a)
            return a[out]
        grads.append((run(h) - run(-h)) / (2 * h))
    return grads


def rand(rng, lo=0.3, hi=1.0, dtype=np.float32):
    return rng.uniform(lo, hi, N).astype(dtype)


# ---- kernels and float64 references --------------------------------------------------------------------
integrate = sp.kernel(common_kernels.integrate)


def integrate_ref(x, w, y, steps):
    for i in range(len(x)):
        v = x[i]
        for _ in range(steps):
            v = v + 0.01 * math.sin(v) * w[i]
        y[i] = v


@sp.kernel
def while_count(x: sp.Array, w: sp.Array, cnt: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while k < cnt[i]:   # depth read from data: measured on the device
            v = v + 0.05 * sp.sin(v * w[i])
            k += 1
        y[i] = v


def while_count_ref(x, w, cnt, y):
    for i in range(len(x)):
        v = x[i]
        for _ in range(cnt[i]):
            v = v + 0.05 * math.sin(v * w[i])
        y[i] = v


@sp.kernel
def while_value(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while v < 3.0 and k < 40:   # depth depends on the values computed
            v = v * 1.2 + 0.1 * w[i]
            k += 1
        y[i] = v * w[i]


def while_value_ref(x, w, y):
    for i in range(len(x)):
        v, k = x[i], 0
        while v < 3.0 and k < 40:
            v, k = v * 1.2 + 0.1 * w[i], k + 1
        y[i] = v * w[i]


@sp.kernel
def flags_and_counts(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        flag = False   # a bool and an int carried from iteration to iteration
        k = 1
        for _ in range(n):
            if flag:
                v = v * 0.8 + w[i] * float(k) * 0.1
            else:
                v = v * 1.5 + 0.1 * w[i]
            if abs(v) > 1.0:
                flag = not flag
                k = k + 1
        y[i] = v


def flags_and_counts_ref(x, w, y, n):
    for i in range(len(x)):
        v, flag, k = x[i], False, 1
        for _ in range(n):
            v = v * 0.8 + w[i] * k * 0.1 if flag else v * 1.5 + 0.1 * w[i]
            if abs(v) > 1.0:
                flag, k = not flag, k + 1
        y[i] = v


@sp.kernel
def nested(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            u = v
            for b in range(m):
                u = u + 0.1 * sp.cos(u * w[i] + float(b))
            v = 0.5 * v + 0.5 * u
        y[i] = v


def nested_ref(x, w, y, n, m):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            u = v
            for b in range(m):
                u = u + 0.1 * math.cos(u * w[i] + b)
            v = 0.5 * v + 0.5 * u
        y[i] = v


CASES = {   # name -> (kernel, reference, make_args(rng), output index, inputs to differentiate)
    "scalar_bound": (integrate, integrate_ref, lambda r: [rand(r), rand(r), np.zeros(N, np.float32), 37], 2, [0, 1]),
    "while_count": (while_count, while_count_ref,
                    lambda r: [rand(r), rand(r), r.integers(0, 30, N).astype(np.int32), np.zeros(N, np.float32)],
                    3, [0, 1]),
    "while_value": (while_value, while_value_ref, lambda r: [rand(r), rand(r), np.zeros(N, np.float32)], 2, [0, 1]),
    "bool_and_int": (flags_and_counts, flags_and_counts_ref,
                     lambda r: [rand(r), rand(r), np.zeros(N, np.float32), 9], 2, [0, 1]),
    "nested": (nested, nested_ref, lambda r: [rand(r), rand(r), np.zeros(N, np.float32), 5, 4], 2, [0, 1]),
    "f64": (integrate, integrate_ref,
            lambda r: [rand(r, dtype=np.float64), rand(r, dtype=np.float64), np.zeros(N), 23], 2, [0, 1]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_homes_give_identical_gradients(name, rng, monkeypatch):
    kernel, ref, make_args, out, wrt = CASES[name]
    args = make_args(rng)
    if name == "f64" and not runtime.get().device.info["features"]["float64"]:
        pytest.skip("the device has no float64")
    by_home = {}
    for home in ("function", "buffer"):
        by_home[home], dev = gradients(kernel, args, out, wrt, monkeypatch, home)
        ct = compiled_task(kernel, *dev)
        assert held_homes(ct) == (home,) * len(ct.stack_shapes) and ct.stack_shapes
    for g_f, g_b in zip(by_home["function"], by_home["buffer"]):
        np.testing.assert_array_equal(g_f, g_b)
    tol = 1e-5 if name == "f64" else 2e-3   # f64 sin is evaluated in f32 on Vulkan
    for g, g_ref in zip(by_home["buffer"], fd_gradients(ref, args, out, wrt)):
        np.testing.assert_allclose(g, g_ref, rtol=tol, atol=tol)


# ---- long loops with no setting: auto picks the buffer ---------------------------------------------------
@sp.kernel
def flow(x: sp.Array, w: sp.Array, cnt: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(cnt[i]):   # cnt[i] Euler steps of v' = w sin(v) over [0, 1]
            v = v + sp.sin(v) * w[i] / float(max(cnt[i], 1))
        y[i] = v


def flow_grad_ref(x, w, cnt):
    """d y / d x and d y / d w per thread, forward mode in float64."""
    gx, gw = np.zeros(len(x)), np.zeros(len(x))
    for i in range(len(x)):
        v, dx, dw, wi = float(x[i]), 1.0, 0.0, float(w[i])
        h = 1.0 / max(int(cnt[i]), 1)
        for _ in range(int(cnt[i])):
            s, c = math.sin(v), math.cos(v)
            dx, dw = dx + h * c * wi * dx, dw + h * (c * wi * dw + s)
            v = v + h * s * wi
        gx[i], gw[i] = dx, dw
    return gx, gw


# llvmpipe (lavapipe) ends every loop of a shader invocation once all its loops together have taken 65,535
# back edges (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, one counter per function): a gradient replays n
# iterations and reverses n more, so past n ~ 32,700 its loops are cut short, silently, in either home.
LAVAPIPE_LOOP_LIMIT = 65535


@pytest.mark.parametrize("steps, home", [(1, "function"), (10, "function"), (1000, "buffer"),
                                         (10_000, "buffer"), (30_000, "buffer"), (100_000, "buffer")])
def test_long_loops_need_no_setting(steps, home, rng, monkeypatch):
    """4 threads, depths up to `steps` read from an array (measured, rounded up to a power of two):
    stacks within the device's budget of Function words stay there, longer ones move to the buffer (the
    `home` column: lavapipe's budget of 256 words), so even the longest compiles in milliseconds.
    Assumes a device that runs 2 x 100,000 loop iterations per thread within seconds."""
    cnt = np.array([steps, steps // 2, 1, steps - 1], np.int32)
    x, w = rng.uniform(0.5, 1.5, 4).astype(np.float32), rng.uniform(0.5, 1.5, 4).astype(np.float32)
    t0 = time.perf_counter()
    if runtime.get().device.info["device_type"] == "cpu" and 2 * steps > LAVAPIPE_LOOP_LIMIT:
        # lavapipe ends loops after 65,535 iterations per invocation (forward + reverse replay here):
        # the kernels detect it and the error says so, instead of a silently wrong gradient
        with pytest.raises(sp.DeviceError, match="stopped a loop"):
            gradients(flow, [x, w, cnt, np.zeros(4, np.float32)], 3, [0, 1], monkeypatch)
        assert time.perf_counter() - t0 < 10.0
        return
    (gx, gw), dev = gradients(flow, [x, w, cnt, np.zeros(4, np.float32)], 3, [0, 1], monkeypatch)
    elapsed = time.perf_counter() - t0
    ct = compiled_task(flow, *dev)
    check_homes(ct, home)
    assert elapsed < 10.0, f"{steps} steps took {elapsed:.1f} s (the Function home would compile for minutes)"
    held = task_on_device(runtime.get(), ct)
    assert min(held.capacity(s) for s in ct.lowered.adstacks) >= steps
    rx, rw = flow_grad_ref(x, w, cnt)
    np.testing.assert_allclose(gx, rx, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(gw, rw, rtol=2e-3, atol=1e-4)


def test_auto_follows_the_launch_capacity(rng, monkeypatch):
    """One compiled kernel, the loop bound a scalar: short launches use Function arrays, long ones the
    buffer (capacity 4,096: past the budget of lavapipe and of GPUs); each variant is lowered once and
    both agree with the reference."""
    monkeypatch.delenv("SPVAD_ADSTACK_HOME", raising=False)
    args = [rand(rng), rand(rng), np.zeros(N, np.float32)]
    for steps, home in ((16, "function"), (3000, "buffer"), (20, "function")):
        (gx, gw), dev = gradients(integrate, args + [steps], 2, [0, 1])
        ct = compiled_task(integrate, *dev)
        check_homes(ct, home)
        fx, fw = fd_gradients(integrate_ref, args + [steps], 2, [0, 1])
        np.testing.assert_allclose(gx, fx, rtol=5e-3, atol=5e-3)
        np.testing.assert_allclose(gw, fw, rtol=5e-3, atol=5e-3)
    k = len(ct.stack_shapes)
    assert set(ct.variants) <= {("function",) * k, ("buffer",) * k}


# ---- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("home", ["function", "buffer"])
def test_small_ad_stack_size_overflows_in_both_homes(home, rng, monkeypatch):
    @sp.kernel(ad_stack_size=8)
    def small(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
        for i in range(x.shape[0]):
            v = x[i]
            for _ in range(steps):
                v = v + 0.01 * sp.sin(v) * w[i]
            y[i] = v

    args = [rand(rng), rand(rng), np.zeros(N, np.float32)]
    with pytest.raises(sp.AdStackOverflowError, match=r"small.*ad_stack_size>=20"):
        gradients(small, args + [20], 2, [0, 1], monkeypatch, home)
    (gx, _), _ = gradients(small, args + [8], 2, [0, 1], monkeypatch, home)   # fits: usable again
    np.testing.assert_allclose(gx, fd_gradients(integrate_ref, args + [8], 2, [0])[0], rtol=1e-3, atol=1e-3)


def test_heap_past_max_storage_buffer_range_is_refused(rng, monkeypatch):
    @sp.kernel(ad_stack_size=1 << 20)
    def huge(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
        for i in range(x.shape[0]):
            v = x[i]
            for _ in range(steps):
                v = v + 0.01 * sp.sin(v) * w[i]
            y[i] = v

    limit = runtime.get().device.info["limits"]["max_storage_buffer_range"]
    threads = limit // (4 << 20) + 1   # 4 MiB of stack per thread
    x = sp.from_numpy(np.full(threads, 0.5, np.float32), needs_grad=True)
    w = sp.from_numpy(np.ones(threads, np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (threads,), needs_grad=True)
    monkeypatch.delenv("SPVAD_ADSTACK_HOME", raising=False)
    with pytest.raises(sp.DeviceError, match=r"huge.*bytes.*maxStorageBufferRange.*fewer threads.*ad_stack_size"):
        huge.grad(x, w, y, 3)
    sp.sync()
    x1 = sp.from_numpy(np.full(2, 0.5, np.float32), needs_grad=True)   # fewer threads: fine
    w1 = sp.from_numpy(np.ones(2, np.float32), needs_grad=True)
    y1 = sp.ndarray(sp.f32, (2,), needs_grad=True)
    y1.grad.fill(1.0)
    huge.grad(x1, w1, y1, 3)
    sp.sync()
    assert np.all(x1.grad.to_numpy() > 1.0)


def test_unknown_home_is_an_error(rng, monkeypatch):
    with pytest.raises(sp.SpvadError, match="SPVAD_ADSTACK_HOME"):
        gradients(integrate, [rand(rng), rand(rng), np.zeros(N, np.float32), 3], 2, [0], monkeypatch, "shared")

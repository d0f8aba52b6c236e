"""Adstacks of gradient kernels: capacities (exact at compile time, spec constants at launch, measured on
the device, or a fixed `ad_stack_size`), overflow reporting, bool stacks, the emitted SPIR-V, and activity
(no gradient work and nothing pushed for inactive arrays and values)."""
import math
import re

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.ir import nodes as N
from spvad.launch.device_task import task_on_device
from spvad.spirv import tools

from adcheck import check_grad, positive, rand

N_THREADS = 16


def compiled(kernel, *args, mode="reverse"):
    specs, _, _ = kernel._bind(args)
    return kernel._compiled(specs, mode)


def stacks_of(kernel, *args):
    """The AdStackAllocas of every gradient task, as lowered (flag bit k <-> stacks[k])."""
    return [s for t in compiled(kernel, *args).tasks for s in t.lowered.adstacks]


def count_stacks_in_ir(kernel, *args):
    return sum(isinstance(s, N.AdStackAlloca) for t in compiled(kernel, *args).ir.tasks for s in N.walk(t.body))


# ---- exact capacities for constant bounds --------------------------------------------------------------
@sp.kernel
def constant_bounds(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(4):
            for b in range(a):   # triangular: at most 3 trips
                v = v + 0.1 * sp.sin(v * w[i])
            if v > 0.5:
                v = v * 0.9
        for k in range(2, 12, 2):   # 5 trips
            v = v * w[i] + 0.05
        y[i] = v


def constant_bounds_ref(x, w, y):
    for i in range(len(x)):
        v = x[i]
        for a in range(4):
            for b in range(a):
                v = v + 0.1 * math.sin(v * w[i])
            if v > 0.5:
                v = v * 0.9
        for k in range(2, 12, 2):
            v = v * w[i] + 0.05
        y[i] = v


def test_constant_bounds_give_exact_capacities(rng):
    args = [rand(rng, N_THREADS), rand(rng, N_THREADS, 0.5, 1.2), np.zeros(N_THREADS, np.float32)]
    dev = check_grad(constant_bounds, constant_bounds_ref, args, [2], [0, 1], rng)
    stacks = stacks_of(constant_bounds, *dev)
    assert all(s.capacity_spec_id is None for s in stacks)
    # loop b, loop a, loop k (the if keeps its snapshot in plain slots: one execution at a time)
    assert sorted(s.capacity for s in stacks) == [3, 4, 5]


# ---- capacities from scalar arguments and shapes, at launch --------------------------------------------
@sp.kernel
def launch_bounds(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(w.shape[0] - a):
                v = v + 0.05 * w[b] * sp.cos(v)
        y[i] = v


def launch_bounds_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for b in range(len(w) - a):
                v = v + 0.05 * w[b] * math.cos(v)
        y[i] = v


def test_launch_time_capacities_from_scalars_and_shapes(rng):
    for n, m in ((3, 4), (11, 13)):
        args = [rand(rng, N_THREADS), rand(rng, m), np.zeros(N_THREADS, np.float32), n]
        dev = check_grad(launch_bounds, launch_bounds_ref, args, [2], [0, 1], rng)   # syncs: no overflow
        ct = compiled(launch_bounds, *dev).tasks[0]
        assert all(s.capacity_spec_id is not None for s in ct.lowered.adstacks)
        caps = sorted(task_on_device(runtime.get(), ct).capacity(s) for s in ct.lowered.adstacks)
        # loop a: n trips; loop b: at most shape(w) trips; launch-time sizes round up to powers of two (loop b
        # keeps the values its reverse needs instead of v, which costs less than recomputing cos and sin:
        # autodiff/store_or_recompute.py)
        assert set(caps) == {1 << (n - 1).bit_length(), 1 << (m - 1).bit_length()}, caps


# ---- data-dependent depths: measured on the device (or a fixed ad_stack_size) -----------------------------
def make_while_kernel(ad_stack_size=None):
    @sp.kernel(ad_stack_size=ad_stack_size)
    def grow(x: sp.Array, w: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            v = x[i]
            while v < 4.0:   # trip count depends on the data
                v = v * 1.25 + 0.1 * w[i] * w[i]
            y[i] = v
    return grow


def grow_ref(x, w, y):
    for i in range(len(x)):
        v = x[i]
        while v < 4.0:
            v = v * 1.25 + 0.1 * w[i] * w[i]
        y[i] = v


def grow_trips(x, w):
    trips = []
    for xi, wi in zip(x.astype(np.float64), w.astype(np.float64)):
        v, k = xi, 0
        while v < 4.0:
            v, k = v * 1.25 + 0.1 * wi * wi, k + 1
        trips.append(k)
    return np.array(trips)


def grow_args(rng):
    return [positive(rng, N_THREADS, 0.1, 1.0), rand(rng, N_THREADS), np.zeros(N_THREADS, np.float32)]


@sp.kernel
def array_bound(x: sp.Array, cnt: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(cnt[i]):
            v = sp.sin(v) * 1.1 + 0.1
        y[i] = v


def array_bound_ref(x, cnt, y):
    for i in range(len(x)):
        v = x[i]
        for _ in range(cnt[i]):
            v = math.sin(v) * 1.1 + 0.1
        y[i] = v


def test_data_dependent_depths_are_measured(rng):
    grow = make_while_kernel()
    args = grow_args(rng)
    dev = check_grad(grow, grow_ref, args, [2], [0, 1], rng)
    assert compiled(grow, *dev).tasks[0].stack_sizes.measured
    cnt = rng.integers(1, 40, N_THREADS).astype(np.int32)
    dev = check_grad(array_bound, array_bound_ref, [rand(rng, N_THREADS), cnt, np.zeros(N_THREADS, np.float32)],
                     [2], [0], rng)
    ct = compiled(array_bound, *dev).tasks[0]
    assert ct.stack_sizes.measured and all(task_on_device(runtime.get(), ct).capacity(s) >= cnt.max() for s in ct.lowered.adstacks)


def test_overflow_raises_at_sync_with_sufficient_size(rng):
    """All 16 threads overflow a 4-entry stack: one error at the next sync, naming the kernel and a size
    that works; the runtime stays usable and that size gives the right gradient."""
    args = grow_args(rng)
    need = grow_trips(args[0], args[1]).max()
    assert need > 4 and (grow_trips(args[0], args[1]) > 4).sum() > 1
    small = make_while_kernel(ad_stack_size=4)
    x = sp.from_numpy(args[0], needs_grad=True)
    w = sp.from_numpy(args[1], needs_grad=True)
    y = sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True)
    assert {s.capacity for s in stacks_of(small, x, w, y)} == {4}
    small(x, w, y)
    y.grad.fill(1.0)
    small.grad(x, w, y)   # asynchronous: the error comes at the next synchronisation
    with pytest.raises(sp.AdStackOverflowError, match=r"grow.*ad_stack_size>=(\d+)") as err:
        sp.sync()
    suggested = int(re.search(r"ad_stack_size>=(\d+)", str(err.value)).group(1))
    assert suggested >= need
    sp.sync()   # raised once, not again
    assert np.all(np.isfinite(y.to_numpy()))   # the runtime still works

    x.grad.fill(0.0)
    w.grad.fill(0.0)
    check_grad(make_while_kernel(ad_stack_size=suggested), grow_ref, args, [2], [0, 1], rng)


def test_init_ad_stack_size_applies_when_kernel_sets_none(fresh, rng):
    sp.init(ad_stack_size=3)
    grow = make_while_kernel()
    args = grow_args(rng)
    dev = [sp.from_numpy(args[0], needs_grad=True), sp.from_numpy(args[1], needs_grad=True),
           sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True)]
    assert {s.capacity for s in stacks_of(grow, *dev)} == {3}
    assert {s.capacity for s in stacks_of(make_while_kernel(ad_stack_size=40), *dev)} == {40}   # kernel wins
    grow(*dev)
    dev[2].grad.fill(1.0)
    grow.grad(*dev)
    with pytest.raises(sp.AdStackOverflowError, match="ad_stack_size>="):
        dev[0].grad.to_numpy()


# ---- bool stacks ------------------------------------------------------------------------------------------
@sp.kernel
def bool_carried(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        up = x[i] > 0.0
        for k in range(n):
            if up:
                v = v + w[i] * sp.cos(v)
            else:
                v = v * 0.7 - w[i]
            up = v < 0.5   # a loop-carried bool that picks the math
        y[i] = v


def bool_carried_ref(x, w, y, n):
    for i in range(len(x)):
        v, up = x[i], x[i] > 0.0
        for _ in range(n):
            v = v + w[i] * math.cos(v) if up else v * 0.7 - w[i]
            up = v < 0.5
        y[i] = v


def test_bool_stack(rng):
    args = [rand(rng, N_THREADS), rand(rng, N_THREADS, 0.2, 0.8), np.zeros(N_THREADS, np.float32), 7]
    dev = check_grad(bool_carried, bool_carried_ref, args, [2], [0, 1], rng)
    assert any(s.dtype == sp.u1 for s in stacks_of(bool_carried, *dev))


# ---- the emitted SPIR-V --------------------------------------------------------------------------------
def test_gradient_spirv_validates_and_has_flag_and_no_function_array_stride(rng):
    assert sp.runtime.get().validate_spirv   # every module compiled in this suite went through spirv-val
    dev = [sp.from_numpy(rand(rng, N_THREADS), needs_grad=True), sp.from_numpy(rand(rng, N_THREADS),
                                                                              needs_grad=True),
           sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True), 5]
    mods = bool_carried.spirv(*dev, grad=True)
    for mod in [mods] if isinstance(mods, bytes) else mods:
        tools.validate(mod, "bool_carried")
    text = bool_carried.disassemble(*dev, grad=True)
    assert "OpAtomicOr" in text and "OpAtomicUMax" in text
    arrays = set(re.findall(r"(%\S+) = OpTypeArray ", text))
    strided = set(re.findall(r"OpDecorate (%\S+) ArrayStride", text))
    function_vars = re.findall(r"= OpVariable (%\S+) Function", text)
    assert arrays and function_vars
    assert not arrays & strided, "ArrayStride on a Function-scope array type (NVIDIA rejects it)"


# ---- activity: no gradient work for inactive arrays and values --------------------------------------------
@sp.kernel
def mixed(x: sp.Array, w: sp.Array, y: sp.Array, z: sp.Array, cnt: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        c = 0
        acc = 0.0
        for k in range(n):
            v = v * w[i] + 0.1
            c = c + 1            # int counter: reaches only an int output
            acc = acc + sp.sin(v)   # float accumulator: reaches only z (no needs_grad)
        y[i] = v
        z[i] = acc
        cnt[i] = c


def test_inactive_arrays_get_no_grad_bindings(rng):
    x = sp.from_numpy(rand(rng, N_THREADS), needs_grad=True)
    w = sp.from_numpy(rand(rng, N_THREADS))              # no needs_grad
    y = sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True)
    z = sp.ndarray(sp.f32, (N_THREADS,))
    cnt = sp.ndarray(sp.i32, (N_THREADS,))
    bindings = [b for t in compiled(mixed, x, w, y, z, cnt, 4).tasks for b in t.lowered.bindings]
    assert (0, "grad") in bindings and (2, "grad") in bindings
    assert not {(1, "grad"), (3, "grad"), (4, "grad")} & set(bindings)
    # an array with needs_grad that only steers control flow (or reaches y through an int) gets no work
    g = sp.from_numpy(rand(rng, N_THREADS), needs_grad=True)
    assert (1, "grad") not in [b for t in compiled(steered, x, g, y, 4).tasks for b in t.lowered.bindings]


@sp.kernel
def steered(x: sp.Array, g: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            if g[i] > 0.0:                 # g decides, but no value of g reaches y
                v = v * 1.5
            v = v + float(int(g[i] * 3.0))   # through an int: no gradient
        y[i] = v


def test_nothing_pushed_for_inactive_loop_carried_values(rng):
    x = sp.from_numpy(rand(rng, N_THREADS), needs_grad=True)
    w = sp.from_numpy(rand(rng, N_THREADS))
    y = sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True)
    cnt = sp.ndarray(sp.i32, (N_THREADS,))
    z_plain = sp.ndarray(sp.f32, (N_THREADS,))
    # nothing: not c, not acc, and v's reverse (times w) needs no value of v (its stack is never read)
    assert count_stacks_in_ir(mixed, x, w, y, z_plain, cnt, 4) == 0
    assert "sin" not in mixed.ir(x, w, y, z_plain, cnt, 4, grad=True)   # acc is not even recomputed
    z_grad = sp.ndarray(sp.f32, (N_THREADS,), needs_grad=True)
    assert count_stacks_in_ir(mixed, x, w, y, z_grad, cnt, 4) == 1    # now acc is differentiated: v, for cos(v)


@sp.kernel
def counter_steers(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        c = 0
        for k in range(n):
            c = (c + 3) % 4
            if c == 1:              # the counter steers active code: it must be replayed
                v = sp.sin(v) * 2.0
            else:
                v = v * 0.8
        y[i] = v


def counter_steers_ref(x, y, n):
    for i in range(len(x)):
        v, c = x[i], 0
        for _ in range(n):
            c = (c + 3) % 4
            v = math.sin(v) * 2.0 if c == 1 else v * 0.8
        y[i] = v


def test_int_counter_steering_active_code_is_pushed(rng):
    args = [rand(rng, N_THREADS), np.zeros(N_THREADS, np.float32), 9]
    dev = check_grad(counter_steers, counter_steers_ref, args, [1], [0], rng)
    # the counter, or what the reverse loop computes of it (store_or_recompute may keep that instead)
    assert any(not s.dtype.is_float for s in stacks_of(counter_steers, *dev))

"""The depth probe on the IR interpreter: the counting kernel reports, per measured loop, the largest number
of iterations one execution of it ran (over all threads and all executions), exactly as plain Python counts
them on random data, and changes none of the user's arrays; replay_without_writes hands every global write
to its hook."""
import numpy as np
import pytest

import spvad as sp
from spvad.autodiff.depth_probe import build_count_kernel, replay_without_writes
from spvad.autodiff.loop_exits import eliminate_loop_exits
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.ir.verify import verify

F32, I32 = ArraySpec(sp.f32, 1, needs_grad=True), ArraySpec(sp.i32, 1)
SIZE = 19


# ---- kernels and their loops' trip counts in plain Python ------------------------------------------------
# A count is how many times a loop's body starts; a `while` loop's body starts once more than its condition
# holds (the last start finds it false and leaves).
def data_range(x: sp.Array, m: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(m[i]):
            s = s + x[(i + j) % x.shape[0]]
        out[i] = s


def data_range_trips(arrays, scalars):
    x, m = arrays[:2]
    return [[int(m[i]) for i in range(x.size)]]


def while_doubling(x: sp.Array, lim: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        v = abs(x[i])
        while v < lim[i]:
            v = v * 2.0
        out[i] = v


def while_doubling_trips(arrays, scalars):
    x, lim = arrays[:2]
    trips = []
    for i in range(x.size):
        v, k = np.float32(abs(x[i])), 1
        while v < lim[i]:
            v = np.float32(v * np.float32(2.0))
            k += 1
        trips.append(k)
    return [trips]


def break_and_continue(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(n):
            v = x[(i + 2 * j) % x.shape[0]]
            if v < -0.6:
                break
            if v < 0.0:
                continue
            s = s + v
        out[i] = s


def break_and_continue_trips(arrays, scalars):
    (x, _), (n,) = arrays, scalars
    trips = []
    for i in range(x.size):
        k = 0
        for j in range(n):
            k += 1
            if x[(i + 2 * j) % x.size] < -0.6:
                break
        trips.append(k)
    return [trips]


def nested(x: sp.Array, m: sp.Array, lim: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        s = 0.0
        for a in range(m[i]):
            v = abs(x[(i + a) % x.shape[0]])
            k = 0
            while v < lim[i]:
                v = v * 2.0
                k += 1
                if k > a + 2:
                    break
            s = s + v
        out[i] = s


def nested_trips(arrays, scalars):
    """[outer per thread, inner per (thread, outer iteration)]"""
    x, m, lim = arrays[:3]
    outer, inner = [], []
    for i in range(x.size):
        outer.append(int(m[i]))
        for a in range(m[i]):
            v, k, starts = np.float32(abs(x[(i + a) % x.size])), 0, 0
            while True:
                starts += 1
                if not v < lim[i]:
                    break
                v = np.float32(v * np.float32(2.0))
                k += 1
                if k > a + 2:
                    break
            inner.append(starts)
    return [outer, inner]


# (kernel, specs, trips(arrays, scalars): per loop of the kernel (pre-order), its count in each execution)
CASES = [
    (data_range, [F32, I32, F32], data_range_trips),
    (while_doubling, [F32, ArraySpec(sp.f32, 1), F32], while_doubling_trips),
    (break_and_continue, [F32, F32, sp.i32], break_and_continue_trips),
    (nested, [F32, I32, ArraySpec(sp.f32, 1), F32], nested_trips),
]
IDS = [c[0].__name__ for c in CASES]


def random_inputs(rng, specs):
    """x: non-zero floats of both signs; m: counts 0..8; lim: 0.5..40.5; n: 3..8; outputs: garbage."""
    arrays, scalars, floats = [], [], 0
    for spec in specs:
        if not isinstance(spec, ArraySpec):
            scalars.append(int(rng.integers(3, 9)))
        elif spec.dtype == sp.i32:
            arrays.append(rng.integers(0, 9, SIZE).astype(np.int32))
        else:
            a = rng.uniform(0.05, 1.0, SIZE) * np.where(rng.random(SIZE) < 0.5, -1.0, 1.0)
            arrays.append((a if floats == 0 else np.abs(a) * 40 + 0.5).astype(np.float32))
            floats += 1
    return arrays, scalars


def loops_of(task):
    return [s for s in N.walk(task.body) if isinstance(s, (N.RangeFor, N.While))]


def prepared(fn, specs, eliminated):
    kernel, _, _ = build_kernel(fn, list(specs))
    verify(kernel)
    (task,) = kernel.tasks
    if eliminated:               # as in reverse mode: the probe counts the task with exit flags
        eliminate_loop_exits(task)
    return kernel, task


def run_count(kernel, task, measured, arrays, scalars):
    """Counters after running the counting kernel on copies of `arrays` (checked to stay unchanged)."""
    count, n = build_count_kernel(kernel, task, measured)
    verify(count)
    assert n == max(measured) + 1
    buffers = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    buffers[(len(kernel.arrays), "primal")] = np.zeros(n, np.int32)
    run_kernel(count, buffers, list(scalars))
    for k, a in enumerate(arrays):
        np.testing.assert_array_equal(buffers[(k, "primal")], a, err_msg=f"the probe wrote array {k}")
    return buffers[(len(kernel.arrays), "primal")]


@pytest.mark.parametrize("eliminated", [True, False], ids=["exit_flags", "raw"])
@pytest.mark.parametrize("fn,specs,trips", CASES, ids=IDS)
def test_counts_are_the_largest_trip_counts(fn, specs, trips, eliminated, rng):
    kernel, task = prepared(fn, specs, eliminated)
    loops = loops_of(task)
    measured = {2 * k + 1: loop for k, loop in enumerate(loops)}   # spec ids need not be 0..n-1
    for trial in range(4):
        arrays, scalars = random_inputs(rng, specs)
        counters = run_count(kernel, task, measured, arrays, scalars)
        expected = trips(arrays, scalars)
        assert len(expected) == len(loops)
        for k, per_execution in enumerate(expected):
            assert counters[2 * k + 1] == max(per_execution, default=0), f"loop {k}, trial {trial}"
        assert not counters[0::2].any(), "a counter no loop is measured into was written"
        assert counters.max() > 1


def test_only_measured_loops_are_counted(rng):
    kernel, task = prepared(nested, CASES[3][1], True)
    outer, inner = loops_of(task)
    arrays, _ = random_inputs(rng, CASES[3][1])
    counters = run_count(kernel, task, {0: inner}, arrays, [])
    assert counters.tolist() == [max(nested_trips(arrays, [])[1])]
    counters = run_count(kernel, task, {2: outer}, arrays, [])
    assert counters.tolist() == [0, 0, int(arrays[1].max())]


def test_the_probe_matches_the_kernel_it_measures(rng):
    """The trip counts the kernel itself reports (an int output) are what the probe measures."""
    def counted(x: sp.Array, lim: sp.Array, cnt: sp.Array):
        for i in range(x.shape[0]):
            v = abs(x[i])
            k = 0
            while v < lim[i]:
                v = v * 1.5 + 0.01
                k += 1
            cnt[i] = k
    specs = [F32, ArraySpec(sp.f32, 1), I32]
    kernel, task = prepared(counted, specs, True)
    (loop,) = loops_of(task)
    arrays, _ = random_inputs(rng, [F32, ArraySpec(sp.f32, 1), I32])
    buffers = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    run_kernel(kernel, buffers, [])
    counters = run_count(kernel, task, {0: loop}, arrays, [])
    assert buffers[(2, "primal")].max() > 0
    assert counters[0] == buffers[(2, "primal")].max() + 1


def writes_in_a_loop(x: sp.Array, out: sp.Array, last: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(n):
            v = x[(i + j) % x.shape[0]]
            if v < -0.6:
                break
            s = s + v
            last[i] = s * v
        out[i] = s


WRITES_SPECS = [F32, F32, F32, sp.i32]


def test_replay_hands_every_write_to_its_hook(rng):
    """replay_without_writes with a hook redirecting each write into a shadow array: the replay leaves the
    user's arrays alone and the shadows receive what the kernel itself writes."""
    kernel, task = prepared(writes_in_a_loop, WRITES_SPECS, True)
    writes = [s for s in N.walk(task.body) if isinstance(s, N.GlobalStore)]
    shadows = {a.index: N.ArrayParam(a.name + "_shadow", a.dtype, a.ndim, len(kernel.arrays) + a.index)
               for a in kernel.arrays}
    seen = []

    def redirect(write, m, out):
        seen.append(write)
        out.append(N.GlobalStore(shadows[write.array.index], tuple(m[i] for i in write.indices),
                                 m[write.value]))

    body = replay_without_writes(task.body, {}, on_write=redirect)
    assert seen == writes
    replay = N.Kernel("replay", kernel.arrays + list(shadows.values()), kernel.scalars,
                      [N.Task("replay", task.kind, task.header, task.num_threads, body)])
    verify(replay)
    arrays, scalars = random_inputs(rng, WRITES_SPECS)
    arrays[1][:] = arrays[2][:] = 7.0       # the shadows start as 7 too (`last` keeps it where j=0 breaks)
    expected = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    run_kernel(kernel, expected, scalars)
    got = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    got.update({(s.index, "primal"): np.full_like(arrays[k], 7) for k, s in shadows.items()})
    run_kernel(replay, got, scalars)
    for k, a in enumerate(arrays):
        np.testing.assert_array_equal(got[(k, "primal")], a)
        if any(w.array.index == k for w in writes):
            np.testing.assert_array_equal(got[(shadows[k].index, "primal")], expected[(k, "primal")])
            assert (expected[(k, "primal")] != 7.0).any()

"""Driver limits that would otherwise give silently wrong numbers are reported as errors."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.spirv.lower import LOOP_CHECK_SPEC_ID


@sp.kernel
def nested_sum(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(n):
                v = v + 0.001
        y[i] = v


def loop_cap():
    return runtime.get().device.info["limits"].get("max_loop_iterations", 0)


def test_loops_within_the_cap_run_exactly(rng):
    x = sp.from_numpy(rng.uniform(1, 2, 4).astype(np.float32))
    y = sp.ndarray(sp.f32, 4)
    nested_sum(x, y, 40)
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() + 1600 * 0.001, rtol=1e-4)


def test_a_loop_cut_short_by_the_driver_raises_and_the_runtime_recovers(rng):
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    n = int(np.ceil(np.sqrt(cap))) + 10          # n*n inner iterations exceed the cap
    x = sp.from_numpy(rng.uniform(1, 2, 4).astype(np.float32))
    y = sp.ndarray(sp.f32, 4)
    nested_sum(x, y, n)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()
    nested_sum(x, y, 10)                          # the runtime stays usable
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() + 100 * 0.001, rtol=1e-5)


def stepped(step):
    """A kernel adding 1 per step of `range(first, last, step)` (a constant step: one kernel per step)."""
    @sp.kernel
    def count_steps(x: sp.Array, first: sp.i32, last: sp.i32):
        for i in range(x.shape[0]):
            v = x[i]
            for _ in range(first, last, step):
                v = v + 1.0
            x[i] = v
    return count_steps


@sp.kernel
def broken_early(x: sp.Array, n: sp.i32, stop: sp.f32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            if v >= stop:
                break
            for _ in range(3):   # a nested loop: its headers count, the break is the outer loop's
                v = v + 0.5
        x[i] = v


@pytest.mark.parametrize("step", [3, -2])
def test_range_loops_count_exactly_at_the_cap(step):
    """Stepped range loops at the cap's edge: trips + 1 loop passes and the check's 2 within the cap run
    exactly, one more trip is flagged (its loop ended, but the check cannot tell), and so is the cap itself;
    so is a range whose i32 span overflows."""
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    kernel, up = stepped(step), step > 0
    x = sp.from_numpy(np.ones(2, np.float32))
    trips = cap - 3                              # passes: trips + 1, then the check's 2
    span = abs(step) * trips
    kernel(x, *((0, span) if up else (span, 0)))
    np.testing.assert_array_equal(x.to_numpy(), 1.0 + trips)
    for low, high in ((0, span + abs(step)), (0, abs(step) * cap), (-2**31 + 7, 2**31 - 7)):
        kernel(x, *((low, high) if up else (high, low)))
        with pytest.raises(sp.DeviceError, match="stopped a loop"):
            sp.sync()


def test_a_range_loop_left_by_break_counts_the_iterations_it_ran():
    """A million-step range loop left after 100 steps is not flagged (counting its bound up front would
    flag it): 100 x (1 + 4) headers."""
    x = sp.from_numpy(np.array([0.0, 99.0], np.float32))
    broken_early(x, 1_000_000, 150.0)
    np.testing.assert_array_equal(x.to_numpy(), [150.0, 150.0])


@sp.kernel
def while_until(x: sp.Array, inc: sp.f32):
    for i in range(x.shape[0]):
        v = x[i]
        while v < 2.0:
            v = v + inc
        x[i] = v


@sp.kernel
def many_short_whiles(x: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            w = 0.0
            while w < 1.0:
                w = w + 0.25
            v += w
        x[i] = v


@sp.func
def steps_to(v, limit, inc):
    k = 0
    while True:
        v = v + inc
        k += 1
        if v >= limit:
            return k


@sp.kernel
def func_loop(x: sp.Array, out: sp.Array, inc: sp.f32):
    for i in range(x.shape[0]):
        out[i] = steps_to(x[i], 2.0, inc)


@pytest.mark.parametrize("run", [
    lambda x, y: while_until(x, 1e-5),           # 100,000 iterations of a `while cond:`
    lambda x, y: many_short_whiles(x, 20000),     # 20,000 loops of 4 iterations: the headers add up
    lambda x, y: func_loop(x, y, 1e-5),           # `while True` left by a return in a func
])
def test_while_loops_past_the_cap_raise(run):
    """The driver's compiler proves a `while`'s exit condition after the loop, so checking it there never
    fires; spvad checks whether the vector's loop limit ran out instead (spirv/lower_loop_cut.py)."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x, y = sp.from_numpy(np.ones(2, np.float32)), sp.ndarray(sp.f32, 2)
    run(x, y)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


def test_while_loops_within_the_cap_run_exactly():
    x = sp.from_numpy(np.ones(2, np.float32))
    while_until(x, 1e-3)
    many_short_whiles(x, 100)
    assert np.all(x.to_numpy() > 2.0 + 99.0)


@sp.kernel
def sum_of_squares17(a0: sp.Array, a1: sp.Array, a2: sp.Array, a3: sp.Array, a4: sp.Array, a5: sp.Array,
                     a6: sp.Array, a7: sp.Array, a8: sp.Array, a9: sp.Array, a10: sp.Array, a11: sp.Array,
                     a12: sp.Array, a13: sp.Array, a14: sp.Array, a15: sp.Array, out: sp.Array):
    for i in range(out.shape[0]):
        out[i] = a0[i] * a0[i] + a1[i] * a1[i] + a2[i] * a2[i] + a3[i] * a3[i] + a4[i] * a4[i] + a5[i] * a5[i] \
            + a6[i] * a6[i] + a7[i] * a7[i] + a8[i] * a8[i] + a9[i] * a9[i] + a10[i] * a10[i] \
            + a11[i] * a11[i] + a12[i] * a12[i] + a13[i] * a13[i] + a14[i] * a14[i] + a15[i] * a15[i]


def test_more_storage_buffers_than_a_stage_binds_is_an_error(rng):
    """16 arrays with gradients: the gradient kernel binds 33 buffers, past lavapipe's 32 per stage, where
    the driver gave zeros (and crashed with two more arrays): a PipelineCreationError instead."""
    limit = runtime.get().device.info["limits"].get("max_storage_buffers_per_stage")
    if limit is None or limit > 32:
        pytest.skip("this device binds more than 32 storage buffers per stage")
    data = [rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(16)]
    arrays = [sp.from_numpy(d, needs_grad=True) for d in data]
    out = sp.ndarray(sp.f32, (8,), needs_grad=True)
    sum_of_squares17(*arrays, out)   # the forward binds 17
    np.testing.assert_allclose(out.to_numpy(), sum(d.astype(np.float64) ** 2 for d in data), rtol=1e-5)
    out.grad.fill(1.0)
    with pytest.raises(sp.PipelineCreationError, match="binds 33 storage buffers .* maxPerStageDescriptorStorageBuffers \\(32\\)"):
        sum_of_squares17.grad(*arrays, out)
    sum_of_squares17(*arrays, out)   # the runtime stays usable
    assert out.to_numpy()[0] > 0


# ---- launches far below the cap are not checked (spirv/loop_cap.py); the others are ----
@sp.kernel
def three_loops(x: sp.Array, n: sp.i32, m: sp.i32, p: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + 1.0
        if v > 0.0:                  # a branch's loop is counted as if taken
            for _ in range(m):
                v = v + 1.0
        for _ in range(p):
            v = v + 1.0
        x[i] = v


@sp.kernel
def triangle(x: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for _ in range(a):       # the inner bound reads the outer index
                v = v + 1.0
        x[i] = v


def counting_choices(kernel):
    """The loop-cap check of every pipeline the kernel's tasks hold (1: checked, 0: not)."""
    rt = runtime.get()
    return sorted({dict(key[-1]).get(LOOP_CHECK_SPEC_ID, 1) for dt in rt.tasks.values()
                   if dt.ct.kernel_name == kernel.name for key in dt.pipelines})


def test_a_replayed_launch_counts_again_when_new_scalars_near_the_cap():
    """A launch replayed with new scalar values (same arrays: the fast path) decides again whether it checks:
    far below the cap it runs the module without the check, near it the checked one, which flags a thread
    past it. The loops' headers add up: three loops each far below the cap, a loop in a branch."""
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(np.ones(2, np.float32))
    three_loops(x, 10, 20, 30)
    np.testing.assert_array_equal(x.to_numpy(), 61.0)
    assert counting_choices(three_loops) == [0]
    for past in ((25_000, 25_000, 25_000), (10, cap + 100, 10)):
        three_loops(x, *past)
        with pytest.raises(sp.DeviceError, match="stopped a loop"):
            sp.sync()
    x = sp.from_numpy(np.ones(2, np.float32))
    three_loops(x, 100, 5, 0)
    three_loops(x, cap - 2000, 0, 0)             # counted, under the cap: runs exactly
    np.testing.assert_array_equal(x.to_numpy(), 1.0 + 105 + cap - 2000)
    assert counting_choices(three_loops) == [0, 1]


@pytest.mark.parametrize("n, flagged", [(200, False), (400, True)])
def test_nested_loops_bounded_by_an_outer_index(n, flagged):
    """n (n - 1) / 2 inner steps plus n (n + 1) / 2 headers: 40,100 at n = 200 (counted, exact), 160,200 at 400."""
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(np.zeros(3, np.float32))
    triangle(x, n)
    if flagged:
        with pytest.raises(sp.DeviceError, match="stopped a loop"):
            sp.sync()
    else:
        np.testing.assert_array_equal(x.to_numpy(), n * (n - 1) // 2)


@sp.kernel
def damped(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(steps):
            v = v + 1e-4 * sp.sin(v) * w[i]
        y[i] = v


def damped_reference(x, w, steps):
    """y and dy/dx, dy/dw in float64 (forward mode)."""
    v, dx, dw = x.astype(np.float64), np.ones(len(x)), np.zeros(len(x))
    w = w.astype(np.float64)
    for _ in range(steps):
        s, c = np.sin(v), np.cos(v)
        dx, dw, v = dx + 1e-4 * c * w * dx, dw + 1e-4 * (c * w * dw + s), v + 1e-4 * s * w
    return v, dx, dw


@pytest.mark.parametrize("steps, counted", [(50, False), (20_000, True)])
def test_a_gradients_loops_count_as_a_forward_and_a_reverse_sweep(steps, counted, rng):
    """A gradient replays the loop forward, then runs it backwards as many trips as the forward counted: both
    sweeps' headers are bounded from `steps` (the reverse one through that trip counter), 102 at 50 steps
    (not counted) and 40,002 at 20,000 (counted, under the cap: exact). At 40,000 the cap is reached: flagged."""
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    xn, wn = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.uniform(0.5, 1.5, 8).astype(np.float32)
    x, w = sp.from_numpy(xn, needs_grad=True), sp.from_numpy(wn, needs_grad=True)
    y = sp.ndarray(sp.f32, (8,), needs_grad=True)
    y.grad.fill(1.0)
    damped.grad(x, w, y, steps)
    _, dx, dw = damped_reference(xn, wn, steps)
    np.testing.assert_allclose(x.grad.to_numpy(), dx, rtol=2e-3)
    np.testing.assert_allclose(w.grad.to_numpy(), dw, rtol=2e-3)
    rt = runtime.get()
    [grad] = [dt for dt in rt.tasks.values() if dt.ct.kernel_name.startswith("damped") and dt.ct.stack_sizes]
    assert (grad.last_spec or {}).get(LOOP_CHECK_SPEC_ID, 1) == int(counted)   # the launch's loop-count step
    damped.grad(x, w, y, 2 * steps if counted else 40_000)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


@sp.kernel
def self_bounded(x: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        k = n
        for _ in range(3):
            k += 1
        for _ in range(k):      # its bound is read once, at entry; the body keeps counting
            k += 2
        x[i] = k


def test_a_loop_bounded_by_the_counter_it_increments_runs_counted():
    """The trip bound of that loop would need itself: unbounded, so the launch counts (no endless recursion)."""
    x = sp.from_numpy(np.zeros(3, np.float32))
    self_bounded(x, 5)
    np.testing.assert_array_equal(x.to_numpy(), 8 + 2 * 8)
    if loop_cap():
        [task] = [dt for dt in runtime.get().tasks.values() if dt.ct.kernel_name.startswith("self_bounded")]
        assert task.ct.loop_check.fixed is True


@pytest.mark.backends
@pytest.mark.parametrize("first, last, step", [(2**31 - 10, 2**31 - 1, 5), (2**31 - 3, 2**31 - 1, 1),
                                               (-2**31 + 9, -2**31, -4), (10, 2**31 - 1, 2**30)])
def test_a_range_ends_where_its_next_index_would_leave_i32(first, last, step):
    """Python's range ends there; an i32 index plus the step would wrap back into the range and run ~2**32 / step
    more times (lavapipe's cap flagged it; a GPU would have run them)."""
    kernel = stepped(step)
    x = sp.from_numpy(np.zeros(2, np.float32))
    kernel(x, first, last)
    np.testing.assert_array_equal(x.to_numpy(), len(range(first, last, step)))


@sp.kernel
def up_to_difference(x: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n - m):      # i32 arithmetic wraps: n - m can be a large end
            v = v + 1.0
        x[i] = v


def test_a_loop_end_that_wraps_is_counted():
    """n - m below -2**31 wraps to a large end on the device: the loop runs past the cap, which is flagged,
    not cut short silently (the bound's interval leaves i32, so the launch counts)."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(np.zeros(2, np.float32))
    up_to_difference(x, 30, 10)
    np.testing.assert_array_equal(x.to_numpy(), 20)
    up_to_difference(x, -2**31 + 5, 10)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


@sp.kernel
def bound_from_local_array(x: sp.Array, n: sp.i32, k: sp.i32, big: sp.i32):
    for i in range(x.shape[0]):
        bounds = sp.Vector(2, sp.i32).zero()
        bounds[0] = n
        for j in range(k):
            bounds[(j + 1) % 2] = big   # a run-time index: no LocalStore the bounds could follow
        v = x[i]
        for _ in range(bounds[0]):
            v = v + 1.0
        x[i] = v


def test_a_bound_written_at_a_run_time_index_is_counted():
    """A local array's element stored at a constant index and again at a run-time one: the loop over it is
    not bounded by the first store alone (k = 2 makes it 100,000, past the cap: flagged)."""
    x = sp.from_numpy(np.zeros(2, np.float32))
    bound_from_local_array(x, 10, 1, 100_000)
    np.testing.assert_array_equal(x.to_numpy(), 10)
    if not loop_cap():
        return
    bound_from_local_array(x, 10, 2, 100_000)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


@sp.kernel
def nest_of_single_steps(x: sp.Array, n: sp.i32, one: sp.i32):
    for t in range(x.shape[0]):
        v = x[t]
        for a in range(n):
            for b in range(one):
                for c in range(one):
                    v += 1.0
        x[t] = v


@sp.kernel
def lanes_in_turn(x: sp.Array, n: sp.i32):
    for t in range(x.shape[0]):
        v = x[t]
        mine = n if t == 0 else 0
        theirs = n if t == 1 else 0
        for a in range(mine):
            v += 1.0
        for b in range(theirs):
            v += 1.0
        x[t] = v


@sp.kernel
def break_then_loop(x: sp.Array, n: sp.i32, five: sp.i32, seven: sp.i32):
    for t in range(x.shape[0]):
        v = x[t]
        for a0 in range(n):
            v += 1.0
            for a1 in range(five):
                if v > -1.0:
                    break
                for a2 in range(seven):
                    v += 100.0
        x[t] = v


@pytest.mark.parametrize("run, small, large, want", [
    # lavapipe: 6 steps an outer iteration (c's loop is entered, masked, as b's last pass), not 5
    (lambda x, n: nest_of_single_steps(x, n, 1), 9_000, 12_000, lambda n: [n, n]),
    # one vector of lanes runs both loops: 2 x 40,000 steps, though each lane counts 40,001 of its own
    (lanes_in_turn, 30_000, 40_000, lambda n: [n, n]),
    # 5 steps an outer iteration: a2's loop is passed over masked twice (the branch no lane takes, and a1's
    # last pass after the break)
    (lambda x, n: break_then_loop(x, n, 5, 7), 12_000, 20_000, lambda n: [n, n]),
])
def test_steps_the_driver_takes_for_the_whole_vector_are_counted(run, small, large, want):
    """Each of these was cut short by lavapipe with no error when a thread counted only its own headers (the
    vector takes steps for masked passes and for lanes in turn)."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(np.zeros(2, np.float32))
    run(x, small)
    np.testing.assert_array_equal(x.to_numpy(), want(small))
    x = sp.from_numpy(np.zeros(2, np.float32))
    run(x, large)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


@sp.kernel
def long_inner_then_break(x: sp.Array, n: sp.i32):
    for t in range(x.shape[0]):
        v = x[t]
        for a in range(n):
            v += 1.0
            if v > 10.0:
                break
            for b in range(n):
                v += 2.0
        x[t] = v


def test_a_loop_stopped_inside_another_is_flagged():
    """lavapipe stops b's loop at the cap and then a's at its next pass; values leaving a stopped loop by a
    break are stale: a count of the steps kept beside the loops read 2 at the thread's end, and no error."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(np.zeros(2, np.float32))
    long_inner_then_break(x, 40_000)
    np.testing.assert_array_equal(x.to_numpy(), [80_002, 80_002])
    for n in (65_534, 70_000):   # (65,534: no error and 131,069 when checked at the thread's end only)
        x = sp.from_numpy(np.zeros(2, np.float32))
        long_inner_then_break(x, n)
        with pytest.raises(sp.DeviceError, match="stopped a loop"):
            sp.sync()


@sp.kernel
def running_max(x: sp.Array, y: sp.Array, n: sp.i32):
    for t in range(x.shape[0]):
        for i in range(n):   # y[0], spelled so that its address is not uniform: every lane contends (y[0] itself
            sp.atomic_max(y[t // x.shape[0]], x[t] + sp.f32(i))   # would be one elected lane's: lower_reduce.py)


@pytest.mark.parametrize("threads, exact, flagged", [(1, 30_000, 40_000), (8, 20_000, 30_000)])
def test_compare_exchange_atomics_count_as_loops(threads, exact, flagged, rng):
    """A float atomic_max is a compare-exchange loop, one more loop for the driver (two steps an iteration for
    one thread, three for eight lanes on one address: a failed compare passes again): lavapipe stopped 1 thread
    at 32,767 of 40,000 iterations, 8 at 21,844 of 30,000, with no error."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(rng.uniform(0, 0.5, threads).astype(np.float32))
    y = sp.from_numpy(np.full(1, -1.0, np.float32))
    running_max(x, y, exact)
    np.testing.assert_allclose(y.to_numpy(), [x.to_numpy().max() + exact - 1], rtol=1e-6)
    running_max(x, y, flagged)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()


def test_a_launch_with_compare_exchange_atomics_is_always_checked(rng):
    """Their retries depend on other threads, so no trip bound covers them: even 10 iterations are checked."""
    if not loop_cap():
        pytest.skip("this driver has no loop-iteration cap")
    x = sp.from_numpy(rng.uniform(0, 0.5, 8).astype(np.float32))
    y = sp.from_numpy(np.full(1, -1.0, np.float32))
    running_max(x, y, 10)
    np.testing.assert_allclose(y.to_numpy(), [x.to_numpy().max() + 9], rtol=1e-6)
    assert counting_choices(running_max) == [1]

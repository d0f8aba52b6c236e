"""The global-data-access checker: with `sp.init(debug=True)` and `sp.Tape(loss, validation=True)`, a
launch that reads an array element and later overwrites it raises `sp.AutodiffRuleError` (kernel, array,
source line). The checker is an instrumented kernel run on the device; without debug nothing is
instrumented. Without it, the Tape keeps a copy of what such a launch overwrites and the gradient is right
(the first test); the checker reports the overwrite, e.g. to avoid that memory or to port the program to a
system without checkpoints. A direct `k.grad` keeps nothing: it recomputes from the overwritten array."""
import inspect

import numpy as np
import pytest

import spvad as sp
from spvad import runtime

N = 16


def rand(rng, shape, lo=0.3, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


@sp.kernel
def square_in_place(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]


@sp.kernel
def sum_sin(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += sp.sin(x[i])


@sp.kernel
def square_into(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]


@sp.kernel
def read_then_write_later_task(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.exp(x[i])
    for i in range(x.shape[0]):
        x[i] = y[i] * 0.5


@sp.kernel
def shift_halves(x: sp.Array):
    """Reads the first half, writes the second: no element is both read and written."""
    for i in range(x.shape[0] // 2):
        x[i + x.shape[0] // 2] = x[i] * x[i]


@sp.kernel
def write_then_read(x: sp.Array, y: sp.Array, z: sp.Array):
    """Writes x[i], then reads the value it wrote: allowed (nothing read is overwritten)."""
    for i in range(x.shape[0]):
        x[i] = y[i] * 2.0
        z[i] = x[i] * x[i]


def true_grad(x0):
    """d/dx sum(sin(x^2))."""
    x = x0.astype(np.float64)
    return 2 * x * np.cos(x * x)


def fd_grad(x0, eps=1e-4):
    x = x0.astype(np.float64)
    return np.array([(np.sum(np.sin((x + eps * e) ** 2)) - np.sum(np.sin((x - eps * e) ** 2))) / (2 * eps)
                     for e in np.eye(len(x))])


def run_in_place(x0, validation):
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, validation=validation):
        square_in_place(x)
        sum_sin(x, loss)
    return x.grad.to_numpy()


def line_of(kernel, text):
    src, first = inspect.getsourcelines(kernel.fn)
    return first + next(k for k, line in enumerate(src) if text in line)


def test_without_the_checker_the_tape_keeps_a_copy(rng, debug):
    """The Tape copies x before square_in_place overwrites it, so the gradient replays x[i] * x[i] from the
    old x; a direct k.grad, which keeps nothing, recomputes from the overwritten x (the data access rule)."""
    x0 = rand(rng, N)
    np.testing.assert_allclose(true_grad(x0), fd_grad(x0), rtol=1e-5, atol=1e-6)   # the reference holds
    np.testing.assert_allclose(run_in_place(x0, validation=False), fd_grad(x0), rtol=1e-4, atol=1e-5)
    x = sp.from_numpy(x0, needs_grad=True)
    square_in_place(x)
    x.grad.fill(1.0)
    square_in_place.grad(x)
    assert not np.allclose(x.grad.to_numpy(), 2 * x0, rtol=1e-2), "k.grad read the overwritten x"


def test_the_checker_raises(rng, debug):
    x0 = rand(rng, N)
    with pytest.raises(sp.AutodiffRuleError) as info:
        run_in_place(x0, validation=True)
    msg = str(info.value)
    assert "square_in_place" in msg and "'x'" in msg
    assert f":{line_of(square_in_place, 'x[i] = x[i] * x[i]')}:" in msg
    assert "x[i] = x[i] * x[i]" in msg


def test_the_checker_runs_an_instrumented_kernel(rng, debug):
    x = sp.from_numpy(rand(rng, N), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError):
        with sp.Tape(loss, validation=True):
            square_in_place(x)
            sum_sin(x, loss)
    assert any(key[1].kind == "checked" for key in square_in_place._cache)


def test_violation_across_tasks_of_one_launch(rng, debug):
    """Task 1 reads x[i], task 2 (same launch) overwrites it: the replayed task 1 would read the new x."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match="read_then_write_later_task.*'x'") as info:
        with sp.Tape(loss, validation=True):
            read_then_write_later_task(x, y)
            sum_sin(x, loss)
    assert f":{line_of(read_then_write_later_task, 'x[i] = y[i] * 0.5')}:" in str(info.value)
    # the instrumented launch still computed the primal results
    np.testing.assert_allclose(x.to_numpy(), 0.5 * np.exp(x0.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("case", ["other_array", "other_elements", "write_then_read"])
def test_no_false_alarm(case, rng, debug):
    """Programs that keep the rule pass the checker and get the right gradient."""
    x0 = rand(rng, N)
    y0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.from_numpy(y0, needs_grad=True)
    z = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, validation=True):
        if case == "other_array":
            square_into(x, y)
            sum_sin(y, loss)
        elif case == "other_elements":
            shift_halves(x)
            sum_sin(x, loss)
        else:
            write_then_read(x, y, z)
            sum_sin(z, loss)
    x64, y64, h = x0.astype(np.float64), y0.astype(np.float64), N // 2
    if case == "other_array":
        want, got = true_grad(x0), x.grad.to_numpy()
    elif case == "other_elements":   # x[h + i] = x[i]^2 for i < h; loss = sum(sin(x))
        want = np.concatenate([np.cos(x64[:h]) + true_grad(x0[:h]), np.zeros(N - h)])
        got = x.grad.to_numpy()
    else:                            # z = (2 y)^2; loss = sum(sin(z))
        want, got = 8 * y64 * np.cos(4 * y64 * y64), y.grad.to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_without_debug_nothing_is_instrumented(rng):
    sp.init(debug=False)
    x0 = rand(rng, N)
    got = run_in_place(x0, validation=True)   # no error: the checker needs debug=True
    np.testing.assert_allclose(got, true_grad(x0), rtol=1e-4, atol=1e-5)   # the Tape kept the old x
    assert all(key[1].kind != "checked" for key in square_in_place._cache if key[-1] == runtime.current().serial)
    assert all(key[1].kind != "checked" for key in sum_sin._cache if key[-1] == runtime.current().serial)


def test_the_runtime_stays_usable_after_the_error(rng, debug):
    x0 = rand(rng, N)
    with pytest.raises(sp.AutodiffRuleError):
        run_in_place(x0, validation=True)
    # same runtime, a correct program, validation still on: the right gradient and no stale error
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, validation=True):
        square_into(x, y)
        sum_sin(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), true_grad(x0), rtol=1e-5, atol=1e-6)
    sp.sync()
    # and after a reset the default runtime works too
    sp.reset()
    sp.init()
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        square_into(x, y)
        sum_sin(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), true_grad(x0), rtol=1e-5, atol=1e-6)


@sp.kernel
def accumulate_into_read(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] += x[i] * x[i]


def test_atomic_add_into_a_read_element(rng, debug):
    """`x[i] += f(x[i])` changes an element it read: a replay from the new value would compute f' wrong, so
    the Tape keeps the old x, and the checker reports the overwrite."""
    x0 = rand(rng, N)
    xf = x0.astype(np.float64)
    want = np.cos(xf + xf * xf) * (1 + 2 * xf)

    def run(validation):
        x = sp.from_numpy(x0, needs_grad=True)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        with sp.Tape(loss, validation=validation):
            accumulate_into_read(x)
            sum_sin(x, loss)
        return x.grad.to_numpy()

    np.testing.assert_allclose(run(False), want, rtol=1e-4, atol=1e-5)   # right: the Tape kept the old x
    with pytest.raises(sp.AutodiffRuleError, match="accumulate_into_read.*'x'") as info:
        run(True)
    assert f":{line_of(accumulate_into_read, 'x[i] += x[i] * x[i]')}:" in str(info.value)


def test_aliased_arguments_are_checked(rng, debug):
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError):
        with sp.Tape(loss, validation=True):
            square_into(x, x)     # x[i] = x[i] * x[i] through two parameters
            sum_sin(x, loss)


@sp.kernel
def copy_into(a: sp.Array, b: sp.Array):
    for i in range(a.shape[0]):
        b[i] = a[i]


@sp.kernel
def square_in_place_grad(x_old: sp.Array, x: sp.Array):
    for i in range(x.shape[0]):
        x.grad[i] = 2.0 * x_old[i] * x.grad[i]


def test_launches_of_a_replaced_function_are_not_checked(rng, debug):
    """An in-place update is fine when a hand-written gradient (which knows the old values) replaces the
    generated one: the checker must not raise for the replaced function's launches."""
    x0 = rand(rng, N)
    saved = sp.ndarray(sp.f32, (N,))

    @sp.grad_replaced
    def square_all(x):
        copy_into(x, saved)
        square_in_place(x)

    @sp.grad_for(square_all)
    def square_all_grad(x):
        square_in_place_grad(saved, x)

    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, validation=True):
        square_all(x)
        sum_sin(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), true_grad(x0), rtol=1e-5, atol=1e-6)
    # ... while the ordinary launch after it is still checked
    with pytest.raises(sp.AutodiffRuleError, match="square_in_place"):
        with sp.Tape(loss, validation=True):
            square_all(x)
            square_in_place(x)
            sum_sin(x, loss)


@sp.kernel
def triple_into(y: sp.Array, x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = y[i] * 3.0


def test_overwrite_across_launches_is_checked(rng, debug):
    x = sp.from_numpy(rand(rng, N), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError):
        with sp.Tape(loss, validation=True):
            square_into(x, y)     # reads x
            triple_into(y, x)     # overwrites x: square_into's gradient would recompute from the new x
            sum_sin(x, loss)


@sp.kernel
def bump_counts(c: sp.Array):
    for i in range(c.shape[0]):
        c[i] = c[i] + 1


@sp.kernel
def weigh(x: sp.Array, c: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * float(c[i])


def test_no_false_alarm_for_a_launch_without_gradient(rng, debug):
    """An in-place update of an int array in a launch that has no gradient replays nothing: it passes."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    c = sp.from_numpy(np.arange(N, dtype=np.int32))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, validation=True):
        bump_counts(c)
        weigh(x, c, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), np.arange(N) + 1.0)


@pytest.mark.parametrize("write,call", [("fill", ".fill(...)"), ("from_numpy", ".from_numpy(...)"),
                                        ("setitem", "[...] = value")])
def test_host_write_over_read_elements_is_reported(write, call, rng, debug):
    """sum_sin reads x; a host write to x afterwards is reported, naming the host call, and changes
    nothing; writing elements nothing read (setitem on a fresh array) is fine."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError) as info:
        with sp.Tape(loss, validation=True):
            sum_sin(x, loss)
            if write == "fill":
                x.fill(1.0)
            elif write == "from_numpy":
                x.from_numpy(np.ones(N, np.float32))
            else:
                x[2] = 1.0
    msg = str(info.value)
    assert call in msg and "'x' (kernel sum_sin)" in msg and "global data access rule" in msg
    np.testing.assert_array_equal(x.to_numpy(), x0)   # the refused write did not happen
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    with sp.Tape(loss, validation=True):
        square_into(x, y)
        y[3] = 0.5            # y was only written: no report
        sum_sin(y, loss)

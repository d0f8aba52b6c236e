"""Top-level values read from arrays (`m = n[None]`, `lo, hi = b[0], b[1]`) used as parallel loop bounds and in
loop bodies, with Python's meaning (the arrays' value at the assignment): forward, k.grad, sp.Tape and k.fwd
against float64 numpy on Vulkan and the interpreter (and with debug=True); the value kept across dispatches
that do not write the arrays, a clear CompileError where one does, an ArgumentError where two parameters that
a dispatch writes and reads are bound to one ndarray."""
import inspect

import numpy as np
import pytest

import spvad as sp
from adcheck import assert_close, maybe_debug, rand
from modes import check_modes
from tests.launch.test_array_bounds import count_positive

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N = 12


def count(rng, lo=3, hi=N):
    return np.array(rng.integers(lo, hi), np.int32)


def window(rng):
    lo = int(rng.integers(1, 4))
    return np.array([lo, int(rng.integers(lo + 4, N + 1))], np.int32)


# ---- the kernels and their float64 references ---------------------------------------------------------------
@sp.kernel
def first_m(n: sp.Array, x: sp.Array, w: sp.Array, y: sp.Array):
    m = n[None]
    for i in range(m):
        y[i] = sp.sin(x[i]) * w[i]


def first_m_ref(n, x, w, y):
    m = int(n)
    y[:m] = np.sin(x[:m]) * w[:m]


@sp.kernel
def twice_n(n: sp.Array, x: sp.Array, y: sp.Array):
    m = n[None] * 2
    for i in range(m):
        y[i] = x[i] * x[i] * x[i]


def twice_n_ref(n, x, y):
    m = 2 * int(n)
    y[:m] = x[:m] ** 3


@sp.kernel
def unpacked_window(b: sp.Array, x: sp.Array, y: sp.Array):
    lo, hi = b[0], b[1]
    for i in range(lo, hi):
        y[i] = x[i] * x[lo] + x[hi - 1]   # the values inside the body: a plain read in the loop's task


def unpacked_window_ref(b, x, y):
    lo, hi = int(b[0]), int(b[1])
    y[lo:hi] = x[lo:hi] * x[lo] + x[hi - 1]


@sp.kernel
def weight_in_body(n: sp.Array, x: sp.Array, w: sp.Array, y: sp.Array):
    m, w0 = n[None], w[0]             # a float value read once, used by every thread
    scale = w0 * 2.0 + w[1]
    for i in range(m):
        y[i] = sp.sin(x[i]) * scale + x[i] * w0


def weight_in_body_ref(n, x, w, y):
    m = int(n)
    y[:m] = np.sin(x[:m]) * (w[0] * 2.0 + w[1]) + x[:m] * w[0]


@sp.kernel
def two_dispatches(n: sp.Array, x: sp.Array, mid: sp.Array, y: sp.Array):
    m = n[None]
    for i in range(m):
        mid[i] = sp.exp(x[i] * 0.5)
    for i in range(m):                # the second dispatch: mid is written, n is not
        y[i] = mid[i] * x[i] + mid[m - 1]


def two_dispatches_ref(n, x, mid, y):
    m = int(n)
    mid[:m] = np.exp(x[:m] * 0.5)
    y[:m] = mid[:m] * x[:m] + mid[m - 1]


@sp.kernel
def serial_then_loop(n: sp.Array, x: sp.Array, y: sp.Array, total: sp.Array):
    total[None] = x[0] * 2.0          # a serial task...
    m = n[None]                       # ...holding the assignment
    total[None] += x[m]
    for i in range(m):                # a later dispatch: reads n again
        y[i] = x[i] * x[m]


def serial_then_loop_ref(n, x, y, total):
    m = int(n)
    total[()] = x[0] * 2.0 + x[m]
    y[:m] = x[:m] * x[m]


CASES = {   # name -> (kernel, reference, make_args(rng), outputs, inputs to differentiate)
    "first_m": (first_m, first_m_ref, lambda r: [count(r), rand(r, N), rand(r, N), np.zeros(N, np.float32)],
                [3], [1, 2]),
    "twice_n": (twice_n, twice_n_ref, lambda r: [count(r, 2, N // 2), rand(r, N), np.zeros(N, np.float32)],
                [2], [1]),
    "unpacked_window": (unpacked_window, unpacked_window_ref, lambda r: [window(r), rand(r, N),
                                                                        np.zeros(N, np.float32)], [2], [1]),
    "weight_in_body": (weight_in_body, weight_in_body_ref,
                       lambda r: [count(r), rand(r, N), rand(r, 2), np.zeros(N, np.float32)], [3], [1, 2]),
    "two_dispatches": (two_dispatches, two_dispatches_ref,
                       lambda r: [count(r), rand(r, N), np.zeros(N, np.float32), np.zeros(N, np.float32)], [2, 3],
                       [1]),
    "serial_then_loop": (serial_then_loop, serial_then_loop_ref,
                         lambda r: [count(r, 3, N - 1), rand(r, N), np.zeros(N, np.float32),
                                    np.zeros((), np.float32)], [2, 3], [1]),
}


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_grad_tape_and_forward_mode(name, debug, rng):
    kernel, ref, make_args, outs, wrt = CASES[name]
    with maybe_debug(debug):
        check_modes(kernel, ref, make_args(rng), outs, wrt, rng)


# ---- the value at the assignment ------------------------------------------------------------------------------
@sp.kernel
def kept_in_its_task(x: sp.Array, y: sp.Array):
    x[0] = 5.0
    s = x[0]              # 5, though x[0] is written again below in the same serial task
    x[0] = 7.0
    y[0] = s
    y[1] = x[0]


@sp.kernel
def bumped(n: sp.Array, y: sp.Array, last: sp.Array):
    c = n[None]
    for i in range(c):
        y[i] = sp.cast(c, sp.f32)
    n[None] = c + 1       # a later serial task: reads n at its start, before it writes it...
    last[None] = c        # ...so this is still the value at the assignment


@sp.kernel
def set_then_read(n: sp.Array, y: sp.Array):
    n[None] = 4           # before the assignment, in its task: the value read is this one
    m = n[None]
    for i in range(m):
        y[i] = 1.0


@sp.kernel
def rebound(n: sp.Array, y: sp.Array):
    m = 3
    y[0] = m
    m = n[None]
    y[1] = m
    n[None] = 9
    y[2] = m              # the value read before n was written


def test_the_value_is_the_arrays_at_the_assignment():
    x, y = sp.from_numpy(np.array([1.0, 2.0], np.float32)), sp.ndarray(sp.f32, (2,))
    kept_in_its_task(x, y)
    np.testing.assert_array_equal(y.to_numpy(), [5.0, 7.0])
    n, z, last = sp.from_numpy(np.array(3, np.int32)), sp.ndarray(sp.f32, (N,)), sp.ndarray(sp.i32, ())
    for k in range(3):    # the same arrays again (a replay): each launch reads n as the last left it
        bumped(n, z, last)
        np.testing.assert_array_equal(z.to_numpy()[:3 + k], 3 + k)
        assert last[None] == 3 + k
    assert n[None] == 6
    z.fill(0.0)
    set_then_read(n, z)
    np.testing.assert_array_equal(z.to_numpy()[:6], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    r = sp.ndarray(sp.f32, (3,))
    rebound(sp.from_numpy(np.array(4, np.int32)), r)
    np.testing.assert_array_equal(r.to_numpy(), [3.0, 4.0, 4.0])


@sp.kernel
def constants_in_order(y: sp.Array):
    m = 3
    y[0] = m
    m = 4                 # a top-level value bound again: statements before see the first one
    y[1] = m


def test_top_level_values_bind_in_statement_order():
    y = sp.ndarray(sp.f32, (2,))
    constants_in_order(y)
    np.testing.assert_array_equal(y.to_numpy(), [3.0, 4.0])   # was [4, 4]: every value bound before the task


# ---- whole programs: a Tape over kernels, the count written on the device and by the host ------------------------
@sp.kernel
def cubes_of_first(n: sp.Array, x: sp.Array, loss: sp.Array):
    m = n[None]
    for i in range(m):
        loss[None] += x[i] * x[i] * x[i] * x[m]


def test_a_tape_over_kernels_with_the_count_written_on_the_device_and_by_the_host(rng):
    xv = rand(rng, N)
    x, n = sp.from_numpy(xv, needs_grad=True), sp.ndarray(sp.i32, ())
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        count_positive(x, n)          # k = number of positive x, on the device
        cubes_of_first(n, x, loss)    # reads it there: no sync in between
        n.fill(2)                     # rewritten by the host...
        cubes_of_first(n, x, loss)    # ...and read again
        n.fill(0)                     # overwritten after its last use: the gradients keep what they saw
    k = int((xv > 0).sum())

    def total(v):
        return np.sum(v[:k] ** 3) * v[k] + np.sum(v[:2] ** 3) * v[2]
    xd = xv.astype(np.float64)
    assert_close(loss.to_numpy(), total(xd), 1e-5, "loss")
    fd = np.array([(total(xd + 1e-6 * e) - total(xd - 1e-6 * e)) / 2e-6 for e in np.eye(N)])
    assert np.any(fd != 0)
    assert_close(x.grad.to_numpy(), fd, 1e-4, "gradient through a count read at the top level")


# ---- refusals --------------------------------------------------------------------------------------------------
def written_by_an_earlier_loop(n: sp.Array, y: sp.Array):
    m = n[None]
    for i in range(y.shape[0]):
        sp.atomic_add(n[None], 1)
    for i in range(m):
        y[i] = 1.0


def written_after_it_in_its_task(n: sp.Array, y: sp.Array):
    m = n[None]
    n[None] = 0
    for i in range(m):
        y[i] = 1.0


def written_beside_its_use(n: sp.Array, y: sp.Array):
    m = n[None]
    for i in range(y.shape[0]):
        y[i] = sp.cast(m, sp.f32)
        n[None] = i


REFUSED = {   # kernel -> (the write's source text, what the message says of it at its line)
    written_by_an_earlier_loop: ("sp.atomic_add(n[None], 1)", "line {} writes 'n' before this dispatch"),
    written_after_it_in_its_task: ("n[None] = 0", "line {} writes 'n' before this dispatch"),
    written_beside_its_use: ("n[None] = i", "this loop writes 'n' at line {} while its threads read it"),
}


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("fn", list(REFUSED), ids=[f.__name__ for f in REFUSED])
def test_a_write_between_the_assignment_and_a_use_is_a_compile_error(fn):
    write, said = REFUSED[fn]
    n, y = sp.from_numpy(np.array(3, np.int32)), sp.from_numpy(np.full(4, -1.0, np.float32))
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(fn)(n, y)
    text = str(info.value)
    assert f"'m' holds 'n' as it was at line {line_of(fn, 'm = n[None]')} (`m = n[None]`)" in text, text
    assert said.format(line_of(fn, write)) in text and "or pass it as a scalar argument" in text, text
    assert (y.to_numpy() == -1.0).all() and n[None] == 3   # nothing ran


@sp.kernel
def counted_elsewhere(n: sp.Array, c: sp.Array, y: sp.Array):
    m = n[None]
    for i in range(y.shape[0]):
        sp.atomic_add(c[None], 1)     # another array of n's kind: the launch checks they differ
    for i in range(m):
        y[i] = 2.0


@sp.kernel
def bound_and_counter(n: sp.Array, c: sp.Array):
    for i in range(n[None]):
        sp.atomic_add(c[None], 1)


def test_one_ndarray_bound_to_a_read_and_a_written_parameter_is_an_argument_error():
    n, c, y = sp.from_numpy(np.array(3, np.int32)), sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, (5,))
    counted_elsewhere(n, c, y)        # two arrays: fine
    np.testing.assert_array_equal(y.to_numpy(), [2.0, 2.0, 2.0, 0.0, 0.0])
    assert c[None] == 5
    with pytest.raises(sp.ArgumentError, match="one ndarray is bound to both 'n' and 'c'.*'m' holds 'n'"):
        counted_elsewhere(n, n, y)
    bound_and_counter(n, c)
    assert c[None] == 8
    with pytest.raises(sp.ArgumentError, match="bound to both 'n' and 'c'.*reads its bounds from 'n'"):
        bound_and_counter(n, n)
    assert n[None] == 3 and c[None] == 8   # nothing ran, and the runtime goes on
    counted_elsewhere(n, c, y)
    assert c[None] == 13

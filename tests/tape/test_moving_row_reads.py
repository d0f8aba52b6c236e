"""A time step that writes row t + 1 of an array and reads row t again afterwards reads nothing the launch
changes: its gradient reads row t as the launch found it, under a Tape over several steps. Where another
thread may write what a thread reads (a thread-varying index) the gradient is still refused. Against
float64 central differences on random inputs, on Vulkan, the interpreter and debug=True."""
import numpy as np
import pytest

import spvad as sp
from tests.tape.test_dispatch_states import fd, rand

pytestmark = pytest.mark.backends
N, T = 5, 4   # threads, time steps


@sp.kernel
def step(x: sp.Array, y: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = x[t, i] * 1.5
        y[t + 1, i] = x[t, i] * x[t, i]   # row t again, after the write of row t + 1


def step_np(x, y, t):
    x[t + 1] = x[t] * 1.5
    y[t + 1] = x[t] * x[t]


@sp.kernel
def step_through_local(x: sp.Array, y: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        u = t * 2                          # a uniform base through a local
        x[u + 1, i] = sp.sin(x[u, i]) + 0.5
        y[u + 1, i] = x[u, i] * x[u, i]
        x[u + 2, i] = x[u + 1, i] * x[u, i]   # the row just written (c1 == c2), then the next step's row


def step_through_local_np(x, y, t):
    u = 2 * t
    x[u + 1] = np.sin(x[u]) + 0.5
    y[u + 1] = x[u] * x[u]
    x[u + 2] = x[u + 1] * x[u]


@sp.kernel
def step_reads_a_scalar_row(x: sp.Array, y: sp.Array, t: sp.i32, s: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = x[t, i] * 1.5
        y[t + 1, i] = x[s, i] * x[s, i]   # s == t + 1 at run time: the row just written (no proof it is not)


@sp.kernel
def same_element_again(x: sp.Array, y: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t, i] = sp.sin(x[t, i]) + 0.5
        y[t + 1, i] = x[t, i] * x[t, i]   # c1 == c2: the value just written


def same_element_again_np(x, y, t):
    x[t] = np.sin(x[t]) + 0.5
    y[t + 1] = x[t] * x[t]


@sp.kernel
def neighbour_row(x: sp.Array, y: sp.Array, t: sp.i32):
    for i in range(x.shape[1] - 1):
        x[t, i + 1] = x[t, i] * 1.5        # thread i writes what thread i + 1 reads: really mid-launch
        y[t + 1, i] = x[t, i] * x[t, i]


@sp.kernel
def total(x: sp.Array, y: sp.Array, loss: sp.Array):
    for i in range(x.shape[1]):
        s = 0.0
        for r in range(x.shape[0]):
            s = s + x[r, i] * float(r + 1) + y[r, i]
        loss[None] += s


def total_np(x, y):
    return (x * np.arange(1, x.shape[0] + 1)[:, None]).sum() + y.sum()


def program_np(step_of, rows, steps):
    def loss(x0, y0):
        x, y = x0.copy(), y0.copy()
        for t in steps:
            step_of(x, y, t)
        return total_np(x, y)
    return loss


def check_tape(kernel, loss_of, rows, launches, seed):
    """A Tape over `launches` (argument tuples after x, y) of `kernel`, then `total`: loss and gradients
    against central differences of `loss_of`."""
    rng = np.random.default_rng(seed)
    x0, y0 = rand(rng, (rows, N)), rand(rng, (rows, N))
    x, y = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(y0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for args in launches:
            kernel(x, y, *args)
        total(x, y, loss)
    want = loss_of(x0.astype(np.float64), y0.astype(np.float64))
    np.testing.assert_allclose(loss.to_numpy(), want, rtol=1e-5)
    for got, k in ((x.grad, 0), (y.grad, 1)):
        g = fd(loss_of, (x0, y0), k)
        np.testing.assert_allclose(got.to_numpy(), g, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(g).max()))


def test_time_loop_reads_its_row_after_writing_the_next():
    check_tape(step, program_np(step_np, T + 1, range(T)), T + 1, [(t,) for t in range(T)], seed=1)


def test_uniform_base_through_a_local():
    check_tape(step_through_local, program_np(step_through_local_np, 2 * T + 1, range(T)), 2 * T + 1,
               [(t,) for t in range(T)], seed=2)


def test_row_from_another_scalar_reads_what_the_launch_wrote():
    """x[s] with s == t + 1: no proof that it differs from the row written, so it reads the launch's result."""
    def step_np_s(x, y, t):
        x[t + 1] = x[t] * 1.5
        y[t + 1] = x[t + 1] * x[t + 1]
    check_tape(step_reads_a_scalar_row, program_np(step_np_s, T + 1, range(T)), T + 1,
               [(t, t + 1) for t in range(T)], seed=3)


def test_same_element_written_then_read():
    check_tape(same_element_again, program_np(same_element_again_np, T + 1, range(T)), T + 1,
               [(t,) for t in range(T)], seed=4)


def test_thread_varying_neighbour_is_still_refused():
    rng = np.random.default_rng(5)
    x, y = (sp.from_numpy(rand(rng, (T + 1, N)), needs_grad=True) for _ in range(2))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match=r"neighbour_row: its gradient reads 'x' as it was in the "
                                                   r"middle of the launch"):
        with sp.Tape(loss):
            neighbour_row(x, y, 0)
            total(x, y, loss)

"""A Tape keeps a copy of an array only when a write meets the rows (first-axis indices) a recorded gradient
reads (spvad/ir/rows.py): a time loop over (T + 1, n) arrays, writing row t + 1 while the gradient of step t
reads row t, keeps nothing; a write into the rows read still keeps them. Gradients against float64 central
differences of the same program in numpy."""
import threading

import numpy as np
import pytest

import spvad as sp
from tests.tape.test_program_gradients import check, rand

pytestmark = pytest.mark.backends

N, T, DT = 6, 5, 0.3


@sp.kernel
def advance(x: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = x[t, i] + DT * sp.sin(x[t, i]) * w[i]   # the gradient reads row t


@sp.kernel
def advance_back(x: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t - 1, i] = x[t, i] + DT * sp.sin(x[t, i]) * w[i]   # rows counted down: t - 1 written


@sp.kernel
def in_row(x: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t, i] = x[t, i] * sp.cos(x[t, i] * w[i])            # rewrites the row its gradient reads


@sp.kernel
def gather(x: sp.Array, rows: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[rows[i], i] = x[t, i] + DT * sp.sin(x[t, i]) * w[i]   # written rows known only on the device


@sp.kernel
def row_loss(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i]


def _steps_np(x, w, steps):
    for _ in range(steps):
        x = x + DT * np.sin(x) * w
    return x


def _arrays(rng):
    inputs = {"x": rand(rng, N), "w": rand(rng, N)}
    x0 = np.zeros((T + 1, N), np.float32)
    x0[0] = inputs["x"]
    return inputs, sp.from_numpy(x0, needs_grad=True), sp.from_numpy(inputs["w"], needs_grad=True), \
        sp.ndarray(sp.f32, (), needs_grad=True)


def test_time_loop_keeps_nothing(rng):
    inputs, x, w, loss = _arrays(rng)
    with sp.Tape(loss) as tape:
        for t in range(T):
            advance(x, w, t)
        row_loss(x, loss, T)
    assert tape.checkpoint_bytes == 0

    def loss_of(p):
        return np.sum(_steps_np(p["x"], p["w"], T) ** 2)

    np.testing.assert_allclose(loss[None], loss_of(inputs), rtol=1e-5)
    check(x.grad.to_numpy()[0], loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


def test_rows_counted_down_keep_nothing(rng):
    inputs, x, w, loss = _arrays(rng)
    x.from_numpy(x.to_numpy()[::-1].copy())   # the start in the last row
    with sp.Tape(loss) as tape:
        for t in range(T, 0, -1):
            advance_back(x, w, t)
        row_loss(x, loss, 0)
    assert tape.checkpoint_bytes == 0

    def loss_of(p):
        return np.sum(_steps_np(p["x"], p["w"], T) ** 2)

    check(x.grad.to_numpy()[T], loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


def test_a_write_into_rows_read_keeps_them(rng):
    """advance reads row t and writes t + 1; in_row then rewrites row t + 1, which the gradient of the next
    advance reads: each in_row launch keeps a copy of that row (only), and the gradients stay right."""
    inputs, x, w, loss = _arrays(rng)
    with sp.Tape(loss) as tape:
        for t in range(T):
            advance(x, w, t)
            in_row(x, w, t + 1)
        row_loss(x, loss, T)
    assert tape.checkpoint_bytes == T * x.to_numpy()[0].nbytes

    def loss_of(p):
        x = p["x"]
        for _ in range(T):
            x = x + DT * np.sin(x) * p["w"]
            x = x * np.cos(x * p["w"])
        return np.sum(x * x)

    check(x.grad.to_numpy()[0], loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


def test_rows_known_only_on_the_device_keep_a_copy(rng):
    inputs, x, w, loss = _arrays(rng)
    with sp.Tape(loss) as tape:
        for t in range(T):
            gather(x, sp.from_numpy(np.full(N, t + 1, np.int32)), w, t)
        row_loss(x, loss, T)
    assert tape.checkpoint_bytes > 0   # every write may meet the rows read: copies, as before rows

    def loss_of(p):
        return np.sum(_steps_np(p["x"], p["w"], T) ** 2)

    check(x.grad.to_numpy()[0], loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


@pytest.mark.parametrize("row, kept", [(T, 0), (0, 1)])
def test_a_host_write_keeps_the_row_it_meets(rng, row, kept):
    """`x[row, 0] = 5.0` after the first step: row T (written again by the last step) meets no row a gradient
    reads and keeps nothing; row 0 (which the first step's gradient reads) keeps that row, not the array. The
    loss never sees either write, and the gradients stay right."""
    inputs, x, w, loss = _arrays(rng)
    with sp.Tape(loss) as tape:
        advance(x, w, 0)
        x[row, 0] = 5.0
        for t in range(1, T):
            advance(x, w, t)
        row_loss(x, loss, T)
    assert tape.checkpoint_bytes == kept * x.to_numpy()[0].nbytes

    def loss_of(p):
        return np.sum(_steps_np(p["x"], p["w"], T) ** 2)

    check(x.grad.to_numpy()[0], loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


def test_a_write_the_tape_did_not_see_is_an_error(rng):
    """Another thread writes a row nobody's gradient reads between two recorded steps: the Tape cannot vouch
    for the contents it left in place, so the backward pass refuses instead of guessing."""
    inputs, x, w, loss = _arrays(rng)
    with pytest.raises(sp.AutodiffRuleError, match="did not record"):
        with sp.Tape(loss):
            advance(x, w, 0)
            other = threading.Thread(target=lambda: advance(x, w, 3))   # not recorded: another thread
            other.start()
            other.join()
            advance(x, w, 1)
            row_loss(x, loss, 2)

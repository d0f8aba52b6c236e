"""One Tape object entered again and again (a training loop that makes its Tape once): each `with` block is a
new recording, with the gradients of that block alone. Entering a Tape that is recording is refused."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends
N, STEPS = 16, 3


@sp.kernel
def advance(x: sp.Array, v: sp.Array, y: sp.Array, dt: float):
    for i in range(x.shape[0]):
        y[i] = x[i] + dt * v[i] * sp.sin(x[i])


@sp.kernel
def squared(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


def closed_form(x, v, dt):
    """loss = sum (x + dt v sin x)^2 and its gradients, in float64."""
    x, v = x.astype(np.float64), v.astype(np.float64)
    y = x + dt * v * np.sin(x)
    return (y * y).sum(), 2 * y * (1 + dt * v * np.cos(x)), 2 * y * dt * np.sin(x)


def test_a_tape_entered_again_records_each_block_alone(rng):
    x = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    v = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    tape = sp.Tape(loss=loss)
    for step in range(STEPS):
        xs = rng.uniform(-1, 1, N).astype(np.float32)
        x.from_numpy(xs)   # a new input every iteration, as in training
        dt = 0.1 * (step + 1)
        with tape:
            advance(x, v, y, dt)
            squared(y, loss)
        want_loss, want_dx, want_dv = closed_form(xs, v.to_numpy(), dt)
        np.testing.assert_allclose(loss.to_numpy(), want_loss, rtol=1e-5)
        np.testing.assert_allclose(x.grad.to_numpy(), want_dx, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(v.grad.to_numpy(), want_dv, rtol=1e-4, atol=1e-6)
        assert len(tape.entries) == 2   # this block's launches only


def test_a_reentered_tape_keeps_no_copies_of_an_earlier_block(rng):
    """The earlier block kept a copy of `y` (overwritten in place); the next block's gradients use its own."""
    x = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    v = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    tape = sp.Tape(loss=loss)
    for _ in range(2):
        with tape:
            advance(x, v, y, 0.1)
            squared(y, loss)
            advance(x, v, y, 0.2)   # y overwritten after squared read it: the Tape keeps a copy
        assert tape.checkpoint_bytes > 0
        _, want_dx, want_dv = closed_form(x.to_numpy(), v.to_numpy(), 0.1)
        np.testing.assert_allclose(x.grad.to_numpy(), want_dx, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(v.grad.to_numpy(), want_dv, rtol=1e-4, atol=1e-6)


def test_entering_a_recording_tape_is_refused(rng):
    x = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    tape = sp.Tape(loss=loss)
    with tape:
        with pytest.raises(sp.ArgumentError, match="recording already"):
            with tape:
                pass
        squared(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x.to_numpy().astype(np.float64), rtol=1e-5)
    with tape:   # and it is usable again afterwards
        squared(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x.to_numpy().astype(np.float64), rtol=1e-5)

"""The gradient launches a Tape replays (launch/replay.py BoundReplay) bind the .grad buffers they recorded: a
temporary .grad is a new array in every Tape, so each Tape's gradients must rebind it; a Tape over several
kernels and time steps with buffers reused between Tapes and host writes between them, against float64
central differences, on Vulkan and the interpreter."""
import numpy as np
import pytest

import spvad as sp
from test_tape_plans import central

pytestmark = pytest.mark.backends

N, T = 7, 5


@sp.kernel
def squash(x: sp.Array, h: sp.Array, s: sp.f32, t: sp.i32):
    for i in range(x.shape[1]):
        h[t, i] = sp.tanh(s * x[t, i])


@sp.kernel
def advance(x: sp.Array, h: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = x[t, i] + 0.3 * w[i] * h[t, i]


@sp.kernel
def energy(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i] * (i + 1)


def loss_np(x0, w, scales):
    x = x0.astype(np.float64)
    for s in scales:
        x = x + 0.3 * w * np.tanh(s * x)
    return np.sum(x * x * np.arange(1, N + 1))


def test_temporary_grads_are_rebound_tape_after_tape(rng):
    """`h` has no .grad: every Tape gives it a new temporary one, which the replayed gradients of squash and
    advance must bind (binding the last Tape's, freed with it, would drop d loss / d h). The host writes new
    initial rows, and new weights, between the Tapes; the scales change from Tape to Tape too."""
    w_np = rng.uniform(0.5, 1.5, N).astype(np.float32)
    x = sp.ndarray(sp.f32, (T + 1, N), needs_grad=True)
    h = sp.ndarray(sp.f32, (T, N))
    w = sp.from_numpy(w_np, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    for it in range(4):
        x0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        start = np.zeros((T + 1, N), np.float32)
        start[0] = x0
        x.from_numpy(start)
        scales = [0.7 + 0.1 * t + (0.2 if it == 2 else 0.0) for t in range(T)]
        with sp.Tape(loss):
            for t in range(T):
                squash(x, h, scales[t], t)
                advance(x, h, w, t)
            energy(x, loss, T)
        assert h.grad is None   # the temporary companion is gone with its Tape
        np.testing.assert_allclose(loss[None], loss_np(x0, w_np, scales), rtol=1e-4)
        dw = central(lambda p: loss_np(x0, p, scales), w_np)
        dx = central(lambda p: loss_np(p, w_np, scales), x0)
        np.testing.assert_allclose(w.grad.to_numpy(), dw, rtol=2e-3, atol=1e-4 * np.abs(dw).max())
        np.testing.assert_allclose(x.grad.to_numpy()[0], dx, rtol=2e-3, atol=1e-4 * np.abs(dx).max())
        w_np = (w_np - 0.01 * w.grad.to_numpy()).astype(np.float32)
        w.from_numpy(w_np)

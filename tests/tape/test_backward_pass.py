"""A Tape's backward pass as a hand-written program runs it: the gradient clears and the loss's seed are queued on
the device with the gradient launches, nothing waits in between (one sync, at the exit), and the gradients stay
those of float64 references: a spring chain over many steps (atomics, several kernels), an f64 loss, stale
gradients from an earlier Tape. On Vulkan and the interpreter."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from tests.common_kernels import central, chain_advance, chain_energy, chain_forces, chain_np

pytestmark = pytest.mark.backends


forces, advance, energy = (sp.kernel(f) for f in (chain_forces, chain_advance, chain_energy))


def chain(rng, steps, n=6):
    x0 = (np.arange(n) * 1.1 + rng.uniform(-0.2, 0.2, n)).astype(np.float32)
    k = rng.uniform(5.0, 15.0, n - 1).astype(np.float32)
    x = sp.ndarray(sp.f32, (steps + 1, n), needs_grad=True)
    x.from_numpy(np.vstack([x0[None], np.zeros((steps, n), np.float32)]))
    arrays = dict(x=x, v=sp.ndarray(sp.f32, (steps + 1, n), needs_grad=True),
                  f=sp.ndarray(sp.f32, (steps, n), needs_grad=True), k=sp.from_numpy(k, needs_grad=True))
    return x0, k, arrays


def run_chain(a, loss, steps):
    with sp.Tape(loss):
        for t in range(steps):
            forces(a["x"], a["f"], a["k"], t)
            advance(a["x"], a["v"], a["f"], t)
        energy(a["x"], loss, steps)


def test_a_tape_waits_once_and_its_gradients_are_exact(rng):
    steps = 12
    x0, k, a = chain(rng, steps)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    for a_grad in ("x", "v", "f", "k"):   # stale gradients the Tape must clear on the device
        a[a_grad].grad.fill(3.0)
    a["f"].fill(0.0)
    device = runtime.get().device
    waits, sync = [], device.sync
    device.sync = lambda: (waits.append(1), sync())[1]
    try:
        run_chain(a, loss, steps)
    finally:
        del device.sync
    assert len(waits) == 1, f"the Tape waited for the device {len(waits)} times"
    np.testing.assert_allclose(loss[None], chain_np(x0, k, steps), rtol=1e-5)
    np.testing.assert_allclose(a["k"].grad.to_numpy(), central(lambda kk: chain_np(x0, kk, steps), k, 1e-5),
                               rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(a["x"].grad.to_numpy()[0], central(lambda xx: chain_np(xx, k, steps), x0, 1e-6),
                               rtol=2e-3, atol=1e-3)
    a["f"].fill(0.0)
    run_chain(a, loss, steps)   # again: the gradients are cleared, not accumulated
    np.testing.assert_allclose(a["k"].grad.to_numpy(), central(lambda kk: chain_np(x0, kk, steps), k, 1e-5),
                               rtol=2e-3, atol=1e-4)


@sp.kernel
def cubes(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i] * x[i]


def test_an_f64_loss_is_seeded_with_one(rng):
    if not runtime.get().device.info["features"].get("float64"):
        pytest.skip("no float64 on this device")
    x0 = rng.uniform(0.5, 1.5, 9)
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f64, (), needs_grad=True)
    loss.grad.fill(-7.0)
    with sp.Tape(loss):
        cubes(x, loss)
    assert loss.grad[None] == 1.0
    np.testing.assert_allclose(loss[None], np.sum(x0 ** 3), rtol=1e-12)
    np.testing.assert_allclose(x.grad.to_numpy(), 3 * x0 ** 2, rtol=1e-12)

"""examples/mpm.py, small: the spvad MLS-MPM's loss and its gradient with respect to the initial velocity
against the same algorithm in float64 numpy (central finite differences), with elastic contact on the floor
(the stress through the polar decomposition matters: the gradient changes with the stiffness)."""
import importlib.util
import pathlib

import numpy as np
import pytest

import spvad as sp

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "mpm.py"


@pytest.fixture(scope="module")
def mpm():
    spec = importlib.util.spec_from_file_location("mpm_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("v0", [(1.0, -1.0), (0.6, -0.4)])
def test_gradient_matches_float64_differences(mpm, v0):
    steps, target = 60, np.array([0.62, 0.42])
    x0 = mpm.block(8)
    sim = mpm.Simulation(x0, steps)
    loss, grad = sim.run(np.array(v0), target)
    want_loss, want_x = mpm.simulate_numpy(x0, np.array(v0), target, steps)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-4)
    np.testing.assert_allclose(sim.x.to_numpy()[steps], want_x, rtol=1e-4, atol=1e-5)
    eps, v = 1e-6, np.array(v0, np.float64)
    fd = np.array([(mpm.simulate_numpy(x0, v + eps * e, target, steps)[0] -
                    mpm.simulate_numpy(x0, v - eps * e, target, steps)[0]) / (2 * eps) for e in np.eye(2)])
    assert np.all(np.abs(fd) > 1e-3)   # both components matter: the check can fail
    np.testing.assert_allclose(grad, fd, rtol=2e-3, atol=2e-3 * np.abs(fd).max())


def test_the_tape_keeps_no_copies(mpm):
    """One row per step: the Tape reads every step's state where the forward left it."""
    sim = mpm.Simulation(mpm.block(4), 8)
    tapes = []
    original = sp.Tape.backward

    def spy(self):
        tapes.append(self.checkpoint_bytes)
        return original(self)

    sp.Tape.backward = spy
    try:
        sim.run(np.array([1.0, -1.0]), np.array([0.5, 0.3]))
    finally:
        sp.Tape.backward = original
    assert tapes == [0]

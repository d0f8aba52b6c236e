"""examples/ad_gravity.py (Taichi's, as a @sp.data_oriented class): the forces a Tape computes in a method,
x.grad = dU/dx, against U's gradient in closed form in float64, and fifty substeps against the same
integration in float64 numpy, on Vulkan and on the interpreter."""
import importlib.util
import pathlib

import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ad_gravity.py"
EPS = 1e-3
pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("ad_gravity_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def potential_and_gradient(x):
    """U = -sum over ordered pairs (i, j) of 1 / sqrt(|x_i - x_j|^2 + eps), and dU/dx (each pair counts twice)."""
    r = x[:, None, :] - x[None, :, :]
    s = np.sum(r * r, axis=2) + EPS
    return -np.sum(s ** -0.5), 2 * np.sum(r * s[:, :, None] ** -1.5, axis=1)


def test_tape_forces_match_the_closed_form(ex):
    sim = ex.Gravity(8, 1e-5)
    sim.init()
    x = sim.x.to_numpy().astype(np.float64)
    sim.substep()
    u, grad = potential_and_gradient(x)
    np.testing.assert_allclose(float(sim.U.to_numpy()), u, rtol=1e-5)
    np.testing.assert_allclose(sim.x.grad.to_numpy(), grad, rtol=1e-3, atol=1e-4 * np.abs(grad).max())


def test_substeps_match_float64(ex):
    sim = ex.Gravity(6, 1e-5)
    sim.init()
    x, v = sim.x.to_numpy().astype(np.float64), np.zeros((6, 2))
    for _ in range(50):
        sim.substep()
        v = v - 1e-5 * potential_and_gradient(x)[1]
        x = x + 1e-5 * v
    np.testing.assert_allclose(sim.v.to_numpy(), v, rtol=1e-3, atol=1e-3 * np.abs(v).max())
    np.testing.assert_allclose(sim.x.to_numpy(), x, rtol=1e-5, atol=1e-6)

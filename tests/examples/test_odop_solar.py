"""examples/odop_solar.py (Taichi's objective data-oriented example): the initial orbits follow the program's
rules (inside the circle, Kepler speeds), and the bound kernel method's time steps match the same semi-implicit
Euler in float64 numpy, for two systems at once (each instance its own arrays and numbers), on Vulkan and on
the interpreter."""
import importlib.util
import pathlib

import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "odop_solar.py"
pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("odop_solar_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def integrate_numpy(x, v, dt, steps):
    x, v = x.astype(np.float64), v.astype(np.float64)
    for _ in range(steps):
        offset = 0.5 - x
        v = v + dt * offset / np.linalg.norm(offset, axis=1, keepdims=True) ** 3
        x = x + dt * v
    return x, v


def test_initial_orbits(ex):
    solar = ex.make_solar(16)
    x, v = solar.x.to_numpy().astype(np.float64), solar.v.to_numpy().astype(np.float64)
    offset = x - 0.5
    radius = np.linalg.norm(offset, axis=1)
    assert np.all(radius <= 0.5 + 1e-6) and np.ptp(radius) > 0.05   # random, inside the circle
    perpendicular = np.stack([-offset[:, 1], offset[:, 0]], axis=1)
    noise = v * radius[:, None] ** 1.5 - perpendicular                # Kepler's law, plus at most 0.02
    assert np.all(np.linalg.norm(noise, axis=1) <= 0.02 + 1e-5)


def test_time_steps_match_float64_for_two_systems(ex):
    a, b = ex.make_solar(8, 1e-4), ex.make_solar(5, 3e-4)
    start = [(s.x.to_numpy(), s.v.to_numpy()) for s in (a, b)]
    for _ in range(100):
        a.integrate()
        b.integrate()
    for s, (x0, v0), dt in zip((a, b), start, (1e-4, 3e-4)):
        x, v = integrate_numpy(x0, v0, dt, 100)
        np.testing.assert_allclose(s.x.to_numpy(), x, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(s.v.to_numpy(), v, rtol=1e-3, atol=1e-3 * np.abs(v).max())

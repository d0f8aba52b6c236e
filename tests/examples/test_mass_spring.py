"""examples/mass_spring.py (Taichi's implicit_mass_spring Cloth class, stepped explicitly): the springs and rest
lengths its kernels build, and forty steps, against the same cloth in float64 numpy, on Vulkan and on the
interpreter."""
import importlib.util
import pathlib

import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "mass_spring.py"
pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("mass_spring_example", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cloth_numpy(n):
    """Vertices on an (n+1) x (n+1) grid in [0.25, 0.75]^2 and every spring (grid edges and both diagonals)."""
    k = lambda i, j: i * (n + 1) + j   # noqa: E731
    pos = np.array([[i, j] for i in range(n + 1) for j in range(n + 1)], np.float64) / n * 0.5 + 0.25
    springs = [(k(i, j), k(i, j + 1)) for i in range(n + 1) for j in range(n)]
    springs += [(k(i, j), k(i + 1, j)) for i in range(n) for j in range(n + 1)]
    springs += [(k(i, j), k(i + 1, j + 1)) for i in range(n) for j in range(n)]
    springs += [(k(i, j + 1), k(i + 1, j)) for i in range(n) for j in range(n)]
    return pos, springs


def step_numpy(pos, vel, init, springs, rest, n, h, ks=1000.0, kd=0.5, kf=1.0e5):
    force = np.tile([0.0, -2.0], (len(pos), 1))
    for (a, b), r in zip(springs, rest):
        d = pos[b] - pos[a]
        f = ks * (np.linalg.norm(d) - r) * d / np.linalg.norm(d)
        force[a] += f
        force[b] -= f
    for c in (n, len(pos) - 1):
        force[c] += kf * (init[c] - pos[c])
    vel = (vel + h * force) * np.exp(-h * kd)
    return pos + h * vel, vel


def test_springs_and_steps_match_float64(ex):
    n, h = 4, 1e-3
    cloth = ex.Cloth(n)
    pos, springs = cloth_numpy(n)
    got = sorted(map(tuple, np.sort(cloth.spring.to_numpy(), axis=1)))
    assert got == sorted(tuple(sorted(s)) for s in springs)
    by_pair = dict(zip(map(tuple, np.sort(cloth.spring.to_numpy(), axis=1)), cloth.rest_len.to_numpy()))
    rest = np.array([by_pair[tuple(sorted(s))] for s in springs], np.float64)
    np.testing.assert_allclose(rest, [np.linalg.norm(pos[a] - pos[b]) for a, b in springs], rtol=1e-6)
    init, vel = pos.copy(), np.zeros_like(pos)
    for _ in range(40):
        cloth.update(h)
        pos, vel = step_numpy(pos, vel, init, springs, rest, n, h)
    np.testing.assert_allclose(cloth.pos.to_numpy(), pos, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cloth.vel.to_numpy(), vel, rtol=1e-2, atol=1e-3 * np.abs(vel).max())

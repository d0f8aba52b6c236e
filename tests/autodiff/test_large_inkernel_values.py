"""In-kernel values of up to 144 components (12x12): the Hessian of a tetrahedron's energy over its 12
coordinates, the 9x9 Hessian of a 3x3 deformation gradient's energy and the 9x9 Jacobian of a matrix function
(row-major flattenings, as FEM codes write them), against float64 finite differences; their kernel-level
gradient (a third derivative) against finite differences of the Hessian's sum; and the 144-component limit."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends


@sp.func
def tet_energy(q):
    """Squared stretch of a tetrahedron's six edges, q its 4 corners' 12 coordinates."""
    s = 0.0
    for a in sp.static(range(4)):
        for b in sp.static(range(a + 1, 4)):
            dx = q[3 * a] - q[3 * b]
            dy = q[3 * a + 1] - q[3 * b + 1]
            dz = q[3 * a + 2] - q[3 * b + 2]
            s += (sp.sqrt(dx * dx + dy * dy + dz * dz) - 1.0) ** 2
    return s


def tet_energy_np(q):
    s = 0.0
    for a in range(4):
        for b in range(a + 1, 4):
            d = q[3 * a:3 * a + 3] - q[3 * b:3 * b + 3]
            s += (np.sqrt(d @ d) - 1.0) ** 2
    return s


@sp.func
def neo_hookean(F):
    J = F.determinant()
    return 0.5 * ((F.transpose() @ F).trace() - 3.0) - sp.log(J) + 0.5 * sp.log(J) ** 2


def neo_hookean_np(F):
    J = np.linalg.det(F)
    return 0.5 * (np.trace(F.T @ F) - 3.0) - np.log(J) + 0.5 * np.log(J) ** 2


@sp.func
def cubic(F):
    return F @ F.transpose() @ F


@sp.kernel
def tet_hessians(q: sp.Array, H: sp.Array):
    for i in range(q.shape[0]):
        H[i] = sp.hessian(tet_energy, argnums=0)(q[i])


@sp.kernel
def tet_hessian_sum(q: sp.Array, loss: sp.Array):
    for i in range(q.shape[0]):
        loss[None] += sp.hessian(tet_energy, argnums=0)(q[i]).trace()


@sp.kernel
def matrix_derivatives(F: sp.Array, H: sp.Array, J: sp.Array):
    for i in range(F.shape[0]):
        H[i] = sp.hessian(neo_hookean, argnums=0)(F[i])
        J[i] = sp.jacobian(cubic, argnums=0)(F[i])


def fd_hessian(f, x, h=1e-4):
    n = x.size
    H = np.zeros((n, n))
    E = np.eye(n) * h
    for a in range(n):
        for b in range(n):
            H[a, b] = (f(x + E[a] + E[b]) - f(x + E[a] - E[b]) - f(x - E[a] + E[b]) + f(x - E[a] - E[b])) / (4 * h * h)
    return H


def tetrahedra(rng, n):
    corners = np.array([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1], np.float64)
    return (corners + rng.uniform(-0.2, 0.2, (n, 12))).astype(np.float32)


def test_tetrahedron_hessian_12x12(rng):
    q = tetrahedra(rng, 5)
    H = sp.ndarray(sp.Matrix(12, 12, sp.f32), (5,))
    tet_hessians(sp.from_numpy(q, dtype=sp.Vector(12, sp.f32)), H)
    got = H.to_numpy()
    assert got.shape == (5, 12, 12)
    for k in range(5):
        want = fd_hessian(tet_energy_np, q[k].astype(np.float64))
        np.testing.assert_allclose(got[k], want, rtol=1e-3, atol=2e-4 * np.abs(want).max())


def test_matrix_function_hessian_and_jacobian_9x9(rng):
    F = (np.eye(3) + 0.2 * rng.uniform(-1, 1, (4, 3, 3))).astype(np.float32)
    H, J = sp.ndarray(sp.Matrix(9, 9, sp.f32), (4,)), sp.ndarray(sp.Matrix(9, 9, sp.f32), (4,))
    matrix_derivatives(sp.from_numpy(F, dtype=sp.mat3), H, J)
    for k in range(4):
        f0 = F[k].astype(np.float64)
        want_h = fd_hessian(lambda v: neo_hookean_np(v.reshape(3, 3)), f0.ravel())
        np.testing.assert_allclose(H.to_numpy()[k], want_h, rtol=1e-3, atol=2e-4 * np.abs(want_h).max())
        want_j = np.zeros((9, 9))
        for a in range(9):
            e = np.zeros(9)
            e[a] = 1e-5
            plus, minus = (f0.ravel() + e).reshape(3, 3), (f0.ravel() - e).reshape(3, 3)
            want_j[:, a] = ((plus @ plus.T @ plus) - (minus @ minus.T @ minus)).ravel() / 2e-5
        np.testing.assert_allclose(J.to_numpy()[k], want_j, rtol=1e-3, atol=1e-4 * np.abs(want_j).max())


def test_gradient_of_a_12x12_hessian(rng):
    """sp.Tape through the kernel: d/dq of the Hessian's trace, the energy's Laplacian (third derivatives)."""
    q = tetrahedra(rng, 3)
    qs = sp.from_numpy(q, dtype=sp.Vector(12, sp.f32), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        tet_hessian_sum(qs, loss)
    got = qs.grad.to_numpy()

    def laplacian(v, h=1e-3):
        return sum((tet_energy_np(v + h * e) - 2 * tet_energy_np(v) + tet_energy_np(v - h * e)) / (h * h)
                   for e in np.eye(12))
    for k in range(3):
        v = q[k].astype(np.float64)
        want = np.array([(laplacian(v + 1e-3 * e) - laplacian(v - 1e-3 * e)) / 2e-3 for e in np.eye(12)])
        np.testing.assert_allclose(got[k], want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_limit_is_144_components():
    assert sp.Matrix(12, 12, sp.f32).n == 12
    with pytest.raises(TypeError, match="at most 144"):
        sp.Matrix(12, 13, sp.f32)
    with pytest.raises(TypeError, match="1..144"):
        sp.Vector(145, sp.f32)

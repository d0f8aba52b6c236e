"""sp.Tape(loss, needs_grad_only=True), Taichi's meaning for ported programs: gradients flow only through
ndarrays created with needs_grad=True, every other array is a constant of the gradient (and gets no temporary
.grad). The default differentiates through every array, module-level ones (read through global names, as
Taichi fields) as arguments: fem99 in miniature, an energy weighted by triangle areas held in an array without
needs_grad (and sp.FwdMode through one without needs_dual). Gradients against float64 central differences of a
numpy reference, or closed forms, on every backend."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

TRIANGLES = np.array([[0, 1, 2], [1, 3, 2], [2, 3, 4], [3, 5, 4]], np.int32)
x = tri = area = U = None   # module-level ndarrays (Taichi fields), made by each test in its runtime


def make_mesh(rng):
    global x, tri, area, U
    x0 = (np.array([[0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]], np.float64)
          + rng.uniform(-0.2, 0.2, (6, 2))).astype(np.float32)
    x = sp.from_numpy(x0, dtype=sp.vec2, needs_grad=True)
    tri = sp.from_numpy(TRIANGLES)
    area = sp.ndarray(sp.f32, (len(TRIANGLES),))            # no needs_grad, as fem99's
    U = sp.ndarray(sp.f32, (), needs_grad=True)
    return x0


@sp.func
def corners(t):
    return x[tri[t, 0]], x[tri[t, 1]], x[tri[t, 2]]


@sp.kernel
def compute_area():
    for t in range(tri.shape[0]):
        a, b, c = corners(t)
        area[t] = 0.5 * sp.cross(b - a, c - a)


@sp.kernel
def update_U():
    for t in range(tri.shape[0]):
        a, b, c = corners(t)
        e, f = b - a, c - a
        U[None] += area[t] * (e.dot(e) + 0.5 * f.dot(f) + sp.sin(a.x * c.y))


def areas_ref(X):
    a, b, c = (X[TRIANGLES[:, k]] for k in range(3))
    e, f = b - a, c - a
    return 0.5 * (e[:, 0] * f[:, 1] - e[:, 1] * f[:, 0])


def energy_ref(X, A=None):
    a, b, c = (X[TRIANGLES[:, k]] for k in range(3))
    e, f = b - a, c - a
    density = (e * e).sum(1) + 0.5 * (f * f).sum(1) + np.sin(a[:, 0] * c[:, 1])
    return float(np.sum((areas_ref(X) if A is None else A) * density))


def central_differences(f, x0, eps=1e-6):
    x0 = x0.astype(np.float64)
    g = np.zeros_like(x0)
    for j in np.ndindex(x0.shape):
        e = np.zeros_like(x0)
        e[j] = eps
        g[j] = (f(x0 + e) - f(x0 - e)) / (2 * eps)
    return g


def assert_close(got, want, what, rtol=2e-4):
    atol = rtol * float(np.max(np.abs(want)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol, err_msg=what)


def test_module_level_arrays_without_needs_grad(rng):
    x0 = make_mesh(rng)
    full = central_differences(energy_ref, x0)                                  # through the areas too
    frozen = central_differences(lambda X: energy_ref(X, areas_ref(x0.astype(np.float64))), x0)
    assert np.max(np.abs(full - frozen)) > 0.1 * np.max(np.abs(full)), "vacuous: the areas carry no gradient"
    for needs_grad_only, want in ((False, full), (True, frozen), (False, full)):   # (recipes kept per mode)
        with sp.Tape(U, needs_grad_only=needs_grad_only):
            compute_area()
            update_U()
            assert (area.grad is None) == needs_grad_only, "a temporary .grad exactly when gradients flow"
        assert area.grad is None, "the temporary .grad is gone after the Tape"
        assert_close(U.to_numpy(), energy_ref(x0.astype(np.float64)), "U")
        assert_close(x.grad.to_numpy(), want, f"x.grad with needs_grad_only={needs_grad_only}")


@sp.kernel
def rest_lengths(p: sp.Array, rest: sp.Array):
    for i in range(rest.shape[0]):
        rest[i] = p[i] * 0.5 + 1.0                     # written from needs-grad p: carries gradient or not


@sp.kernel
def spring_energy(p: sp.Array, rest: sp.Array, k: sp.Array, loss: sp.Array):
    for i in range(p.shape[0] - 1):
        d = p[i + 1] - p[i]
        loss[None] += k[i] * (d - rest[i]) * (d - rest[i])


def spring_ref(p, k, through_rest, p_rest):
    d = p[1:] - p[:-1]
    rest = (p if through_rest else p_rest)[:-1] * 0.5 + 1.0
    return float(np.sum(k * (d - rest) ** 2))


def test_arguments_without_needs_grad_are_constants(rng):
    p0 = rng.uniform(-1.0, 1.0, 7).astype(np.float32)
    k0 = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    p, k = sp.from_numpy(p0, needs_grad=True), sp.from_numpy(k0)   # k: no needs_grad, a constant either way
    rest, loss = sp.ndarray(sp.f32, (6,)), sp.ndarray(sp.f32, (), needs_grad=True)
    p64, k64 = p0.astype(np.float64), k0.astype(np.float64)
    for needs_grad_only in (True, False, True):
        with sp.Tape(loss, needs_grad_only=needs_grad_only):
            rest_lengths(p, rest)
            spring_energy(p, rest, k, loss)
        want = central_differences(lambda q: spring_ref(q, k64, not needs_grad_only, p64), p0)
        assert_close(loss.to_numpy(), spring_ref(p64, k64, True, p64), "loss")
        assert_close(p.grad.to_numpy(), want, f"p.grad with needs_grad_only={needs_grad_only}")
        assert k.grad is None and rest.grad is None


def test_needs_grad_only_must_be_a_bool():
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.ArgumentError, match="needs_grad_only"):
        sp.Tape(loss, needs_grad_only="yes")


h = h_squared = h_total = None   # module-level ndarrays of the forward-mode test


@sp.kernel
def squares():
    for i in range(h.shape[0]):
        h_squared[i] = sp.sin(h[i]) * h[i]


@sp.kernel
def total_of_squares():
    for i in range(h_squared.shape[0]):
        h_total[None] += h_squared[i] * h_squared[i]


def test_forward_mode_through_a_module_level_array_without_needs_dual(rng):
    global h, h_squared, h_total
    h0 = rng.uniform(-1.5, 1.5, 5).astype(np.float32)
    seed = rng.uniform(0.5, 1.5, 5)
    h, h_squared = sp.from_numpy(h0, needs_dual=True), sp.ndarray(sp.f32, (5,))
    h_total = sp.ndarray(sp.f32, (), needs_dual=True)
    x64 = h0.astype(np.float64)
    s, ds = np.sin(x64) * x64, np.cos(x64) * x64 + np.sin(x64)
    for _ in range(2):   # a temporary .dual inside the block, none afterwards
        h_total.fill(0.0)
        with sp.FwdMode(h_total, h, seed):
            squares()
            total_of_squares()
            assert h_squared.dual is not None
        assert h_squared.dual is None
        assert_close(h_total.dual.to_numpy(), np.sum(2 * s * ds * seed), "tangent of the total")

"""Gradients of matrix kernels and of local arrays with runtime indices: reverse mode (`k.grad`, `sp.Tape`)
and forward mode (`k.fwd`, `sp.FwdMode`) against central finite differences of float64 numpy references.
svd / polar are checked through quantities that the decomposition determines uniquely (singular values,
u_k v_k^T, R, S) on matrices with distinct singular values."""
import numpy as np
import pytest

import spvad as sp
from tests.autodiff.test_vector_gradients import close, fd_grad
from tests.kernel.test_matrices import make_kernel

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def well_conditioned(rng, count, n):
    """Q1 @ diag(s) @ Q2 with well separated singular values and random signs of det."""
    out = []
    for _ in range(count):
        q1, _ = np.linalg.qr(rng.normal(size=(n, n)))
        q2, _ = np.linalg.qr(rng.normal(size=(n, n)))
        out.append(q1 @ np.diag(np.array([2.2, 1.4, 0.6, 1.8][:n]) * rng.uniform(0.95, 1.05, n)) @ q2)
    return np.array(out, np.float32)


# ---- one table row per differentiable matrix operation ---------------------------------------------------
@sp.func
def g_arith(A, B, u):
    return (A * B - A / (B * B + 1.0)) @ u + u * 2.0


@sp.func
def g_matmul(A, B, u):
    return A @ B.T @ A - sp.transpose(B) * u[0] + sp.outer(u, A[1])


@sp.func
def g_vecmat(A, B, u):
    return u @ A + (A @ u) * B[0, 1]


@sp.func
def g_trace_det(A, B, u):
    return sp.trace(A @ B) * sp.determinant(A) + sp.determinant(B) * u


@sp.func
def g_inverse(A, B, u):
    return sp.inverse(A) @ B


@sp.func
def g_elements(A, B, u):
    return sp.Matrix([[A[0, 1] * B[1, 0], u[1]], [A[1] @ u, sp.sin(B[0, 0])]])


@sp.func
def g_svd_values(A, B, u):
    U, S, V = sp.svd(A)
    return S @ u


@sp.func
def g_svd_vectors(A, B, u):   # U S^2 V^T and u_0 v_0^T: unique where singular values are distinct
    U, S, V = sp.svd(A)
    return U @ (S * S) @ V.T + sp.outer(U.T[0], V.T[0]) * u[0]


@sp.func
def g_polar(A, B, u):
    R, P = sp.polar_decompose(A)
    return R @ B + P * u[1]


def ref_svd_vectors(A, B, u):
    U, S, V = sp.svd(A)
    return U @ (S * S) @ V.T + np.outer(U[:, 0], V[:, 0]) * u[0]


def ref_polar(A, B, u):
    R, P = sp.polar_decompose(A)
    return R @ B + P * u[1]


GRADS = [   # (name, size n, kernel function of (A, B, u), float64 reference, well-conditioned A, rtol)
    ("arith", 3, g_arith, lambda A, B, u: (A * B - A / (B * B + 1)) @ u + 2 * u, False, 2e-4),
    ("matmul", 3, g_matmul, lambda A, B, u: A @ B.T @ A - B.T * u[0] + np.outer(u, A[1]), False, 2e-4),
    ("vecmat", 2, g_vecmat, lambda A, B, u: u @ A + (A @ u) * B[0, 1], False, 2e-4),
    ("trace_det3", 3, g_trace_det, lambda A, B, u: np.trace(A @ B) * np.linalg.det(A) + np.linalg.det(B) * u,
     False, 2e-4),
    ("trace_det4", 4, g_trace_det, lambda A, B, u: np.trace(A @ B) * np.linalg.det(A) + np.linalg.det(B) * u,
     False, 2e-4),
    ("inverse2", 2, g_inverse, lambda A, B, u: np.linalg.inv(A) @ B, True, 5e-4),
    ("inverse3", 3, g_inverse, lambda A, B, u: np.linalg.inv(A) @ B, True, 5e-4),
    ("inverse4", 4, g_inverse, lambda A, B, u: np.linalg.inv(A) @ B, True, 5e-4),
    ("elements", 2, g_elements, lambda A, B, u: np.array([[A[0, 1] * B[1, 0], u[1]], [A[1] @ u, np.sin(B[0, 0])]]),
     False, 2e-4),
    ("svd_values2", 2, g_svd_values, lambda A, B, u: sp.svd(A)[1] @ u, True, 1e-3),
    ("svd_values3", 3, g_svd_values, lambda A, B, u: sp.svd(A)[1] @ u, True, 1e-3),
    ("svd_vectors2", 2, g_svd_vectors, ref_svd_vectors, True, 1e-3),
    ("svd_vectors3", 3, g_svd_vectors, ref_svd_vectors, True, 1e-3),
    ("polar2", 2, g_polar, ref_polar, True, 1e-3),
    ("polar3", 3, g_polar, ref_polar, True, 1e-3),
]


def setup(rng, n, well, m=4):
    A = well_conditioned(rng, m, n) if well else rand(rng, (m, n, n), 0.3, 1.0)
    B, U = rand(rng, (m, n, n), 0.3, 1.0), rand(rng, (m, n), 0.3, 1.0)
    mt, vt = sp.Matrix(n, n), sp.Vector(n)
    arrays = [sp.from_numpy(A, dtype=mt, needs_grad=True, needs_dual=True),
              sp.from_numpy(B, dtype=mt, needs_grad=True, needs_dual=True),
              sp.from_numpy(U, dtype=vt, needs_grad=True, needs_dual=True)]
    return [x.astype(np.float64) for x in (A, B, U)], arrays


def batched(ref):
    return lambda A, B, U: np.stack([np.asarray(ref(A[i], B[i], U[i]), np.float64) for i in range(len(A))])


def out_for(want, m):
    shape = want.shape[1:]
    dtype = sp.f32 if not shape else sp.Vector(shape[0]) if len(shape) == 1 else sp.Matrix(*shape)
    return sp.ndarray(dtype, (m,), needs_grad=True, needs_dual=True)


@pytest.mark.parametrize("name,n,f,ref,well,rtol", GRADS, ids=[g[0] for g in GRADS])
def test_reverse_and_forward(name, n, f, ref, well, rtol, rng):
    inputs, arrays = setup(rng, n, well)
    ref = batched(ref)
    want = ref(*inputs)
    out = out_for(want, len(want))
    k = make_kernel(f)
    k(*arrays, out)
    close(out.to_numpy(), want, rtol / 4)
    # reverse: seeded out.grad, accumulated into the inputs' .grad
    seed = rand(rng, want.shape, 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    k.grad(*arrays, out)
    for j, arr in enumerate(arrays):
        want_grad = fd_grad(lambda *x: float((seed * ref(*x)).sum()), inputs, j)
        if np.any(want_grad != 0):
            close(arr.grad.to_numpy(), want_grad, rtol)
        else:   # an input the row does not use
            assert not np.any(arr.grad.to_numpy())
    # forward: the outputs' duals are the derivative along the inputs' duals
    tangents = [rand(rng, x.shape, 0.5, 1.5, np.float64) for x in inputs]
    for arr, t in zip(arrays, tangents):
        arr.dual.from_numpy(t)
    k.fwd(*arrays, out)
    eps = 1e-6
    hi = ref(*[x + eps * t for x, t in zip(inputs, tangents)])
    lo = ref(*[x - eps * t for x, t in zip(inputs, tangents)])
    close(out.dual.to_numpy(), (hi - lo) / (2 * eps), rtol)


@sp.kernel
def matrix_loss(a: sp.Array, m: sp.mat2, loss: sp.Array, steps: sp.i32):
    for i in range(a.shape[0]):
        M = a[i]
        for _ in range(steps):   # a matrix carried through a dynamic loop (adstacks)
            M = M @ m * 0.9 + sp.sin(M) * 0.1
        loss[None] += sp.trace(M @ M.T) + M[0, 1]


def matrix_loss_ref(A, m, steps):
    total = 0.0
    for M in A:
        for _ in range(steps):
            M = M @ m * 0.9 + np.sin(M) * 0.1
        total += np.trace(M @ M.T) + M[0, 1]
    return total


def test_tape_and_fwdmode_matrix_carried_in_dynamic_loop(rng):
    A, m, steps = rand(rng, (5, 2, 2), 0.3, 1.0), rand(rng, (2, 2), 0.3, 1.0), 9
    a = sp.from_numpy(A, dtype=sp.mat2, needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    with sp.Tape(loss=loss):
        matrix_loss(a, m, loss, steps)
    A64, m64 = A.astype(np.float64), m.astype(np.float64)
    assert float(loss.to_numpy()) == pytest.approx(matrix_loss_ref(A64, m64, steps), rel=1e-5)
    want = fd_grad(lambda A: matrix_loss_ref(A, m64, steps), [A64], 0)
    close(a.grad.to_numpy(), want)
    seed = rand(rng, A.shape, 0.5, 1.5, np.float64)
    with sp.FwdMode(loss=loss, param=a, seed=seed.reshape(-1)):
        matrix_loss(a, m, loss, steps)
    assert float(loss.dual.to_numpy()) == pytest.approx(float((want * seed).sum()), rel=2e-4)


# ---- local arrays with runtime indices -------------------------------------------------------------------
@sp.kernel
def sort_weighted(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        buf = sp.Vector(8, sp.f32).zero()
        for k in range(8):
            buf[k] = x[i, k] * x[i, k] + x[i, k]
        for k in range(1, 8):   # insertion sort: runtime indices in dynamic loops
            key = buf[k]
            j = k - 1
            while j >= 0 and buf[j] > key:
                buf[j + 1] = buf[j]
                j -= 1
            buf[j + 1] = key
        for k in range(8):
            out[i, k] = buf[k] * float(k + 1)


def sort_weighted_ref(X):
    return np.sort(X * X + X, axis=1) * np.arange(1, 9)


def test_insertion_sort_gradients(rng):
    X = rand(rng, (5, 8), 0.1, 2.0)
    x = sp.from_numpy(X, needs_grad=True, needs_dual=True)
    out = sp.ndarray(sp.f32, (5, 8), needs_grad=True, needs_dual=True)
    sort_weighted(x, out)
    X64 = X.astype(np.float64)
    close(out.to_numpy(), sort_weighted_ref(X64), 1e-5)
    seed = rand(rng, (5, 8), 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    sort_weighted.grad(x, out)
    close(x.grad.to_numpy(), fd_grad(lambda X: float((seed * sort_weighted_ref(X)).sum()), [X64], 0))
    t = rand(rng, (5, 8), 0.5, 1.5, np.float64)
    x.dual.from_numpy(t)
    sort_weighted.fwd(x, out)
    eps = 1e-6
    close(out.dual.to_numpy(), (sort_weighted_ref(X64 + eps * t) - sort_weighted_ref(X64 - eps * t)) / (2 * eps))


@sp.kernel
def ring(x: sp.Array, out: sp.Array, loss: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        buf = sp.Vector(6, sp.f32).zero()
        run = 0.0
        for k in range(n):   # a prefix sum written at runtime slots, each overwritten as k wraps
            run += x[i, k]
            buf[k % 6] = buf[k % 6] * 0.5 + run * buf[(k + 1) % 6] + run
        j = 0
        while j < m:
            buf[j % 6] += sp.sin(buf[(j + 2) % 6]) * 0.3
            j += 1
        M = sp.Matrix(2, 3).zero()
        for k in range(n):
            M[k % 2, k % 3] -= buf[k % 6] * x[i, k]
        for k in range(6):
            out[i, k] = buf[k]
        loss[None] += sp.trace(M @ M.T)


def ring_ref(X, n, m):
    outs, loss = [], 0.0
    for row in X:
        buf, run = np.zeros(6), 0.0
        for k in range(n):
            run += row[k]
            buf[k % 6] = buf[k % 6] * 0.5 + run * buf[(k + 1) % 6] + run
        for j in range(m):
            buf[j % 6] += np.sin(buf[(j + 2) % 6]) * 0.3
        M = np.zeros((2, 3))
        for k in range(n):
            M[k % 2, k % 3] -= buf[k % 6] * row[k]
        outs.append(buf)
        loss += np.trace(M @ M.T)
    return np.array(outs), loss


@pytest.mark.parametrize("n,m", [(4, 3), (11, 14)])
def test_runtime_indexed_overwrites_in_dynamic_loops(n, m, rng):
    X = rand(rng, (4, 11), 0.2, 0.6)
    x = sp.from_numpy(X, needs_grad=True, needs_dual=True)
    out = sp.ndarray(sp.f32, (4, 6), needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    X64 = X.astype(np.float64)
    seed = rand(rng, (4, 6), 0.5, 1.5, np.float64)

    def total(X):
        o, l = ring_ref(X, n, m)
        return float((seed * o).sum() + 0.7 * l)
    with sp.Tape(loss=loss):   # d loss / d x
        ring(x, out, loss, n, m)
    want_out, want_loss = ring_ref(X64, n, m)
    close(out.to_numpy(), want_out, 1e-5)
    assert float(loss.to_numpy()) == pytest.approx(want_loss, rel=1e-5)
    close(x.grad.to_numpy(), fd_grad(lambda X: ring_ref(X, n, m)[1], [X64], 0))
    want = fd_grad(total, [X64], 0)   # and of seed . out + 0.7 loss, by k.grad
    x.grad.fill(0.0)
    out.grad.from_numpy(seed)
    loss.grad.fill(0.7)
    ring.grad(x, out, loss, n, m)
    close(x.grad.to_numpy(), want)
    t = rand(rng, X.shape, 0.5, 1.5, np.float64)
    x.dual.from_numpy(t)
    ring.fwd(x, out, loss, n, m)
    close(float((seed * out.dual.to_numpy()).sum() + 0.7 * loss.dual.to_numpy()), float((want * t).sum()))

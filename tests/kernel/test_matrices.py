"""Matrices: the types, ndarrays of matrices, matrix values in kernels (scalarised by the frontend), the
linear algebra (determinant, inverse, svd, polar decomposition) and the errors, each checked against an
independent float64 numpy reference on random non-zero data."""
import numpy as np
import pytest

import spvad as sp


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def well_conditioned(rng, count, n, sigmas=None):
    """Matrices Q1 @ diag(sigmas) @ Q2 with distinct singular values (random signs of det)."""
    out = []
    for _ in range(count):
        q1, _ = np.linalg.qr(rng.normal(size=(n, n)))
        q2, _ = np.linalg.qr(rng.normal(size=(n, n)))
        s = np.array(sigmas or [2.5, 1.5, 0.7, 1.1][:n]) * rng.uniform(0.9, 1.1, n)
        out.append(q1 @ np.diag(s) @ q2)
    return np.array(out, np.float32)


def close(got, want, rtol=2e-5):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol,
                               atol=rtol * max(float(np.max(np.abs(want))), 1e-30))


# ---- the types and the host side -------------------------------------------------------------------------
def test_matrix_types():
    assert sp.mat3 == sp.Matrix(3, 3, sp.f32) == sp.Matrix(3, 3) and hash(sp.mat3) == hash(sp.Matrix(3, 3))
    assert sp.mat2 != sp.mat3 and sp.Matrix(3, 3, sp.f64) != sp.mat3 and sp.Matrix(2, 3) != sp.Matrix(3, 2)
    assert repr(sp.mat4) == "mat4" and repr(sp.Matrix(2, 3)) == "Matrix(2, 3, f32)" and sp.mat2.shape == (2, 2)
    assert sp.Matrix(8, 8).shape == (8, 8) and sp.Matrix(12, 12).shape == (12, 12)
    for bad in [(12, 13), (0, 3), (3, 3, sp.u1), (3, 3, "f32"), (2.5, 2)]:
        with pytest.raises(TypeError):
            sp.Matrix(*bad)
    assert sp.Vector(64, sp.f32).n == 64 and sp.Vector(16).dtype == sp.f32


def test_host_matrix_functions(rng):
    m = sp.mat3(1, 2, 3, 4, 5, 6, 7, 8, 10)
    assert m.dtype == np.float32 and m.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 10]]
    assert np.array_equal(sp.mat2(sp.vec2(1, 2), sp.vec2(3, 4)), [[1, 2], [3, 4]])
    assert np.array_equal(sp.mat3.identity(), np.eye(3)) and sp.Matrix(2, 3).zero().shape == (2, 3)
    assert np.array_equal(sp.Matrix([[1.0, 2.0], [3.0, 4.0]]), [[1, 2], [3, 4]])
    assert sp.Vector([1, 2, 3]).dtype == np.int32 and sp.Vector([1.0, 2.0]).dtype == np.float32
    with pytest.raises(TypeError):
        sp.mat2(1, 2, 3)
    a = rand(rng, (3, 3)).astype(np.float64) + 2 * np.eye(3)
    assert np.allclose(sp.transpose(a), a.T) and sp.trace(a) == pytest.approx(np.trace(a))
    assert sp.determinant(a) == pytest.approx(np.linalg.det(a))
    assert np.allclose(sp.inverse(a), np.linalg.inv(a))
    assert np.allclose(sp.outer(a[0], a[1]), np.outer(a[0], a[1]))
    for mat in (a, -a, well_conditioned(rng, 1, 2)[0].astype(np.float64)):
        u, s, v = sp.svd(mat)
        assert np.allclose(u @ s @ v.T, mat) and np.linalg.det(u) == pytest.approx(1) and np.linalg.det(
            v) == pytest.approx(1)
        r, p = sp.polar_decompose(mat)
        assert np.allclose(r @ p, mat) and np.allclose(p, p.T) and np.linalg.det(r) == pytest.approx(1)


# ---- ndarrays of matrices --------------------------------------------------------------------------------
def test_matrix_ndarray_layout_and_io(rng):
    a = sp.ndarray(sp.mat3, (5,), needs_grad=True)
    assert a.shape == (5,) and a.storage_shape == (5, 3, 3) and a.grad.storage_shape == (5, 3, 3)
    data = rand(rng, (5, 3, 3))
    a.from_numpy(data)
    assert np.array_equal(a.to_numpy(), data) and np.array_equal(a[2], data[2]) and a[2].shape == (3, 3)
    a[1] = np.eye(3)
    assert np.array_equal(a.to_numpy()[1], np.eye(3))
    b = sp.from_numpy(rand(rng, (2, 4, 2, 3)), dtype=sp.Matrix(2, 3))
    assert b.shape == (2, 4) and b.storage_shape == (2, 4, 2, 3)
    with pytest.raises(sp.ArgumentError, match="last two axes"):
        sp.from_numpy(rand(rng, (4, 3)), dtype=sp.mat3)
    with pytest.raises(sp.ArgumentError):
        a[0] = [1.0, 2.0, 3.0]


# ---- matrix values in kernels: one table row per operation -----------------------------------------------
def make_kernel(f):
    @sp.kernel
    def k(a: sp.Array, b: sp.Array, u: sp.Array, out: sp.Array):
        for i in range(a.shape[0]):
            out[i] = f(a[i], b[i], u[i])
    return k


# kernel functions of (A, B, u), one per table row (a @sp.func must be a plain def)
@sp.func
def f_add(A, B, u):
    return A + B


@sp.func
def f_sub_scalar(A, B, u):
    return A - B * 2.0 + 1.5


@sp.func
def f_mul_div(A, B, u):
    return A * B / (B * B + 1.0)


@sp.func
def f_neg(A, B, u):
    return -A * 0.5


@sp.func
def f_matmul(A, B, u):
    return A @ B


@sp.func
def f_matmul4(A, B, u):
    return A @ B @ A


@sp.func
def f_matvec(A, B, u):
    return A @ u


@sp.func
def f_vecmat(A, B, u):
    return u @ A


@sp.func
def f_dot_at(A, B, u):
    return u @ u


@sp.func
def f_transpose(A, B, u):
    return A.T @ B + sp.transpose(B)


@sp.func
def f_trace(A, B, u):
    return sp.trace(A @ B)


@sp.func
def f_determinant2(A, B, u):
    return sp.determinant(A)


@sp.func
def f_determinant3(A, B, u):
    return sp.determinant(A)


@sp.func
def f_determinant4(A, B, u):
    return sp.determinant(A)


@sp.func
def f_inverse2(A, B, u):
    return sp.inverse(A)


@sp.func
def f_inverse3(A, B, u):
    return sp.inverse(A)


@sp.func
def f_inverse4(A, B, u):
    return sp.inverse(A)


@sp.func
def f_outer(A, B, u):
    return sp.outer(u, A[1]) + A


@sp.func
def f_element_row(A, B, u):
    return A[1, 2] * A[0] + B[2] * A[2, 1]


@sp.func
def f_from_scalars(A, B, u):
    return sp.mat2(A[1, 1], u[0], 2.0, A[0, 1]) @ B


@sp.func
def f_from_rows(A, B, u):
    return sp.mat3(u, A[2], B[0] * 2.0)


@sp.func
def f_identity(A, B, u):
    return A + sp.mat3.identity() * u[1]


@sp.func
def f_nonsquare(A, B, u):
    return (sp.Matrix([A[0], A[1]]) @ sp.Matrix([B[0], B[1], B[2]]).T)[1]


@sp.func
def f_zero(A, B, u):
    return sp.Matrix(2, 2).zero() + A


@sp.func
def f_list_literal(A, B, u):
    return sp.Matrix([[A[0, 0], 1.0], [u[1], A[1, 1]]]) * B


@sp.func
def f_math(A, B, u):
    return sp.sin(A) + abs(B) * sp.exp(-A * A)


OPS = [   # (name, size n, kernel function, float64 reference)
    ("add", 3, f_add, lambda A, B, u: A + B),
    ("sub_scalar", 3, f_sub_scalar, lambda A, B, u: A - 2 * B + 1.5),
    ("mul_div", 2, f_mul_div, lambda A, B, u: A * B / (B * B + 1)),
    ("neg", 4, f_neg, lambda A, B, u: -0.5 * A),
    ("matmul", 3, f_matmul, lambda A, B, u: A @ B),
    ("matmul4", 4, f_matmul4, lambda A, B, u: A @ B @ A),
    ("matvec", 3, f_matvec, lambda A, B, u: A @ u),
    ("vecmat", 2, f_vecmat, lambda A, B, u: u @ A),
    ("dot_at", 3, f_dot_at, lambda A, B, u: u @ u),
    ("transpose", 3, f_transpose, lambda A, B, u: A.T @ B + B.T),
    ("trace", 4, f_trace, lambda A, B, u: np.trace(A @ B)),
    ("determinant2", 2, f_determinant2, lambda A, B, u: np.linalg.det(A)),
    ("determinant3", 3, f_determinant3, lambda A, B, u: np.linalg.det(A)),
    ("determinant4", 4, f_determinant4, lambda A, B, u: np.linalg.det(A)),
    ("inverse2", 2, f_inverse2, lambda A, B, u: np.linalg.inv(A)),
    ("inverse3", 3, f_inverse3, lambda A, B, u: np.linalg.inv(A)),
    ("inverse4", 4, f_inverse4, lambda A, B, u: np.linalg.inv(A)),
    ("outer", 3, f_outer, lambda A, B, u: np.outer(u, A[1]) + A),
    ("element_row", 3, f_element_row, lambda A, B, u: A[1, 2] * A[0] + B[2] * A[2, 1]),
    ("from_scalars", 2, f_from_scalars, lambda A, B, u: np.array([[A[1, 1], u[0]], [2.0, A[0, 1]]]) @ B),
    ("from_rows", 3, f_from_rows, lambda A, B, u: np.stack([u, A[2], 2 * B[0]])),
    ("identity", 3, f_identity, lambda A, B, u: A + np.eye(3) * u[1]),
    ("nonsquare", 3, f_nonsquare, lambda A, B, u: (A[:2] @ B.T)[1]),
    ("zero", 2, f_zero, lambda A, B, u: A),
    ("list_literal", 2, f_list_literal, lambda A, B, u: np.array([[A[0, 0], 1.0], [u[1], A[1, 1]]]) * B),
    ("math", 3, f_math, lambda A, B, u: np.sin(A) + abs(B) * np.exp(-A * A)),
]


def run_op(rng, n, f, m=5, well=False):
    A = well_conditioned(rng, m, n, [2.0, 1.3, 0.8, 1.6][:n]) if well else rand(rng, (m, n, n))
    B, U = rand(rng, (m, n, n)), rand(rng, (m, n))
    mt = sp.Matrix(n, n)
    args = [sp.from_numpy(A, dtype=mt), sp.from_numpy(B, dtype=mt), sp.from_numpy(U, dtype=sp.Vector(n))]
    return A, B, U, args


def out_array(want, m):
    shape = want.shape[1:]
    dtype = sp.f32 if not shape else sp.Vector(shape[0]) if len(shape) == 1 else sp.Matrix(*shape)
    return sp.ndarray(dtype, (m,))


@pytest.mark.parametrize("name,n,f,ref", OPS, ids=[o[0] for o in OPS])
def test_matrix_ops(name, n, f, ref, rng):
    A, B, U, args = run_op(rng, n, f, well=name.startswith("inverse"))
    want = np.stack([np.asarray(ref(*(x[i].astype(np.float64) for x in (A, B, U)))) for i in range(len(A))])
    out = out_array(want, len(A))
    make_kernel(f)(*args, out)
    close(out.to_numpy(), want, 2e-5 if not name.startswith(("inverse", "determinant4")) else 1e-4)


# ---- svd and polar decomposition -------------------------------------------------------------------------
@sp.kernel
def decompose(a: sp.Array, u: sp.Array, s: sp.Array, v: sp.Array, r: sp.Array, p: sp.Array):
    for i in range(a.shape[0]):
        U, S, V = sp.svd(a[i])
        u[i], s[i], v[i] = U, S, V
        R, P = sp.polar_decompose(a[i])
        r[i], p[i] = R, P


def check_decompositions(A, rtol):
    m, n = A.shape[:2]
    mt = sp.Matrix(n, n)
    outs = [sp.ndarray(mt, (m,)) for _ in range(5)]
    decompose(sp.from_numpy(A, dtype=mt), *outs)
    U, S, V, R, P = (o.to_numpy().astype(np.float64) for o in outs)
    eye = np.broadcast_to(np.eye(n), U.shape)
    close(U @ S @ np.swapaxes(V, 1, 2), A, rtol)
    close(np.swapaxes(U, 1, 2) @ U, eye, rtol)
    close(np.swapaxes(V, 1, 2) @ V, eye, rtol)
    close(np.linalg.det(U), np.ones(m), rtol)
    close(np.linalg.det(V), np.ones(m), rtol)
    close(S * (1 - np.eye(n)) + eye, eye, rtol)   # diagonal
    sig = np.diagonal(S, axis1=1, axis2=2)
    assert np.all(np.abs(sig[:, :-1]) >= np.abs(sig[:, 1:]) - 1e-5) and np.all(sig[:, :-1] >= 0)
    # the last singular value carries det(A)'s sign; for an exactly singular A it is 0 up to rounding,
    # and its sign is the device's (lavapipe gave 0, NVIDIA a tiny positive value)
    det = np.linalg.det(A.astype(np.float64))
    scale = np.abs(A).reshape(m, -1).max(axis=1) ** n
    singular = np.abs(det) <= 1e-6 * scale
    assert np.all(np.sign(sig[~singular, -1]) == np.sign(det[~singular]))
    assert np.all(np.abs(sig[singular, -1]) <= rtol * np.abs(sig[singular, 0]))
    close(R @ P, A, rtol)
    close(np.swapaxes(R, 1, 2) @ R, eye, rtol)
    close(np.linalg.det(R), np.ones(m), rtol)
    close(P, np.swapaxes(P, 1, 2), rtol)
    return U, S, V, R, P


@pytest.mark.parametrize("n", [2, 3])
def test_svd_and_polar_identities(n, rng):
    A = np.concatenate([well_conditioned(rng, 6, n), rand(rng, (6, n, n))])
    U, S, V, R, P = check_decompositions(A, 2e-4)
    for i in range(len(A)):   # the host functions agree (U, V up to a joint sign per singular pair)
        hu, hs, hv = sp.svd(A[i].astype(np.float64))
        close(np.diagonal(S[i]), np.diagonal(hs), 2e-4)
        for k in range(n):
            close(np.outer(U[i][:, k], V[i][:, k]), np.outer(hu[:, k], hv[:, k]), 1e-3)
        hr, hp = sp.polar_decompose(A[i].astype(np.float64))
        close(R[i], hr, 1e-3)
        close(P[i], hp, 1e-3)


@pytest.mark.parametrize("n", [2, 3])
def test_svd_degenerate_inputs_stay_finite(n):
    """Diagonal, repeated and rank-deficient matrices: values are right (gradients are not promised)."""
    A = np.array([np.diag([3.0, 1.0, 2.0][:n]), np.diag([-2.0, 2.0, 2.0][:n]), np.eye(n),
                  np.outer(np.arange(1.0, n + 1), np.ones(n))], np.float32)
    check_decompositions(A, 1e-4)


# ---- arguments by value, atomics, locals, returns --------------------------------------------------------
def test_matrix_arguments_by_value(rng):
    @sp.kernel
    def k(out: sp.Array, m: sp.mat2, w: sp.Matrix(2, 3, sp.f32), s: sp.f32):
        for i in range(out.shape[0]):
            out[i] = (m @ w)[0] * s + float(i)

    out = sp.ndarray(sp.vec3, (3,))
    M, W = rand(rng, (2, 2)), rand(rng, (2, 3))
    k(out, M, W, 0.5)
    close(out.to_numpy(), [(M.astype(np.float64) @ W)[0] * 0.5 + i for i in range(3)])
    k(out, M.tolist(), W, 1.0)
    close(out.to_numpy(), [(M.astype(np.float64) @ W)[0] + i for i in range(3)])
    for bad in (W, [1.0, 2.0, 3.0, 4.0], "ab"):
        with pytest.raises(sp.ArgumentError, match="argument 'm'"):
            k(out, bad, W, 1.0)


@sp.func
def spin(R, w):
    if w[0] > 0.0:
        return R @ sp.mat2(0.0, -1.0, 1.0, 0.0)
    else:
        return R * w[1]


@sp.kernel
def accumulate(a: sp.Array, w: sp.Array, acc: sp.Array, n: sp.i32):
    for i in range(a.shape[0]):
        M = a[i]
        for _ in range(n):   # a matrix local carried through a dynamic loop
            M = spin(M, w[i]) + 0.1 * M
        M[0, 1] += 1.0
        acc[i % 2] += M


def test_matrix_locals_returns_and_atomics(rng):
    m, n = 6, 4
    A, W = rand(rng, (m, 2, 2)), rand(rng, (m, 2))
    acc = sp.ndarray(sp.mat2, (2,))
    accumulate(sp.from_numpy(A, dtype=sp.mat2), sp.from_numpy(W, dtype=sp.vec2), acc, n)
    want = np.zeros((2, 2, 2))
    for i in range(m):
        M = A[i].astype(np.float64)
        for _ in range(n):
            M = (M @ np.array([[0, -1], [1, 0]]) if W[i, 0] > 0 else M * W[i, 1]) + 0.1 * M
        M[0, 1] += 1
        want[i % 2] += M
    close(acc.to_numpy(), want, 1e-5)


# ---- errors name the file, the line and the source ----------------------------------------------------------
def _k_matmul_shapes(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i] @ sp.vec2(1.0, 2.0)


def _k_too_big(a: sp.Array):
    for i in range(a.shape[0]):
        x = sp.Matrix(12, 13).zero()


def _k_inverse5(a: sp.Array):
    for i in range(a.shape[0]):
        x = sp.inverse(sp.Matrix(5, 5).zero())


def _k_svd4(a: sp.Array):
    for i in range(a.shape[0]):
        x = sp.svd(sp.mat4.identity())


def _k_mat_plus_vec(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i] + sp.vec3(1.0)


def _k_compare(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i] < a[i]


def _k_trace_nonsquare(a: sp.Array):
    for i in range(a.shape[0]):
        x = sp.trace(sp.Matrix(2, 3).zero())


def _k_count(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.mat3(1.0, 2.0)


def _k_store_shape(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.mat2.identity()


def _k_attribute(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i].x


def _k_index_range(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i][3, 0]


def _k_scalar_matmul(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i] @ 2.0


def _k_dot_of_matrices(a: sp.Array):
    for i in range(a.shape[0]):
        x = sp.dot(a[i], a[i])


ERRORS = [
    (_k_matmul_shapes, "inner sizes 3 and 2", "a[i] @ sp.vec2"),
    (_k_too_big, "at most 144", "sp.Matrix(12, 13)"),
    (_k_inverse5, "sp.inverse supports", "sp.inverse"),
    (_k_svd4, "2x2 and 3x3", "sp.svd"),
    (_k_mat_plus_vec, "element-wise", "a[i] + sp.vec3"),
    (_k_compare, "comparing matrices", "a[i] < a[i]"),
    (_k_trace_nonsquare, "square", "sp.trace"),
    (_k_count, "needs 9 scalars", "sp.mat3(1.0, 2.0)"),
    (_k_store_shape, "3x3 matrices", "a[i] = sp.mat2"),
    (_k_attribute, "no attribute 'x'", "a[i].x"),
    (_k_index_range, "out of range", "a[i][3, 0]"),
    (_k_scalar_matmul, "@ needs matrices", "a[i] @ 2.0"),
    (_k_dot_of_matrices, "vector arguments", "sp.dot"),
]


@pytest.mark.parametrize("fn,fragment,source", ERRORS, ids=[e[0].__name__[3:] for e in ERRORS])
def test_compile_errors(fn, fragment, source):
    k = sp.kernel(fn)
    with pytest.raises(sp.CompileError) as e:
        k(sp.ndarray(sp.mat3, (4,)))
    assert fragment in e.value.message and source in e.value.source
    assert e.value.filename.endswith("test_matrices.py") and e.value.lineno > 0


# ---- Taichi-style methods: v.dot(w), v.norm(), M.transpose(), M.determinant(), ... -------------------------
@sp.kernel
def _methods(a: sp.Array, b: sp.Array, m: sp.Array, out: sp.Array):
    for i in range(a.shape[0]):
        u, v, M = a[i], b[i], m[i]
        out[i, 0] = u.dot(v) + u.norm() + u.norm_sqr() + u.sum() + u.max() - u.min()
        out[i, 1] = M.determinant() + M.trace() + M.transpose()[0, 1] + M.inverse()[1, 2]
        out[i, 2] = u.cross(v).dot(u.normalized()) + u.outer_product(v)[2, 0]


def test_taichi_style_methods(rng):
    A, B = rand(rng, (4, 3)), rand(rng, (4, 3))
    Mm = (rand(rng, (4, 3, 3)) + 2.0 * np.eye(3)).astype(np.float32)
    out = sp.ndarray(sp.f32, (4, 3))
    _methods(sp.from_numpy(A, dtype=sp.vec3), sp.from_numpy(B, dtype=sp.vec3), sp.from_numpy(Mm, dtype=sp.mat3), out)
    a, b, m = A.astype(np.float64), B.astype(np.float64), Mm.astype(np.float64)
    want = np.stack([
        (a * b).sum(1) + np.linalg.norm(a, axis=1) + (a * a).sum(1) + a.sum(1) + a.max(1) - a.min(1),
        np.linalg.det(m) + np.trace(m, axis1=1, axis2=2) + m[:, 1, 0] + np.linalg.inv(m)[:, 1, 2],
        (np.cross(a, b) * a / np.linalg.norm(a, axis=1, keepdims=True)).sum(1) + a[:, 2] * b[:, 0]], 1)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-5)


@sp.kernel
def _component_stores(m: sp.Array, v: sp.Array):
    for i in range(m.shape[0]):
        m[i] = sp.mat2.identity()
        m[i][1, 0] = 5.0 + i          # Taichi-style: a component of an array element
        m[i][0][1] += 2.0
        v[i][2] = 3.0
        v[i][0] += 1.0


def test_taichi_style_component_stores():
    m, v = sp.ndarray(sp.mat2, (3,)), sp.ndarray(sp.vec3, (3,))
    _component_stores(m, v)
    want = np.tile(np.eye(2), (3, 1, 1))
    want[:, 1, 0] = 5.0 + np.arange(3)
    want[:, 0, 1] += 2.0
    np.testing.assert_array_equal(m.to_numpy(), want)
    np.testing.assert_array_equal(v.to_numpy(), np.tile([1.0, 0.0, 3.0], (3, 1)))

"""Derivatives inside kernels (`sp.grad`, `value_and_grad`, `jacobian`, `hessian`, `jvp`, `vjp` of @sp.func
functions) against float64 central differences of numpy references and closed forms, and kernels using
them differentiated again by `k.grad`, `sp.Tape` and `sp.FwdMode` (second derivatives)."""
import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir import verify
from spvad.kernel import Kernel
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.printer import format_kernel
from spvad.pipeline import PRIMAL, run_passes

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

# tests run in reverse mode elsewhere (test_inkernel_reverse.py, with checks of their own), or pinning what
# spvad chooses
CHOSEN_MODE_ONLY = ("test_derivative_table", "test_reverse_mode_for_wide_straight_line_gradients")


@pytest.fixture(autouse=True, params=["chosen", "reverse"])
def derivative_mode(request, monkeypatch):
    """Each test twice: with the modes spvad chooses, and with every derivative along unit directions in
    reverse mode (the kernels compiled afresh)."""
    if request.param == "chosen":
        return
    if request.node.originalname in CHOSEN_MODE_ONLY:
        pytest.skip("checks the mode spvad chooses")
    from spvad.autodiff import inline_derivatives as D
    monkeypatch.setattr(D, "REVERSE_WIDTH_PER_OUTPUT", 0)
    monkeypatch.setattr(D, "REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS", 0)
    monkeypatch.setenv("SPVAD_CACHE", "0")
    module = request.module
    for name, k in list(vars(module).items()):
        if isinstance(k, Kernel):
            monkeypatch.setattr(module, name, sp.kernel(k.fn, ad_stack_size=k.ad_stack_size))

M = 4      # threads (points) per case
STEPS = 5  # the dynamic loop bound the kernels pass to the functions


def rand(rng, shape, lo=0.2, hi=1.0):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(np.float32)


def fd(fun, x, eps=1e-6):
    """d fun / d x by central differences in float64; the input's axes come last (a jacobian)."""
    x = np.asarray(x, np.float64)
    cols = []
    for j in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[j] = eps
        cols.append((np.asarray(fun(x + e), np.float64) - np.asarray(fun(x - e), np.float64)) / (2 * eps))
    return np.stack(cols, -1).reshape(np.shape(fun(x)) + x.shape)


def fd_hessian(fun, x, h=1e-4):
    """d2 fun / dx_i dx_j of a scalar function by central second differences in float64."""
    x = np.asarray(x, np.float64)
    n = x.size
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (fun(x + ei + ej) - fun(x + ei - ej) - fun(x - ei + ej) + fun(x - ei - ej)) / (4 * h * h)
    return H


def close(got, want, rtol=5e-4):
    want = np.asarray(want, np.float64)
    assert np.any(want != 0), "vacuous check: the reference is all zeros"
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol,
                               atol=rtol * float(np.max(np.abs(want))))


# ---- the derivative table: scalar functions f(p: vec3, s: f32, n: i32) ------------------------------------
@sp.func
def f_math(p, s, n):
    return sp.sin(p.x * s) * sp.exp(p.y) + sp.log(1.0 + p.z * p.z) + sp.sqrt(s * s + 1.0) * sp.atan2(p.y, 2.0) \
        + p.x ** 3 / (2.0 + s * s)


def r_math(p, s, n):
    return np.sin(p[0] * s) * np.exp(p[1]) + np.log(1 + p[2] ** 2) + np.sqrt(s * s + 1) * np.arctan2(p[1], 2.0) \
        + p[0] ** 3 / (2 + s * s)


@sp.func
def f_vector(p, s, n):
    q = sp.cross(p, sp.vec3(0.3, -0.5, 0.8)) * s
    return sp.length(q) + sp.dot(sp.normalize(p), sp.vec3(1.0, 2.0, 3.0)) / (1.0 + s * s)


def r_vector(p, s, n):
    q = np.cross(p, [0.3, -0.5, 0.8]) * s
    return np.linalg.norm(q) + (p / np.linalg.norm(p)) @ [1.0, 2.0, 3.0] / (1 + s * s)


@sp.func
def f_loop(p, s, n):
    acc = 0.0
    q = p
    for k in range(n):   # n is a kernel argument: a dynamic bound; acc and q are loop-carried
        acc = acc * 0.8 + sp.sin(q.x * s + 0.3 * k) * q.y
        q = q + 0.1 * sp.vec3(q.y, -q.x, s * q.z)
    return acc + sp.dot(q, q)


def r_loop(p, s, n):
    acc, q = 0.0, np.array(p, np.float64)
    for k in range(n):
        acc = acc * 0.8 + np.sin(q[0] * s + 0.3 * k) * q[1]
        q = q + 0.1 * np.array([q[1], -q[0], s * q[2]])
    return acc + q @ q


@sp.func
def f_while(p, s, n):
    x = p * s
    k = 0
    total = 0.0
    while True:
        k += 1
        x = x * 0.9 + 0.2 * sp.sin(sp.vec3(x.y, x.z, x.x))
        if k % 2 == 0:
            continue
        total += x.x * x.y
        if k >= n:
            break
    return total + sp.dot(x, p)


def r_while(p, s, n):
    x, k, total = np.array(p, np.float64) * s, 0, 0.0
    while True:
        k += 1
        x = x * 0.9 + 0.2 * np.sin(np.array([x[1], x[2], x[0]]))
        if k % 2 == 0:
            continue
        total += x[0] * x[1]
        if k >= n:
            break
    return total + x @ p


@sp.func
def f_branches(p, s, n):
    a = 0.0
    if p.x * p.y > 0.0:
        a = p.x * p.y * s
    elif p.z > 0.0:
        a = sp.exp(p.z) * s * s
    else:
        a = sp.cos(p.z + s)
    b = p.y * p.y if s > 0.0 else p.y * s
    return a + b + max(p.x, p.z) * abs(s) + sp.select(p.y > 0.0, p.x * 2.0, p.z * 3.0)


def r_branches(p, s, n):
    if p[0] * p[1] > 0:
        a = p[0] * p[1] * s
    elif p[2] > 0:
        a = np.exp(p[2]) * s * s
    else:
        a = np.cos(p[2] + s)
    b = p[1] ** 2 if s > 0 else p[1] * s
    return a + b + max(p[0], p[2]) * abs(s) + (p[0] * 2 if p[1] > 0 else p[2] * 3)


@sp.func
def bump(x, s):
    if x > 0.5:
        return x * s   # an early return
    return sp.tanh(x) * s * s


@sp.func
def f_nested(p, s, n):
    return bump(p.x, s) + bump(p.y * p.z, s) * bump(p.z, 0.5)


def r_bump(x, s):
    return x * s if x > 0.5 else np.tanh(x) * s * s


def r_nested(p, s, n):
    return r_bump(p[0], s) + r_bump(p[1] * p[2], s) * r_bump(p[2], 0.5)


@sp.func
def potential(p, s):
    return s * sp.dot(p, p) * p.x + sp.sin(p.y * s)


@sp.func
def f_calls_grad(p, s, n):
    g = sp.grad(potential, argnums=0)(p, s)   # a func differentiating another func
    return sp.dot(g, sp.vec3(0.5, -1.0, 2.0)) + potential(p, s)


def r_calls_grad(p, s, n):
    g = np.array([s * (p @ p) + 2 * s * p[0] ** 2, 2 * s * p[0] * p[1] + s * np.cos(p[1] * s),
                  2 * s * p[0] * p[2]])
    return g @ [0.5, -1.0, 2.0] + s * (p @ p) * p[0] + np.sin(p[1] * s)


@sp.func
def f_matrix(p, s, n):
    A = sp.outer(p, p) + s * sp.mat3.identity()
    return sp.trace(A @ A) + (A @ p).y


def r_matrix(p, s, n):
    A = np.outer(p, p) + s * np.eye(3)
    return np.trace(A @ A) + (A @ p)[1]


TABLE = {"math": (f_math, r_math), "vector": (f_vector, r_vector), "loop": (f_loop, r_loop),
         "while": (f_while, r_while), "branches": (f_branches, r_branches), "nested": (f_nested, r_nested),
         "calls_grad": (f_calls_grad, r_calls_grad), "matrix": (f_matrix, r_matrix)}


def table_kernel(f):
    @sp.kernel
    def derivatives(pts: sp.Array, ss: sp.Array, n: sp.i32, val: sp.Array, gp: sp.Array, gs: sp.Array,
                    gs1: sp.Array, hp: sp.Array):
        for i in range(pts.shape[0]):
            v, (a, b) = sp.value_and_grad(f, argnums=(0, 1))(pts[i], ss[i], n)
            val[i] = v
            gp[i] = a
            gs[i] = b
            gs1[i] = sp.grad(f, argnums=1)(pts[i], ss[i], n)
            hp[i] = sp.hessian(f, argnums=0)(pts[i], ss[i], n)
    return derivatives


def run_table(name, rng, kernel):
    """Launch a table_kernel on random points and check every output against float64 references; returns
    the launch's arguments."""
    f, ref = TABLE[name]
    P, S = rand(rng, (M, 3)), rand(rng, M)
    outs = [sp.ndarray(sp.f32, (M,)), sp.ndarray(sp.vec3, (M,)), sp.ndarray(sp.f32, (M,)),
            sp.ndarray(sp.f32, (M,)), sp.ndarray(sp.mat3, (M,))]
    args = (sp.from_numpy(P, dtype=sp.vec3), sp.from_numpy(S), STEPS, *outs)
    kernel(*args)
    val, gp, gs, gs1, hp = (o.to_numpy() for o in outs)
    for i in range(M):
        p, s = P[i].astype(np.float64), float(S[i])
        assert val[i] == pytest.approx(ref(p, s, STEPS), rel=1e-5, abs=1e-5)
        close(gp[i], fd(lambda q: ref(q, s, STEPS), p))
        assert gs[i] == pytest.approx(fd(lambda t: ref(p, t, STEPS), s), rel=5e-4, abs=5e-5)
        assert gs1[i] == pytest.approx(gs[i], rel=1e-5, abs=1e-6)   # two derivatives, rounding apart
        close(hp[i], fd_hessian(lambda q: ref(q, s, STEPS), p), 2e-3)
    return args


@pytest.mark.parametrize("name", sorted(TABLE))
def test_derivative_table(name, rng):
    run_table(name, rng, table_kernel(TABLE[name][0]))


# ---- closed forms -----------------------------------------------------------------------------------------
@sp.func
def sphere(p, r):
    return sp.length(p) - r


@sp.kernel
def sphere_derivatives(pts: sp.Array, r: sp.f32, n: sp.Array, dr: sp.Array, H: sp.Array, lap: sp.Array):
    for i in range(pts.shape[0]):
        n[i] = sp.grad(sphere, argnums=0)(pts[i], r)
        dr[i] = sp.grad(sphere, argnums=1)(pts[i], r)
        h = sp.hessian(sphere, argnums=0)(pts[i], r)
        H[i] = h
        lap[i] = sp.trace(h)


def test_sphere_closed_form(rng):
    """grad |p| - r = p / |p|, d/dr = -1, hessian (I - n n^T) / |p|, laplacian 2 / |p|."""
    P = rand(rng, (M, 3))
    n, dr, H, lap = (sp.ndarray(t, (M,)) for t in (sp.vec3, sp.f32, sp.mat3, sp.f32))
    sphere_derivatives(sp.from_numpy(P, dtype=sp.vec3), 0.5, n, dr, H, lap)
    P64 = P.astype(np.float64)
    L = np.linalg.norm(P64, axis=1)
    nn = P64 / L[:, None]
    close(n.to_numpy(), nn, 1e-5)
    np.testing.assert_array_equal(dr.to_numpy(), -np.ones(M))
    close(H.to_numpy(), (np.eye(3)[None] - nn[:, :, None] * nn[:, None, :]) / L[:, None, None], 1e-5)
    close(lap.to_numpy(), 2 / L, 1e-5)


def sphere_normals(pts: sp.Array, r: sp.f32, out: sp.Array):
    for i in range(pts.shape[0]):
        out[i] = sp.grad(sphere, argnums=0)(pts[i], r)


def test_derivative_statement_prints_and_verifies():
    kernel, _, _ = build_kernel(sphere_normals, [ArraySpec(sp.vec3, 1), T.f32, ArraySpec(sp.vec3, 1)])
    text = format_kernel(kernel)
    assert "derivative width=3:" in text and "seed f32" in text and "direction=2" in text
    verify.verify(kernel)
    seed = next(s for s in N.walk(kernel.tasks[0].body) if isinstance(s, N.Seed))
    seed.tangents = seed.tangents[:2]
    with pytest.raises(verify.IRVerifyError, match="a seed needs 3 tangents, got 2"):
        verify.verify(kernel)


def test_unused_value_and_inactive_arguments_emit_nothing():
    """grad(sphere, argnums=0) needs neither r (inactive, and only in the unused value) nor the value."""
    kernel, _, _ = build_kernel(sphere_normals, [ArraySpec(sp.vec3, 1), T.f32, ArraySpec(sp.vec3, 1)])
    kernel, _ = run_passes(kernel, PRIMAL, verify_each=True)
    stmts = list(N.walk(kernel.tasks[0].body))
    assert not any(isinstance(s, N.ScalarArg) for s in stmts)
    assert not any(isinstance(s, (N.Derivative, N.Seed, N.Tangent, N.Alloca)) for s in stmts)


@sp.func
def wave(x, y, *, k=2.0):
    return sp.sin(x) * y ** 3 * k


@sp.kernel
def wave_derivatives(xs: sp.Array, g: sp.Array, t: sp.Array, hxy: sp.Array, hyy: sp.Array):
    for i in range(xs.shape[0]):
        g[i] = sp.grad(wave, argnums=1)(xs[i], xs[i] * 2.0, k=3.0)   # keywords and defaults pass through
        y, t[i] = sp.jvp(wave, (xs[i], 1.5), (1, 0))                   # int tangents are floats
        if xs[i] > 0.0:   # a derivative inside a branch of the kernel
            H = sp.hessian(wave, argnums=(0, 1))(xs[i], 0.5)          # blocks H[a][b] = d2f / d arg_a d arg_b
            hxy[i] = H[0][1] - H[1][0]
            hyy[i] = H[1][1]


def test_hessian_blocks_keywords_and_branches(rng):
    X = rand(rng, 6)
    g, t, hxy, hyy = (sp.ndarray(sp.f32, (6,)) for _ in range(4))
    wave_derivatives(sp.from_numpy(X), g, t, hxy, hyy)
    X64 = X.astype(np.float64)
    close(g.to_numpy(), np.sin(X64) * 3 * (2 * X64) ** 2 * 3.0, 1e-5)
    close(t.to_numpy(), np.cos(X64) * 1.5 ** 3 * 2, 1e-5)
    np.testing.assert_array_equal(hxy.to_numpy(), 0.0)   # the mixed blocks are each other's transpose
    close(hyy.to_numpy(), np.where(X64 > 0, np.sin(X64) * 6 * 0.5 * 2, 0.0), 1e-5)


# ---- vector-valued functions: jacobian, jvp, vjp -----------------------------------------------------------
@sp.func
def warp(p, r):
    return p * sp.exp(-r * sp.dot(p, p))


def r_warp(p, r):
    return p * np.exp(-r * (p @ p))


@sp.func
def flow(p, r, n):
    q = p
    for _ in range(n):
        q = q + 0.2 * sp.vec3(sp.sin(q.y * r), q.z * q.x, -q.x * r)
    return q


def r_flow(p, r, n):
    q = np.array(p, np.float64)
    for _ in range(n):
        q = q + 0.2 * np.array([np.sin(q[1] * r), q[2] * q[0], -q[0] * r])
    return q


@sp.func
def flow3(p, r):
    return flow(p, r, 3)


@sp.func
def spiral(t, r):
    return sp.vec2(sp.cos(t) * r, sp.sin(t) * r * r)


def r_spiral(t, r):
    return np.array([np.cos(t) * r, np.sin(t) * r * r])


@sp.kernel
def vector_derivatives(pts: sp.Array, rs: sp.Array, tan: sp.Array, cot: sp.Array, n: sp.i32, Jp: sp.Array,
                       Jr: sp.Array, Jf: sp.Array, Js: sp.Array, jv: sp.Array, ct_p: sp.Array, ct_r: sp.Array,
                       val: sp.Array):
    for i in range(pts.shape[0]):
        a, b = sp.jacobian(warp, argnums=(0, 1))(pts[i], rs[i])   # vector -> vector: a matrix; scalar: a vector
        Jp[i] = a
        Jr[i] = b
        Jf[i] = sp.jacobian(flow, argnums=0)(pts[i], rs[i], n)
        Js[i] = sp.jacobian(spiral, argnums=0)(rs[i], 1.5)   # scalar -> vector: a vector
        y, t = sp.jvp(flow3, (pts[i], rs[i]), (tan[i], 0.7))
        jv[i] = t
        y2, cts = sp.vjp(flow3, (pts[i], rs[i]), cot[i])
        ct_p[i] = cts[0]
        ct_r[i] = cts[1]
        val[i] = y + y2


def test_jacobian_jvp_vjp(rng):
    P, R, Tn, C = rand(rng, (M, 3)), rand(rng, M), rand(rng, (M, 3)), rand(rng, (M, 3))
    outs = [sp.ndarray(t, (M,)) for t in (sp.mat3, sp.vec3, sp.mat3, sp.vec2, sp.vec3, sp.vec3, sp.f32, sp.vec3)]
    vector_derivatives(sp.from_numpy(P, dtype=sp.vec3), sp.from_numpy(R), sp.from_numpy(Tn, dtype=sp.vec3),
                       sp.from_numpy(C, dtype=sp.vec3), STEPS, *outs)
    Jp, Jr, Jf, Js, jv, ct_p, ct_r, val = (o.to_numpy().astype(np.float64) for o in outs)
    for i in range(M):
        p, r, t, c = P[i].astype(np.float64), float(R[i]), Tn[i].astype(np.float64), C[i].astype(np.float64)
        close(Jp[i], fd(lambda q: r_warp(q, r), p))
        close(Jr[i], fd(lambda x: r_warp(p, x), r))
        close(Jf[i], fd(lambda q: r_flow(q, r, STEPS), p))
        close(Js[i], fd(lambda x: r_spiral(x, 1.5), r))
        close(val[i], 2 * r_flow(p, r, 3), 1e-5)
        J3p, J3r = fd(lambda q: r_flow(q, r, 3), p), fd(lambda x: r_flow(p, x, 3), r)
        close(jv[i], J3p @ t + J3r * 0.7)
        close(ct_p[i], J3p.T @ c)
        assert ct_r[i] == pytest.approx(J3r @ c, rel=5e-4, abs=5e-5)
        # <J t, c> = <t, J^T c>, the two modes on the device
        assert jv[i] @ c == pytest.approx(t @ ct_p[i] + 0.7 * ct_r[i], rel=1e-4, abs=1e-5)


# ---- matrices in and out ------------------------------------------------------------------------------------
@sp.func
def det_scaled(A, s):
    return sp.determinant(A) * s


@sp.func
def rotation(t):
    return sp.mat2(sp.cos(t), -sp.sin(t), sp.sin(t), sp.cos(t))


@sp.kernel
def matrix_derivatives(As: sp.Array, ts: sp.Array, gA: sp.Array, dR: sp.Array):
    for i in range(As.shape[0]):
        gA[i] = sp.grad(det_scaled, argnums=0)(As[i], ts[i])
        dR[i] = sp.jacobian(rotation, argnums=0)(ts[i])   # scalar -> matrix: a matrix


def test_matrix_arguments_and_results(rng):
    """d det(A) s / dA = s det(A) A^-T; d R(t) / dt = R(t + pi/2)."""
    A, t = rand(rng, (M, 3, 3)) + 2 * np.eye(3, dtype=np.float32), rand(rng, M)
    gA, dR = sp.ndarray(sp.mat3, (M,)), sp.ndarray(sp.mat2, (M,))
    matrix_derivatives(sp.from_numpy(A, dtype=sp.mat3), sp.from_numpy(t), gA, dR)
    A64, t64 = A.astype(np.float64), t.astype(np.float64)
    close(gA.to_numpy(), t64[:, None, None] * np.linalg.det(A64)[:, None, None] * np.linalg.inv(A64).transpose(0, 2, 1))
    c, s = np.cos(t64 + np.pi / 2), np.sin(t64 + np.pi / 2)
    close(dR.to_numpy(), np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], 1), 1e-5)


# ---- second derivatives: kernels using sp.grad, differentiated by k.grad, Tape and FwdMode ------------------
@sp.func
def blob(p, r):
    return sp.length(p) - r + 0.2 * sp.sin(r * p.x) * p.y


@sp.kernel
def normals_dot(pts: sp.Array, r: sp.Array, d: sp.Array, loss: sp.Array):
    for i in range(pts.shape[0]):
        n = sp.grad(blob, argnums=0)(pts[i], r[None])   # SDF normals (unnormalised)
        loss[None] += sp.dot(n, d[i])


def normals_dot_ref(P, r, D):
    n = P / np.linalg.norm(P, axis=1, keepdims=True)
    n[:, 0] += 0.2 * np.cos(r * P[:, 0]) * r * P[:, 1]
    n[:, 1] += 0.2 * np.sin(r * P[:, 0])
    return float((n * D).sum())


def test_sdf_normals_second_order(rng):
    P, D, R = rand(rng, (M, 3)), rand(rng, (M, 3)), np.float32(0.8)
    pts = sp.from_numpy(P, dtype=sp.vec3, needs_grad=True, needs_dual=True)
    r = sp.from_numpy(np.array(R), needs_grad=True, needs_dual=True)
    d = sp.from_numpy(D, dtype=sp.vec3)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    P64, D64, R64 = P.astype(np.float64), D.astype(np.float64), float(R)
    want_p = fd(lambda q: normals_dot_ref(q, R64, D64), P64)
    want_r = fd(lambda x: normals_dot_ref(P64, x, D64), R64)
    normals_dot(pts, r, d, loss)   # k.grad with a hand-set seed
    assert float(loss.to_numpy()) == pytest.approx(normals_dot_ref(P64, R64, D64), rel=1e-5)
    loss.grad.fill(0.5)
    normals_dot.grad(pts, r, d, loss)
    close(pts.grad.to_numpy(), 0.5 * want_p)
    assert float(r.grad.to_numpy()) == pytest.approx(0.5 * want_r, rel=5e-4)
    with sp.Tape(loss=loss):
        normals_dot(pts, r, d, loss)
    close(pts.grad.to_numpy(), want_p)
    assert float(r.grad.to_numpy()) == pytest.approx(want_r, rel=5e-4)
    with sp.FwdMode(loss=loss, param=r):
        normals_dot(pts, r, d, loss)
    assert float(loss.dual.to_numpy()) == pytest.approx(want_r, rel=5e-4)
    seed = rand(rng, (M, 3))
    with sp.FwdMode(loss=loss, param=pts, seed=seed.reshape(-1)):
        normals_dot(pts, r, d, loss)
    assert float(loss.dual.to_numpy()) == pytest.approx(float((want_p * seed).sum()), rel=5e-4)


def gradient_dot_kernel(f):
    @sp.kernel
    def gradient_dot(pts: sp.Array, s: sp.Array, d: sp.Array, n: sp.i32, loss: sp.Array):
        for i in range(pts.shape[0]):
            loss[None] += sp.dot(sp.grad(f, argnums=0)(pts[i], s[None], n), d[i])
    return gradient_dot


@pytest.mark.parametrize("name", ["loop", "while", "calls_grad"])
def test_second_order_through_loops(name, rng):
    """loss = sum_i grad_p f(p_i, s) . d_i: d loss / d p_i = H_pp d_i, d loss / ds = sum_i d_i . d2f/dp ds.
    Kernel-level reverse mode keeps the loop-carried tangents on adstacks."""
    f, ref = TABLE[name]
    P, D, S = rand(rng, (M, 3)), rand(rng, (M, 3)), np.float32(0.7)
    pts = sp.from_numpy(P, dtype=sp.vec3, needs_grad=True)
    s = sp.from_numpy(np.array(S), needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    k = gradient_dot_kernel(f)
    with sp.Tape(loss=loss):
        k(pts, s, sp.from_numpy(D, dtype=sp.vec3), STEPS, loss)
    s64, h = float(S), 1e-4
    want_p, want_s = [], 0.0
    for p, dd in zip(P.astype(np.float64), D.astype(np.float64)):
        want_p.append(fd_hessian(lambda q: ref(q, s64, STEPS), p) @ dd)
        want_s += sum(ref(p + a * h * dd, s64 + b * h, STEPS) * a * b for a in (1, -1) for b in (1, -1)) / (4 * h * h)
    close(pts.grad.to_numpy(), np.array(want_p), 2e-3)
    assert float(s.grad.to_numpy()) == pytest.approx(want_s, rel=2e-3)
    with sp.FwdMode(loss=loss, param=s):
        k(pts, s, sp.from_numpy(D, dtype=sp.vec3), STEPS, loss)
    assert float(loss.dual.to_numpy()) == pytest.approx(want_s, rel=2e-3)


@sp.func
def residual(x, a):
    return x * x * x + a * x - 1.0


@sp.kernel
def newton(a: sp.Array, roots: sp.Array, steps: sp.i32):
    for i in range(a.shape[0]):
        x = 1.0
        for _ in range(steps):   # sp.grad inside a dynamic kernel loop: reverse mode uses adstacks
            r, dr = sp.value_and_grad(residual)(x, a[i])
            x = x - r / dr
        roots[i] = x


def test_newton_root_and_its_gradient():
    """The root x(a) of x^3 + a x - 1, and dx/da = -x / (3 x^2 + a) (implicit function theorem)."""
    A = np.array([0.5, 1.0, 2.0, 3.0], np.float32)
    a, roots = sp.from_numpy(A, needs_grad=True), sp.ndarray(sp.f32, (4,), needs_grad=True)
    newton(a, roots, 8)
    x = roots.to_numpy().astype(np.float64)
    np.testing.assert_allclose(x ** 3 + A * x - 1, 0, atol=1e-6)
    roots.grad.fill(1.0)
    newton.grad(a, roots, 8)
    close(a.grad.to_numpy(), -x / (3 * x * x + A), 1e-5)


# ---- sp.stop_gradient ---------------------------------------------------------------------------------------
@sp.func
def half_stopped(p):
    return p.x * sp.stop_gradient(p.x * p.y) + sp.dot(sp.stop_gradient(p), p)


@sp.kernel
def stopped_grad(pts: sp.Array, g: sp.Array):
    for i in range(pts.shape[0]):
        g[i] = sp.grad(half_stopped)(pts[i])


def test_stop_gradient_in_derivatives(rng):
    """d/dp [x sg(x y) + sg(p) . p] = (x y, 0, 0) + p: the stopped factors are constants."""
    P = rand(rng, (M, 3))
    g = sp.ndarray(sp.vec3, (M,))
    stopped_grad(sp.from_numpy(P, dtype=sp.vec3), g)
    want = P.astype(np.float64).copy()
    want[:, 0] += P[:, 0].astype(np.float64) * P[:, 1]
    close(g.to_numpy(), want, 1e-6)


# ---- a transform bound to a name: in the kernel, or once at module level (as JAX users write it) --------
@sp.func
def _bumpy(p, r):
    return sp.length(p) - r + 0.1 * sp.sin(2.0 * p[0]) * p[1]


_BUMPY_NORMAL = sp.grad(_bumpy, argnums=0)
_BUMPY_HESSIAN = sp.hessian(_bumpy)


@sp.kernel
def _bound_transforms(pts: sp.Array, n_local: sp.Array, n_global: sp.Array, h: sp.Array):
    for i in range(pts.shape[0]):
        df = sp.grad(_bumpy, argnums=0)
        n_local[i] = df(pts[i], 0.5)
        n_global[i] = _BUMPY_NORMAL(pts[i], 0.5)
        h[i] = _BUMPY_HESSIAN(pts[i], 0.5)


def _bumpy_np(p):
    return np.linalg.norm(p) - 0.5 + 0.1 * np.sin(2.0 * p[0]) * p[1]


def test_transforms_bound_to_names(rng):
    P = rand(rng, (M, 3))
    pts = sp.from_numpy(P, dtype=sp.vec3)
    n_local, n_global, h = sp.ndarray(sp.vec3, (M,)), sp.ndarray(sp.vec3, (M,)), sp.ndarray(sp.mat3, (M,))
    _bound_transforms(pts, n_local, n_global, h)
    for k in range(M):
        want = fd(_bumpy_np, P[k])
        np.testing.assert_allclose(n_local.to_numpy()[k], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(n_global.to_numpy()[k], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(h.to_numpy()[k], fd_hessian(_bumpy_np, P[k]), rtol=2e-3, atol=2e-3)
    with pytest.raises(TypeError, match="only be called inside a kernel"):
        _BUMPY_NORMAL(P[0], 0.5)


# ---- which mode expands a transform: reverse for straight-line functions with fewer outputs than inputs ----
@sp.func
def _energy(F, mu):
    J = sp.determinant(F)
    return mu * (sp.trace(F.T @ F) - 3.0) - 2.0 * mu * sp.log(J) + 0.5 * (J - 1.0) * (J - 1.0)


@sp.func
def _looped(p, n):
    acc = 0.0
    for _ in range(n):
        acc = acc + sp.sin(p[0] * acc + p[1])
    return acc


@sp.kernel
def _modes(Fs: sp.Array, P: sp.Array, n: sp.i32, stress: sp.Array, g: sp.Array, J: sp.Array):
    for i in range(Fs.shape[0]):
        stress[i] = sp.grad(_energy, argnums=0)(Fs[i], 0.7)        # 9 inputs, 1 output: reverse
        g[i] = sp.grad(_looped, argnums=0)(P[i], n)                  # a loop: forward
        J[i] = sp.jacobian(_energy, argnums=1)(Fs[i], 0.7)          # 1 input: forward


def test_reverse_mode_for_wide_straight_line_gradients(rng):
    from spvad.autodiff import inline_derivatives as D
    plans = {}   # derivative -> whether it takes reverse mode (asked more than once)
    original = D._reverse_plan
    def recorded(deriv):
        plan = original(deriv)
        plans[deriv] = plan is not None
        return plan
    D._reverse_plan = recorded
    try:
        F = (np.eye(3) + 0.2 * rand(rng, (M, 3, 3))).astype(np.float32)
        P = rand(rng, (M, 2))
        stress, g, J = sp.ndarray(sp.mat3, (M,)), sp.ndarray(sp.vec2, (M,)), sp.ndarray(sp.f32, (M,))
        _modes(sp.from_numpy(F, dtype=sp.mat3), sp.from_numpy(P, dtype=sp.vec2), 4, stress, g, J)
    finally:
        D._reverse_plan = original
    assert sorted(plans.values()) == [False, False, True]

    def energy(Fm, mu=0.7):
        j = np.linalg.det(Fm)
        return mu * (np.trace(Fm.T @ Fm) - 3.0) - 2.0 * mu * np.log(j) + 0.5 * (j - 1.0) ** 2

    def looped(p, n=4):
        acc = 0.0
        for _ in range(n):
            acc = acc + np.sin(p[0] * acc + p[1])
        return acc

    for i in range(M):
        Fi = F[i].astype(np.float64)
        close(stress.to_numpy()[i], fd(energy, Fi))
        close(g.to_numpy()[i], fd(looped, P[i].astype(np.float64)))
        assert J.to_numpy()[i] == pytest.approx(np.trace(Fi.T @ Fi) - 3.0 - 2.0 * np.log(np.linalg.det(Fi)),
                                                rel=1e-4)

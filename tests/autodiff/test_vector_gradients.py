"""Gradients of vector kernels: reverse mode (`k.grad`, `sp.Tape`) and forward mode (`k.fwd`, `sp.FwdMode`)
against central finite differences of float64 numpy references, including vector loop-carried values in
dynamic `for` and `while` loops (adstack capacities automatic)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def fd_grad(loss, arrays, k, eps=1e-6):
    """d loss(*arrays) / d arrays[k] by central differences, in float64."""
    base = [np.asarray(a, np.float64) for a in arrays]
    g = np.zeros(base[k].shape)
    for j in np.ndindex(g.shape):
        vals = []
        for h in (eps, -eps):
            a = [b.copy() for b in base]
            a[k][j] += h
            vals.append(loss(*a))
        g[j] = (vals[0] - vals[1]) / (2 * eps)
    return g


def close(got, want, rtol=2e-4):
    want = np.asarray(want, np.float64)
    assert np.any(want != 0), "vacuous check: the reference is all zeros"
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=rtol * float(np.max(np.abs(want))))


def vec(data, width, grad=True, dual=False):
    return sp.from_numpy(data, dtype=sp.Vector(width, sp.f32), needs_grad=grad, needs_dual=dual)


# ---- straight-line vector math ---------------------------------------------------------------------------
@sp.func
def shade(a, b, c):
    n = sp.normalize(sp.cross(a, b))
    return n * sp.dot(n, c) + sp.sin(a) * b / (1.5 + sp.length(c))


@sp.kernel
def vector_math(a: sp.Array, b: sp.Array, c: sp.Array, out: sp.Array, loss: sp.Array):
    for i in range(a.shape[0]):
        v = shade(a[i], b[i], c[i])
        out[i] = v * v.y - abs(c[i])
        loss[None] += sp.dot(v, sp.vec3(1.0, -2.0, 0.5)) + sp.length(a[i] - b[i])


def vector_math_ref(A, B, C):
    n = np.cross(A, B)
    n = n / np.linalg.norm(n, axis=1, keepdims=True)
    v = n * (n * C).sum(1, keepdims=True) + np.sin(A) * B / (1.5 + np.linalg.norm(C, axis=1, keepdims=True))
    out = v * v[:, 1:2] - np.abs(C)
    loss = (v @ np.array([1.0, -2.0, 0.5])).sum() + np.linalg.norm(A - B, axis=1).sum()
    return out, loss


def test_reverse_vector_math(rng):
    n = 6
    A, B, C = (rand(rng, (n, 3)) for _ in range(3))
    a, b, c = vec(A, 3), vec(B, 3), vec(C, 3)
    out, loss = sp.ndarray(sp.vec3, (n,), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    vector_math(a, b, c, out, loss)
    want_out, want_loss = vector_math_ref(*(x.astype(np.float64) for x in (A, B, C)))
    close(out.to_numpy(), want_out, 1e-5)
    assert loss.to_numpy() == pytest.approx(want_loss, rel=1e-5)
    seed = rand(rng, (n, 3), 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    loss.grad.fill(0.7)
    vector_math.grad(a, b, c, out, loss)

    def total(A, B, C):
        o, l = vector_math_ref(A, B, C)
        return float((seed * o).sum() + 0.7 * l)
    for k, arr in enumerate((a, b, c)):
        close(arr.grad.to_numpy(), fd_grad(total, [A, B, C], k))


# ---- vector loop-carried values in dynamic loops ---------------------------------------------------------
@sp.kernel
def rotate(p0: sp.Array, w: sp.Array, loss: sp.Array, dt: sp.f32, n: sp.i32):
    for i in range(p0.shape[0]):
        p = p0[i]
        for _ in range(n):
            p = p + dt * sp.vec2(-p[1], p[0]) * w[i] + dt * 0.3 * sp.sin(p)
        loss[None] += sp.dot(p, sp.vec2(1.0, 0.5)) + 0.25 * sp.dot(p, p)


def rotate_ref(P, W, dt, n):
    p = P.copy()
    for _ in range(n):
        p = p + dt * np.stack([-p[:, 1], p[:, 0]], 1) * W[:, None] + dt * 0.3 * np.sin(p)
    return float((p @ np.array([1.0, 0.5])).sum() + 0.25 * (p * p).sum())


@pytest.mark.parametrize("steps", [7, 40])
def test_tape_dynamic_loop_vector_carried(steps, rng):
    m, dt = 5, 0.05
    P, W = rand(rng, (m, 2)), rand(rng, m, 0.5, 1.5)
    p0, w = vec(P, 2), sp.from_numpy(W, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        rotate(p0, w, loss, dt, steps)
    P64, W64 = P.astype(np.float64), W.astype(np.float64)
    assert loss.to_numpy() == pytest.approx(rotate_ref(P64, W64, dt, steps), rel=1e-5)
    close(p0.grad.to_numpy(), fd_grad(lambda P, W: rotate_ref(P, W, dt, steps), [P64, W64], 0))
    close(w.grad.to_numpy(), fd_grad(lambda P, W: rotate_ref(P, W, dt, steps), [P64, W64], 1))


@sp.kernel
def grow(p0: sp.Array, c: sp.Array, out: sp.Array):
    for i in range(p0.shape[0]):
        p = p0[i]
        while sp.length(p) < 4.0:   # data-dependent trip count: the capacity is measured on the device
            p = p * 1.25 + c[i] * sp.sin(p)
        out[i] = p * p.x


def grow_ref(P, C):
    out = np.zeros_like(P)
    for i in range(len(P)):
        p = P[i].copy()
        while np.linalg.norm(p) < 4.0:
            p = p * 1.25 + C[i] * np.sin(p)
        out[i] = p * p[0]
    return out


def test_reverse_while_vector_carried(rng):
    m = 8
    P = (np.abs(rand(rng, (m, 3))) + 0.2).astype(np.float32)
    C = rand(rng, (m, 3), 0.05, 0.2)
    P64, C64 = P.astype(np.float64), C.astype(np.float64)
    p0, c, out = vec(P, 3), vec(C, 3), sp.ndarray(sp.vec3, (m,), needs_grad=True)
    grow(p0, c, out)
    close(out.to_numpy(), grow_ref(P64, C64), 1e-5)
    seed = rand(rng, (m, 3), 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    grow.grad(p0, c, out)
    for k, arr in enumerate((p0, c)):
        close(arr.grad.to_numpy(), fd_grad(lambda P, C: float((seed * grow_ref(P, C)).sum()), [P64, C64], k))


@sp.kernel
def oscillators(x0: sp.Array, v0: sp.Array, anchor: sp.Array, loss: sp.Array, dt: sp.f32, steps: sp.i32):
    for i in range(x0.shape[0]):
        x = x0[i]
        v = v0[i]
        for _ in range(steps):   # two loop-carried vec2 (symplectic Euler)
            f = -12.0 * (x - anchor[i]) + sp.vec2(0.0, -1.0) - 0.5 * v * sp.length(v)
            v = v + dt * f
            x = x + dt * v
        loss[None] += sp.dot(x, x) + sp.dot(v, sp.vec2(0.3, -0.2))


def oscillators_ref(X, V, A, dt, steps):
    x, v = X.copy(), V.copy()
    for _ in range(steps):
        f = -12.0 * (x - A) + np.array([0.0, -1.0]) - 0.5 * v * np.linalg.norm(v, axis=1, keepdims=True)
        v = v + dt * f
        x = x + dt * v
    return float((x * x).sum() + (v @ np.array([0.3, -0.2])).sum())


def test_tape_mass_spring_like(rng):
    m, dt, steps = 6, 0.02, 30
    X, V, A = rand(rng, (m, 2)), rand(rng, (m, 2)), rand(rng, (m, 2))
    x0, v0, anchor = vec(X, 2), vec(V, 2), vec(A, 2)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        oscillators(x0, v0, anchor, loss, dt, steps)
    args = [a.astype(np.float64) for a in (X, V, A)]
    assert loss.to_numpy() == pytest.approx(oscillators_ref(*args, dt, steps), rel=1e-5)
    for k, arr in enumerate((x0, v0, anchor)):
        close(arr.grad.to_numpy(), fd_grad(lambda X, V, A: oscillators_ref(X, V, A, dt, steps), args, k))


# ---- functions with vector returns and atomic adds of vectors --------------------------------------------
@sp.func
def bounce(v, n):
    if sp.dot(v, n) < 0.0:
        return v - 2.0 * sp.dot(v, n) * n
    else:
        return v * 0.9


@sp.kernel
def scatter(v: sp.Array, nrm: sp.Array, acc: sp.Array):
    for i in range(v.shape[0]):
        acc[i % 2] += bounce(v[i], sp.normalize(nrm[i])) * v[i].x


def scatter_ref(V, N):
    n = N / np.linalg.norm(N, axis=1, keepdims=True)
    d = (V * n).sum(1, keepdims=True)
    r = np.where(d < 0, V - 2 * d * n, 0.9 * V) * V[:, :1]
    return np.stack([r[0::2].sum(0), r[1::2].sum(0)])


def test_reverse_func_returns_and_vector_atomics(rng):
    m = 10
    V, Nn = rand(rng, (m, 3)), rand(rng, (m, 3))
    v, nrm, acc = vec(V, 3), vec(Nn, 3), sp.ndarray(sp.vec3, (2,), needs_grad=True)
    scatter(v, nrm, acc)
    V64, N64 = V.astype(np.float64), Nn.astype(np.float64)
    close(acc.to_numpy(), scatter_ref(V64, N64), 1e-5)
    seed = rand(rng, (2, 3), 0.5, 1.5, np.float64)
    acc.grad.from_numpy(seed)
    scatter.grad(v, nrm, acc)
    for k, arr in enumerate((v, nrm)):
        close(arr.grad.to_numpy(), fd_grad(lambda V, N: float((seed * scatter_ref(V, N)).sum()), [V64, N64], k))


# ---- forward mode ----------------------------------------------------------------------------------------
def test_forward_mode_agrees_with_reverse(rng):
    n = 6
    A, B, C = (rand(rng, (n, 3)) for _ in range(3))
    SA, SB, SC = (rand(rng, (n, 3), 0.5, 1.5) for _ in range(3))
    a, b, c = (vec(x, 3, dual=True) for x in (A, B, C))
    out = sp.ndarray(sp.vec3, (n,), needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    for arr, s in zip((a, b, c), (SA, SB, SC)):
        arr.dual.from_numpy(s)
    vector_math.fwd(a, b, c, out, loss)
    # reverse: loss' = sum(g * out) + h * loss; its gradient dotted with the seeds = the directional derivative
    g, h = rand(rng, (n, 3), 0.5, 1.5), 0.6
    out.grad.from_numpy(g)
    loss.grad.fill(h)
    vector_math.grad(a, b, c, out, loss)
    directional = sum(float((arr.grad.to_numpy().astype(np.float64) * s).sum()) for arr, s in
                      zip((a, b, c), (SA, SB, SC)))
    fwd = float((g.astype(np.float64) * out.dual.to_numpy()).sum() + h * loss.dual.to_numpy())
    assert fwd == pytest.approx(directional, rel=1e-4)
    # and the duals match a finite difference along the seeds
    args, seeds = [x.astype(np.float64) for x in (A, B, C)], [s.astype(np.float64) for s in (SA, SB, SC)]
    eps = 1e-6
    hi = vector_math_ref(*[x + eps * s for x, s in zip(args, seeds)])
    lo = vector_math_ref(*[x - eps * s for x, s in zip(args, seeds)])
    close(out.dual.to_numpy(), (hi[0] - lo[0]) / (2 * eps))
    assert float(loss.dual.to_numpy()) == pytest.approx((hi[1] - lo[1]) / (2 * eps), rel=1e-4)


def test_fwdmode_dynamic_loop_vector_param(rng):
    m, dt, steps = 4, 0.05, 12
    P, W = rand(rng, (m, 2)), rand(rng, m, 0.5, 1.5)
    seed = rand(rng, (m, 2), 0.5, 1.5, np.float64)
    p0 = sp.from_numpy(P, dtype=sp.vec2, needs_grad=True, needs_dual=True)
    w = sp.from_numpy(W, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    with sp.FwdMode(loss=loss, param=p0, seed=seed.reshape(-1)):
        rotate(p0, w, loss, dt, steps)
    P64, W64 = P.astype(np.float64), W.astype(np.float64)
    want = float((fd_grad(lambda P, W: rotate_ref(P, W, dt, steps), [P64, W64], 0) * seed).sum())
    assert float(loss.dual.to_numpy()) == pytest.approx(want, rel=1e-4)
    with sp.Tape(loss=loss):
        rotate(p0, w, loss, dt, steps)
    assert float((p0.grad.to_numpy() * seed).sum()) == pytest.approx(want, rel=1e-4)

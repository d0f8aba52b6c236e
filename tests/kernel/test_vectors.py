"""Vectors: the types, ndarrays of vectors, vector values in kernels (scalarised by the frontend) and the
errors, each checked against an independent float64 numpy reference on random non-zero data."""
import numpy as np
import pytest

import spvad as sp
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.printer import format_kernel


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)

RTOL = 2e-5


def close(got, want, rtol=RTOL):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol,
                               atol=rtol * max(float(np.max(np.abs(want))), 1e-30))


def vec_array(rng, n, width, lo=0.1, hi=1.0):
    data = rand(rng, (n, width), lo, hi)
    return data, sp.from_numpy(data, dtype=sp.Vector(width, sp.f32))


# ---- the types and the host side -------------------------------------------------------------------------
def test_vector_types():
    assert sp.vec3 == sp.Vector(3, sp.f32) and hash(sp.vec3) == hash(sp.Vector(3, sp.f32))
    assert sp.vec2 != sp.vec3 and sp.Vector(3, sp.f64) != sp.vec3
    assert (sp.vec4.n, sp.vec4.dtype) == (4, sp.f32) and repr(sp.vec2) == "vec2"
    assert {sp.vec2: 1}[sp.Vector(2, sp.f32)] == 1
    for bad in [(0, sp.f32), (145, sp.f32), (3, sp.u1), (3, "f32"), (2.0, sp.f32)]:
        with pytest.raises(TypeError):
            sp.Vector(*bad)


def test_host_vector_functions():
    v = sp.vec3(1, 2, 3)
    assert v.dtype == np.float32 and v.tolist() == [1.0, 2.0, 3.0]
    assert sp.Vector(2, sp.i32)(4, 5).dtype == np.int32
    assert sp.vec4(sp.vec2(1, 2), 3, 4).tolist() == [1, 2, 3, 4] and sp.vec3(2).tolist() == [2, 2, 2]
    with pytest.raises(TypeError):
        sp.vec3(1, 2)
    a, b = np.array([1.0, 2.0, 2.0]), np.array([0.5, -1.0, 3.0])
    assert sp.dot(a, b) == pytest.approx(a @ b)
    assert np.allclose(sp.cross(a, b), np.cross(a, b))
    assert sp.length(a) == pytest.approx(3.0)
    assert np.allclose(sp.normalize(a), a / 3.0)
    rows = np.stack([a, b])
    assert np.allclose(sp.length(rows), np.linalg.norm(rows, axis=1))


# ---- ndarrays of vectors ---------------------------------------------------------------------------------
def test_vector_ndarray_layout_and_io(rng):
    a = sp.ndarray(sp.vec3, (5,), needs_grad=True, needs_dual=True)
    assert a.shape == (5,) and a.storage_shape == (5, 3) and a.ndim == 1 and a.dtype == sp.vec3
    assert a.to_numpy().shape == (5, 3)
    assert a.grad.dtype == sp.vec3 and a.grad.shape == (5,) and a.dual.storage_shape == (5, 3)
    data = rand(rng, (5, 3))
    a.from_numpy(data)
    assert np.array_equal(a.to_numpy(), data)
    assert isinstance(a[2], np.ndarray) and np.array_equal(a[2], data[2]) and np.array_equal(a[-1], data[4])
    a[1] = [7.0, 8.0, 9.0]
    assert a.to_numpy()[1].tolist() == [7.0, 8.0, 9.0]
    a.fill(0.5)
    assert np.all(a.to_numpy() == 0.5)
    a.fill(sp.vec3(1, 2, 3))
    assert np.array_equal(a.to_numpy(), np.tile([1.0, 2.0, 3.0], (5, 1)))
    b = sp.from_numpy(rand(rng, (2, 4, 2)), dtype=sp.vec2)
    assert b.shape == (2, 4) and b.storage_shape == (2, 4, 2)
    c = sp.from_numpy(np.arange(8).reshape(4, 2), dtype=sp.Vector(2, sp.i32))
    assert c.to_numpy().dtype == np.int32 and c[3].tolist() == [6, 7]


def test_vector_ndarray_bad_input(rng):
    a = sp.ndarray(sp.vec3, (4,))
    for bad in (np.zeros(4), np.zeros((4, 2)), np.zeros((3, 3))):
        with pytest.raises(sp.ArgumentError, match="shape"):
            a.from_numpy(bad)
    with pytest.raises(sp.ArgumentError):
        a[0] = [1.0, 2.0]
    with pytest.raises(sp.ArgumentError):
        a.fill("x")
    with pytest.raises(sp.ArgumentError, match="last axis"):
        sp.from_numpy(np.zeros((4, 2)), dtype=sp.vec3)
    with pytest.raises(sp.ArgumentError, match="fraction"):
        sp.ndarray(sp.Vector(2, sp.i32), (3,)).from_numpy(np.zeros((3, 2)))


# ---- element-wise operators and functions: one row per expression ---------------------------------------
@sp.func
def f_add(a, b):
    return a + b


@sp.func
def f_sub(a, b):
    return a - b


@sp.func
def f_mul(a, b):
    return a * b


@sp.func
def f_div(a, b):
    return a / b


@sp.func
def f_scalars(a, b):
    return 2.0 * a - b / 4 + 1 - 3.0 / b


@sp.func
def f_neg_abs(a, b):
    return -a + abs(b)


@sp.func
def f_math(a, b):
    return sp.sin(a) * sp.exp(b) + sp.sqrt(abs(a))


@sp.func
def f_pow(a, b):
    return a ** 2 + sp.pow(abs(b), 1.5)


@sp.func
def f_minmax(a, b):
    return sp.min(a, b) + max(a, 0.3) + sp.clamp(b, -0.5, 0.5)


@sp.func
def f_normalize(a, b):
    return sp.normalize(a) * sp.length(b)


@sp.func
def f_select(a, b):
    return sp.select(a[0] > b[0], a, b * 2.0)


@sp.func
def f_ifexp(a, b):
    return a if b[1] < 0 else -a


@sp.func
def f_cast(a, b):
    return sp.cast(sp.f64(a) * b, sp.f32)


def _norm(a):
    return np.linalg.norm(a, axis=1, keepdims=True)


ROWS = [   # (@sp.func of two vectors, float64 numpy reference on (n, width) rows)
    (f_add, lambda a, b: a + b),
    (f_sub, lambda a, b: a - b),
    (f_mul, lambda a, b: a * b),
    (f_div, lambda a, b: a / b),
    (f_scalars, lambda a, b: 2 * a - b / 4 + 1 - 3 / b),
    (f_neg_abs, lambda a, b: -a + np.abs(b)),
    (f_math, lambda a, b: np.sin(a) * np.exp(b) + np.sqrt(np.abs(a))),
    (f_pow, lambda a, b: a ** 2 + np.abs(b) ** 1.5),
    (f_minmax, lambda a, b: np.minimum(a, b) + np.maximum(a, 0.3) + np.clip(b, -0.5, 0.5)),
    (f_normalize, lambda a, b: a / _norm(a) * _norm(b)),
    (f_select, lambda a, b: np.where(a[:, :1] > b[:, :1], a, 2 * b)),
    (f_ifexp, lambda a, b: np.where(b[:, 1:2] < 0, a, -a)),
    (f_cast, lambda a, b: a * b),
]


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("fn,ref", ROWS, ids=[r[0].__name__[2:] for r in ROWS])
def test_elementwise(fn, ref, width, rng):
    @sp.kernel
    def k(a: sp.Array, b: sp.Array, out: sp.Array):
        for i in range(a.shape[0]):
            out[i] = fn(a[i], b[i])

    n = 37
    A, a = vec_array(rng, n, width)
    B, b = vec_array(rng, n, width)
    out = sp.ndarray(sp.Vector(width, sp.f32), (n,))
    k(a, b, out)
    close(out.to_numpy(), ref(A.astype(np.float64), B.astype(np.float64)))


def test_dot_cross_length_components(rng):
    @sp.kernel
    def k(a: sp.Array, b: sp.Array, c: sp.Array, s: sp.Array):
        for i in range(a.shape[0]):
            u, v = a[i], b[i]
            c[i] = sp.cross(u, v) + sp.vec3(u.x, u[1], v[-1])
            s[i] = sp.dot(u, v) + sp.length(u) * v.z + len(u) + a[i][2] + a[i, 0]

    n = 50
    A, a = vec_array(rng, n, 3)
    B, b = vec_array(rng, n, 3)
    c, s = sp.ndarray(sp.vec3, (n,)), sp.ndarray(sp.f32, (n,))
    k(a, b, c, s)
    A, B = A.astype(np.float64), B.astype(np.float64)
    close(c.to_numpy(), np.cross(A, B) + np.stack([A[:, 0], A[:, 1], B[:, 2]], 1))
    close(s.to_numpy(), (A * B).sum(1) + np.linalg.norm(A, axis=1) * B[:, 2] + 3 + A[:, 2] + A[:, 0])


def test_vec2_vec4_and_other_dtypes(rng):
    v4i = sp.Vector(4, sp.i32)

    @sp.kernel
    def k(a: sp.Array, ia: sp.Array, out2: sp.Array, out4: sp.Array, iout: sp.Array):
        for i in range(a.shape[0]):
            v = a[i]
            out2[i] = sp.vec2(sp.dot(v, v), v.w - v.x) * 0.5
            out4[i] = sp.vec4(v.xy, v.zw * 2.0)
            iout[i] = ia[i] * 3 + v4i(1, 2, 3, i)

    n = 20
    A, a = vec_array(rng, n, 4)
    IA = rng.integers(-100, 100, (n, 4)).astype(np.int32)
    ia = sp.from_numpy(IA, dtype=v4i)
    out2, out4, iout = sp.ndarray(sp.vec2, (n,)), sp.ndarray(sp.vec4, (n,)), sp.ndarray(v4i, (n,))
    k(a, ia, out2, out4, iout)
    A = A.astype(np.float64)
    close(out2.to_numpy(), 0.5 * np.stack([(A * A).sum(1), A[:, 3] - A[:, 0]], 1))
    close(out4.to_numpy(), np.concatenate([A[:, :2], 2 * A[:, 2:]], 1))
    assert np.array_equal(iout.to_numpy(), IA * 3 + np.stack([np.full(n, 1), np.full(n, 2), np.full(n, 3),
                                                               np.arange(n)], 1))


def test_f64_vectors(rng):
    if not sp.device_info()["features"].get("float64"):
        pytest.skip("no float64 on this device")
    v3d = sp.Vector(3, sp.f64)

    @sp.kernel
    def k(a: sp.Array, out: sp.Array):
        for i in range(a.shape[0]):
            out[i] = a[i] * a[i] + v3d(1, 2, 3) / 3

    A = rand(rng, (9, 3), dtype=np.float64)
    a, out = sp.from_numpy(A, dtype=v3d), sp.ndarray(v3d, (9,))
    k(a, out)
    np.testing.assert_allclose(out.to_numpy(), A * A + np.array([1, 2, 3]) / 3, rtol=1e-14)


def test_2d_array_of_vectors(rng):
    @sp.kernel
    def k(x: sp.Array, out: sp.Array, comp: sp.Array):
        for i, j in sp.ndrange(x.shape[0], x.shape[1]):
            out[i, j] = x[i, j] * float(j) + sp.vec2(x.shape[0], len(x.shape))
            comp[i, j] = x[i, j][1] - x[i, j, 0]

    X = rand(rng, (3, 5, 2))
    x = sp.from_numpy(X, dtype=sp.vec2)
    out, comp = sp.ndarray(sp.vec2, (3, 5)), sp.ndarray(sp.f32, (3, 5))
    k(x, out, comp)
    X = X.astype(np.float64)
    close(out.to_numpy(), X * np.arange(5)[None, :, None] + np.array([3.0, 2.0]))
    close(comp.to_numpy(), X[..., 1] - X[..., 0])


def test_element_updates_unpacking_and_swizzles(rng):
    @sp.kernel
    def k(x: sp.Array, y: sp.Array, hi: sp.Array):
        for i in range(x.shape[0]):
            px, py, pz = x[i]
            x[i] *= sp.vec3(py, 2.0, px)
            y[i] = sp.vec3(y[i].zy, pz) / 2.0
            sp.atomic_max(hi[None], y[i])

    X, x = vec_array(rng, 25, 3)
    Y, y = vec_array(rng, 25, 3)
    hi = sp.ndarray(sp.vec3, ())
    hi.fill(-10.0)
    k(x, y, hi)
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    close(x.to_numpy(), X * np.stack([X[:, 1], np.full(25, 2.0), X[:, 0]], 1))
    want_y = np.stack([Y[:, 2], Y[:, 1], X[:, 2]], 1) / 2
    close(y.to_numpy(), want_y)
    close(hi.to_numpy(), want_y.max(0))


def test_atomic_adds_of_vectors(rng):
    @sp.kernel
    def k(x: sp.Array, acc: sp.Array, old: sp.Array, sub: sp.Array):
        for i in range(x.shape[0]):
            acc[i % 4] += x[i]
            sub[None] -= x[i] * 2.0
            sp.atomic_add(old[i], sp.vec3(1.0, 2.0, 3.0))

    n = 203
    X, x = vec_array(rng, n, 3)
    acc, old, sub = sp.ndarray(sp.vec3, (4,)), sp.ndarray(sp.vec3, (n,)), sp.ndarray(sp.vec3, ())
    acc.fill(1.0)
    k(x, acc, old, sub)
    X = X.astype(np.float64)
    want = np.stack([X[r::4].sum(0) for r in range(4)]) + 1
    close(acc.to_numpy(), want, 1e-4)
    close(sub.to_numpy(), -2 * X.sum(0), 1e-4)
    assert np.all(old.to_numpy() == np.array([1.0, 2.0, 3.0]))


def test_atomic_add_returns_the_old_vector(rng):
    @sp.kernel
    def k(acc: sp.Array, seen: sp.Array):
        for i in range(1):
            seen[0] = sp.atomic_add(acc[0], sp.vec2(1.0, -1.0))

    acc, seen = sp.from_numpy(np.array([[2.0, 5.0]], np.float32), dtype=sp.vec2), sp.ndarray(sp.vec2, (1,))
    k(acc, seen)
    assert seen.to_numpy().tolist() == [[2.0, 5.0]] and acc.to_numpy().tolist() == [[3.0, 4.0]]


# ---- locals, functions, control flow ---------------------------------------------------------------------
GRAVITY = sp.vec2(0.0, -9.8)


@sp.func
def spring_force(p, q, rest, stiffness):
    d = q - p
    dist = sp.length(d)
    return stiffness * (dist - rest) * d / dist


@sp.kernel
def spring_step(x: sp.Array, v: sp.Array, x_new: sp.Array, dt: sp.f32):
    for i in range(x.shape[0]):
        p = x[i]
        f = GRAVITY * 0.1
        if i > 0:
            f += spring_force(p, x[i - 1], 0.5, 20.0)
        if i < x.shape[0] - 1:
            f += spring_force(p, x[i + 1], 0.5, 20.0)
        vel = v[i] * 0.99 + dt * f
        v[i] = vel
        x_new[i] = p + dt * vel


def test_mass_spring(rng):
    n, dt, steps = 16, 0.01, 5
    X = np.stack([np.arange(n) * 0.6, rand(rng, n, 0.01, 0.1)], 1).astype(np.float32)
    V = rand(rng, (n, 2), 0.1, 0.5)
    x, v, xn = sp.from_numpy(X, dtype=sp.vec2), sp.from_numpy(V, dtype=sp.vec2), sp.ndarray(sp.vec2, (n,))
    for _ in range(steps):
        spring_step(x, v, xn, dt)
        x, xn = xn, x
    X, V = X.astype(np.float64), V.astype(np.float64)
    for _ in range(steps):
        f = np.tile([0.0, -0.98], (n, 1))
        for nb, mask in ((np.roll(X, 1, 0), np.arange(n) > 0), (np.roll(X, -1, 0), np.arange(n) < n - 1)):
            d = nb - X
            dist = np.linalg.norm(d, axis=1, keepdims=True)
            f += mask[:, None] * 20.0 * (dist - 0.5) * d / dist
        V = V * 0.99 + dt * f
        X = X + dt * V
    close(x.to_numpy(), X, 1e-5)
    close(v.to_numpy(), V, 1e-4)


@sp.func
def reflect(v, n):
    if sp.dot(v, n) < 0.0:
        return v - 2.0 * sp.dot(v, n) * n
    else:
        return v


@sp.func
def swap_scaled(a, b, s):
    a = a * s
    return b, a


def test_locals_functions_and_control_flow(rng):
    @sp.kernel
    def k(a: sp.Array, b: sp.Array, out: sp.Array, n: sp.i32):
        for i in range(a.shape[0]):
            u = a[i]
            w = sp.vec3(0.0)
            w += u
            w.y += 1.0
            w[2] = w[2] * 2.0
            t: sp.vec3 = 1
            for _ in range(n):
                w = w * 0.5 + t
            u, w = w, u
            for c in sp.static(range(3)):
                u[c] = u[c] + float(c)
            r = reflect(u, sp.normalize(b[i]))
            p, q = swap_scaled(r, w, 3.0)
            z = b[i] if a[i][0] > 0.0 else sp.vec3(a[i][1])
            total = sp.vec3(0.0)
            for x in sp.static(z):
                total = total + x
            out[i] = p + q + total

    N = 33
    A, a = vec_array(rng, N, 3)
    B, b = vec_array(rng, N, 3)
    out = sp.ndarray(sp.vec3, (N,))
    k(a, b, out, 3)
    A, B = A.astype(np.float64), B.astype(np.float64)
    w = A.copy()
    w[:, 1] += 1
    w[:, 2] *= 2
    for _ in range(3):
        w = w * 0.5 + 1
    u, w = w, A
    u = u + np.arange(3)
    nrm = B / np.linalg.norm(B, axis=1, keepdims=True)
    d = (u * nrm).sum(1, keepdims=True)
    r = np.where(d < 0, u - 2 * d * nrm, u)
    z = np.where(A[:, :1] > 0, B, np.repeat(A[:, 1:2], 3, 1))
    close(out.to_numpy(), w + 3 * r + z.sum(1, keepdims=True))


def test_lazy_top_level_vector_and_while(rng):
    @sp.kernel
    def k(a: sp.Array, out: sp.Array, steps: sp.Array):
        g = sp.vec2(0.5, -0.25) * 2.0
        for i in range(a.shape[0]):
            p = a[i]
            m = 0
            while sp.length(p) < 3.0:
                p = p * 1.5 + g
                m += 1
            out[i] = p
            steps[i] = m

    A = np.abs(rand(rng, (21, 2))) + 0.5
    a, out, steps = sp.from_numpy(A, dtype=sp.vec2), sp.ndarray(sp.vec2, (21,)), sp.ndarray(sp.i32, (21,))
    k(a, out, steps)
    P, M = A.astype(np.float64), np.zeros(21, np.int32)
    for i in range(21):
        while np.linalg.norm(P[i]) < 3.0:
            P[i] = P[i] * 1.5 + np.array([1.0, -0.5])
            M[i] += 1
    close(out.to_numpy(), P, 1e-5)
    assert np.array_equal(steps.to_numpy(), M)


def test_ifexp_with_loads_in_the_branches(rng):
    @sp.kernel
    def k(a: sp.Array, b: sp.Array, c: sp.Array, out: sp.Array):
        for i in range(a.shape[0]):
            out[i] = b[i] if c[i] > 0.0 else a[i] * 2.0

    A, a = vec_array(rng, 30, 4)
    B, b = vec_array(rng, 30, 4)
    C = rand(rng, 30)
    out = sp.ndarray(sp.vec4, (30,))
    k(a, b, sp.from_numpy(C), out)
    close(out.to_numpy(), np.where(C[:, None] > 0, B, 2.0 * A))


def test_vector_locals_are_one_slot_per_component():
    """The frontend's IR (the optimiser then forwards the slots away: see tests/ir/test_locals.py)."""
    def k(a: sp.Array, out: sp.Array):
        for i in range(a.shape[0]):
            v = a[i]
            out[i] = v

    vec3 = ArraySpec(sp.vec3, 1)
    kernel = build_kernel(k, [vec3, vec3])[0]
    ir = format_kernel(kernel)
    assert all(f'"v_{c}"' in ir for c in range(3)) and "f32,2d" in ir


# ---- errors ----------------------------------------------------------------------------------------------
def _k_width(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = a[i] + sp.vec2(1.0, 2.0)


def _k_index_range(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.vec3(a[i][3])


def _k_index_float(a: sp.Array):   # runtime integer indices are fine (test_local_arrays.py), floats not
    for i in range(a.shape[0]):
        v = a[i]
        a[i] = sp.vec3(v[v[0]])


def _k_loop_bound(a: sp.Array):
    for i in range(a.shape[0]):
        for j in range(a[i]):
            pass


def _k_array_index(a: sp.Array):
    for i in range(a.shape[0]):
        a[a[i]] = a[i]


def _k_if(a: sp.Array):
    for i in range(a.shape[0]):
        if a[i]:
            a[i] = a[i]


def _k_while(a: sp.Array):
    for i in range(a.shape[0]):
        while a[i] * 2.0:
            pass


def _k_rebind_width(a: sp.Array):
    for i in range(a.shape[0]):
        v = a[i]
        v = sp.vec2(1.0, 2.0)


def _k_scalar_to_vector(a: sp.Array):
    for i in range(a.shape[0]):
        s = 1.0
        s = a[i]


def _k_vector_to_scalar(a: sp.Array):
    for i in range(a.shape[0]):
        v = a[i]
        v = 1.0


def _k_compare(a: sp.Array):   # a comparison of vectors is a bool vector: .any() / .all() make a condition
    for i in range(a.shape[0]):
        if a[i] < a[i]:
            pass


def _k_cross2(a: sp.Array):
    for i in range(a.shape[0]):
        c = sp.cross(sp.vec2(1, 2), sp.vec3(3, 4, 5))


def _k_components(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.vec3(1.0, 2.0)


def _k_store_into_scalar(a: sp.Array, s: sp.Array):
    for i in range(a.shape[0]):
        s[i] = a[i]


def _k_swizzle(a: sp.Array):
    for i in range(a.shape[0]):
        x = a[i].q


ERRORS = [
    (_k_width, "vector widths differ", "sp.vec2(1.0, 2.0)"),
    (_k_index_range, "out of range", "a[i][3]"),
    (_k_index_float, "index must be an integer", "v[v[0]]"),
    (_k_loop_bound, "loop bounds", "range(a[i])"),
    (_k_array_index, "indices", "a[a[i]]"),
    (_k_if, "condition", "if a[i]"),
    (_k_while, "condition", "while a[i]"),
    (_k_rebind_width, "3-vector", "v = sp.vec2"),
    (_k_scalar_to_vector, "holds a scalar", "s = a[i]"),
    (_k_vector_to_scalar, "holds a vector", "v = 1.0"),
    (_k_compare, "cannot be used as a condition", "if a[i] < a[i]"),
    (_k_cross2, "two 3-vectors or two 2-vectors", "sp.cross"),
    (_k_components, "needs 3 components", "sp.vec3(1.0, 2.0)"),
    (_k_store_into_scalar, "expected a scalar", "s[i] = a[i]"),
    (_k_swizzle, "no attribute", ".q"),
]


@pytest.mark.parametrize("fn,fragment,source", ERRORS, ids=[e[0].__name__[3:] for e in ERRORS])
def test_compile_errors(fn, fragment, source):
    k = sp.kernel(fn)
    args = [sp.ndarray(sp.vec3, (4,))] + ([sp.ndarray(sp.f32, (4,))] if len(k.params) == 2 else [])
    with pytest.raises(sp.CompileError) as e:
        k(*args)
    assert fragment in e.value.message and source in e.value.source
    assert e.value.filename.endswith("test_vectors.py") and e.value.lineno > 0


# ---- vector arguments, captured vector ndarrays, the IR interpreter --------------------------------------
def test_vector_arguments_by_value(rng):
    @sp.kernel
    def k(out: sp.Array, g: sp.vec2, h: sp.Vector(3, sp.i32), s: sp.f32):
        gg = g * 2.0   # a pure top-level expression of vector arguments
        for i in range(out.shape[0]):
            out[i] = gg + sp.vec2(h[0], h.z) * s

    out = sp.ndarray(sp.vec2, (3,))
    k(out, sp.vec2(1.5, -2.0), [1, 2, 3], 0.5)
    assert out.to_numpy().tolist() == [[3.5, -2.5]] * 3
    k(out, (3, 4), np.array([-1, 2, 5], np.int32), 2.0)
    assert out.to_numpy().tolist() == [[4.0, 18.0]] * 3
    for g, h in [([1, 2, 3], [1, 2, 3]), ([1, 2], [1.5, 2, 3]), ([1, 2], [1, 2, 2**40]), ("ab", [1, 2, 3])]:
        with pytest.raises(sp.ArgumentError, match="argument '[gh]'"):
            k(out, g, h, 1.0)


def test_captured_vector_ndarray_and_its_grad(rng):
    data = rand(rng, (6, 3))
    field = sp.from_numpy(data, dtype=sp.vec3, needs_grad=True)
    field.grad.fill(sp.vec3(1, 2, 3))

    @sp.kernel
    def k(out: sp.Array):
        for i in range(field.shape[0]):
            out[i] = field[i] * 2.0 + field.grad[i]
            field.grad[i] = sp.vec3(0.5)

    out = sp.ndarray(sp.vec3, (6,))
    k(out)
    close(out.to_numpy(), 2.0 * data.astype(np.float64) + np.array([1, 2, 3]))
    assert np.all(field.grad.to_numpy() == 0.5)


def test_device_agrees_with_the_ir_interpreter(rng):
    from spvad.ir.interp import run_kernel
    n = 12
    X = np.stack([np.arange(n) * 0.6, rand(rng, n, 0.01, 0.1)], 1).astype(np.float32)
    V = rand(rng, (n, 2), 0.1, 0.5)
    x, v, xn = sp.from_numpy(X, dtype=sp.vec2), sp.from_numpy(V, dtype=sp.vec2), sp.ndarray(sp.vec2, (n,))
    args = (x, v, xn, 0.01)
    specs, arrays, scalars = spring_step._bind(args)
    ir = spring_step._compiled(specs).ir
    buffers = {(p.index, "primal"): a.to_numpy().copy() for p, a in zip(ir.arrays, arrays)}
    run_kernel(ir, buffers, list(scalars))
    spring_step(*args)
    for p, a in zip(ir.arrays, arrays):
        close(a.to_numpy(), buffers[(p.index, "primal")], 1e-6)

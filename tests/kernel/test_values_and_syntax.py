"""Values and syntax as Taichi and Warp programs write them (issue 37): Taichi's `sp.Vector.zero(dt, n)`,
`sp.Matrix.zero(dt, n, m)`, `sp.Matrix.identity(dt, n)`, `sp.Matrix.rows/cols([...])`, `int(v)` / `float(v)`
per component, and Python's `float`/`int`/`bool` as dtypes; each against numpy float64 on random inputs."""
import importlib.util
import re

import numpy as np
import pytest

import spvad as sp


def rand(rng, shape, lo=0.1, hi=2.0):
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(np.float32)


# ---- Taichi's zero / identity / rows / cols ----------------------------------------------------------------
def test_taichi_constructors_on_the_host():
    assert np.array_equal(sp.Vector.zero(sp.f32, 3), np.zeros(3, np.float32))
    assert sp.Vector.zero(sp.i32, 2).dtype == np.int32 and sp.Vector.zero(float, 2).dtype == np.float32
    assert np.array_equal(sp.Matrix.zero(sp.f64, 2, 3), np.zeros((2, 3)))
    assert sp.Matrix.zero(sp.f64, 2, 3).dtype == np.float64
    assert np.array_equal(sp.Matrix.identity(sp.f32, 3), np.eye(3)) and np.array_equal(sp.mat3.identity(), np.eye(3))
    assert np.array_equal(sp.Vector(4).zero(), np.zeros(4)) and np.array_equal(sp.Matrix(2, 3).zero(), np.zeros((2, 3)))
    cols = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert np.array_equal(sp.Matrix.cols(cols), np.array(cols).T)
    assert np.array_equal(sp.Matrix.rows(cols), np.array(cols))
    with pytest.raises(TypeError, match="not square"):
        sp.Matrix(2, 3).identity()


@sp.kernel
def taichi_constructors(x: sp.Array, out: sp.Array, outm: sp.Array):
    for i in range(x.shape[0]):
        z = sp.Vector.zero(sp.f32, 3)
        z += x[i]
        m = sp.Matrix.identity(sp.f32, 3) * 2.0 + sp.Matrix.zero(sp.f32, 3, 3)
        out[i] = m @ z + sp.Vector.zero(float, 3)
        c = sp.Matrix.cols([x[i], x[i] * x[i], sp.vec3(1.0, 2.0, 3.0)])
        r = sp.Matrix.rows([x[i], x[i] * 3.0])
        outm[i] = c + r.T @ sp.Matrix.zero(sp.f32, 2, 3) + sp.Matrix(3, 3).zero() + sp.mat3.identity()


@pytest.mark.backends
def test_taichi_constructors_in_kernels(rng):
    xh = rand(rng, (5, 3))
    x = sp.from_numpy(xh, dtype=sp.vec3, needs_grad=True)
    out = sp.ndarray(sp.vec3, (5,), needs_grad=True)
    outm = sp.ndarray(sp.mat3, (5,), needs_grad=True)
    taichi_constructors(x, out, outm)
    xd = xh.astype(np.float64)
    np.testing.assert_allclose(out.to_numpy(), 2 * xd, rtol=1e-6)
    want = np.stack([xd, xd * xd, np.broadcast_to([1.0, 2.0, 3.0], xd.shape)], axis=2) + np.eye(3)
    np.testing.assert_allclose(outm.to_numpy(), want, rtol=1e-6)
    gout, gm = rand(rng, (5, 3)), rand(rng, (5, 3, 3))
    out.grad.from_numpy(gout)
    outm.grad.from_numpy(gm)
    taichi_constructors.grad(x, out, outm)
    # d out / dx = 2 I; outm[:, :, 0] = x, outm[:, :, 1] = x * x
    want_grad = 2 * gout + gm[:, :, 0] + 2 * xd * gm[:, :, 1]
    np.testing.assert_allclose(x.grad.to_numpy(), want_grad, rtol=1e-5, atol=1e-6)


# ---- int(v), float(v): per component ------------------------------------------------------------------------
@sp.kernel
def int_and_float(x: sp.Array, xi: sp.Array, xf: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        xi[i] = int(x[i])
        xf[i] = float(int(x[i]) * 2) + float(x[i])
        y[i] = float(sp.cast(x[i], sp.f64))


@pytest.mark.backends
def test_int_and_float_per_component(rng):
    xh = rand(rng, (6, 4), 0.1, 9.0)
    x = sp.from_numpy(xh, dtype=sp.vec4, needs_grad=True)
    xi, xf = sp.ndarray(sp.Vector(4, sp.i32), (6,)), sp.ndarray(sp.vec4, (6,), needs_grad=True)
    y = sp.ndarray(sp.Vector(4, sp.f64), (6,), needs_grad=True)
    int_and_float(x, xi, xf, y)
    xd = xh.astype(np.float64)
    assert np.array_equal(xi.to_numpy(), np.trunc(xd).astype(np.int32))   # toward zero, as Python's int
    np.testing.assert_allclose(xf.to_numpy(), 2 * np.trunc(xd) + xd, rtol=1e-6)
    np.testing.assert_array_equal(y.to_numpy(), xd)   # float() of f64 components stays f64
    seed = rand(rng, (6, 4))
    xf.grad.from_numpy(seed)
    int_and_float.grad(x, xi, xf, y)
    np.testing.assert_allclose(x.grad.to_numpy(), seed, rtol=1e-6)   # int(...) carries no gradient


@sp.kernel
def int_of_matrix(m: sp.Array, out: sp.Array):
    for i in range(m.shape[0]):
        out[i] = float(int(m[i] * 3.0)) + sp.Matrix.identity(float, 2)


@pytest.mark.backends
def test_int_and_float_of_a_matrix(rng):
    mh = rand(rng, (4, 2, 2), 0.1, 3.0)
    out = sp.ndarray(sp.mat2, (4,))
    int_of_matrix(sp.from_numpy(mh, dtype=sp.mat2), out)
    assert np.array_equal(out.to_numpy(), np.trunc(mh * np.float32(3.0)) + np.eye(2))


# ---- Python types as dtypes ---------------------------------------------------------------------------------
def test_python_types_as_dtypes():
    assert sp.Vector(3, float) == sp.vec3 and sp.Matrix(2, 2, int) == sp.Matrix(2, 2, sp.i32)
    assert sp.ndarray(float, (3,)).dtype == sp.f32 and sp.ndarray(int, (3,)).dtype == sp.i32
    assert sp.ndarray(bool, (3,)).dtype == sp.u1
    with pytest.raises(TypeError, match="component dtype"):
        sp.Vector(3, bool)


# ---- slices with constant bounds, v.n -----------------------------------------------------------------------
@sp.kernel
def slices(x: sp.Array, head: sp.Array, tail: sp.Array, sizes: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        head[i] = v[0:2] * v[2:4] + v[::3]
        buf = sp.Vector(5, sp.f32).zero()
        buf[i % 5] = 1.0
        tail[i] = v[1:] + v[-3:] * 2.0 + buf[2:][:3] + sp.Vector((1.0, 2.0, 3.0, 4.0)[1:])
        sizes[i] = sp.vec3(v.n, v[1:].n, buf[::2].n)


@pytest.mark.backends
def test_vector_slices_and_length(rng):
    xh = rand(rng, (6, 4))
    x = sp.from_numpy(xh, dtype=sp.vec4, needs_grad=True)
    head, tail = sp.ndarray(sp.vec2, (6,), needs_grad=True), sp.ndarray(sp.vec3, (6,), needs_grad=True)
    sizes = sp.ndarray(sp.vec3, (6,))
    slices(x, head, tail, sizes)
    xd = xh.astype(np.float64)
    buf = np.zeros((6, 5))
    buf[np.arange(6), np.arange(6) % 5] = 1.0
    np.testing.assert_allclose(head.to_numpy(), xd[:, 0:2] * xd[:, 2:4] + xd[:, ::3], rtol=1e-6)
    np.testing.assert_allclose(tail.to_numpy(), 3 * xd[:, 1:] + buf[:, 2:5] + [2.0, 3.0, 4.0], rtol=1e-6)
    assert np.array_equal(sizes.to_numpy(), np.tile([4.0, 3.0, 3.0], (6, 1)))
    gh, gt = rand(rng, (6, 2)), rand(rng, (6, 3))
    head.grad.from_numpy(gh)
    tail.grad.from_numpy(gt)
    slices.grad(x, head, tail, sizes)
    want = np.zeros((6, 4))
    want[:, 0:2] += gh * xd[:, 2:4] + gh[:, :1] * [1.0, 0.0]
    want[:, 2:4] += gh * xd[:, 0:2]
    want[:, 3] += gh[:, 1]
    want[:, 1:] += 3 * gt
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("line, message", [
    ("out[i] = v[0:n]", "slice bounds must be compile-time integers"),
    ("out[i] = v[3:1]", "the slice [3:1:None] of a vec4 is empty"),
    ("out[i] = sp.mat2(1.0, 2.0, 3.0, 4.0)[0:1]", "a mat2 cannot be sliced"),
    ("out[i] = sp.Matrix.identity(sp.f32, n)", "the sizes given to .identity(dtype, ...) must be compile-time"),
    ("out[i] = sp.Vector.zero(sp.u1, 4)", "the component dtype must be"),
    ("out[i] = sp.Matrix.cols(v)", "takes one list of equal-length vectors"),
    ("v[1:] = sp.vec2(1.0, 2.0)", "the slice [1:None:None] of 'v' has 3 components, cannot assign a vec2"),
    ("out[i] = x.n + x.m", "arrays have no attribute 'm'"),
    ("out[i] = sp.vec4(1.0) if v < 1.0 else v", "cannot be used as a condition"),
])
def test_errors_name_the_line(tmp_path, line, message):
    src = ("import spvad as sp\n@sp.kernel\ndef k(x: sp.Array, out: sp.Array, n: sp.i32):\n"
           f"    for i in range(x.shape[0]):\n        v = x[i]\n        {line}\n")
    path = tmp_path / "kern.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("kern", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(sp.CompileError, match=r"kern\.py:6: .*" + re.escape(message)) as e:
        mod.k(sp.ndarray(sp.vec4, (2,)), sp.ndarray(sp.vec4, (2,)), 2)
    assert line in str(e.value)


# ---- slice assignment, a.n of vector and matrix arrays ------------------------------------------------------
@sp.kernel
def slice_writes(x: sp.Array, out: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        v[1:] = v[:3] * v[1:]
        v[::2] += sp.vec2(x.n, m.n * 10 + m.m * 100)
        v[0:1] = v[3] * 0.5
        out[i] = v


@pytest.mark.backends
def test_slice_assignment_and_array_widths(rng):
    xh = rand(rng, (5, 4))
    x = sp.from_numpy(xh, dtype=sp.vec4, needs_grad=True)
    out, m = sp.ndarray(sp.vec4, (5,), needs_grad=True), sp.ndarray(sp.Matrix(2, 3), (5,))
    slice_writes(x, out, m)
    xd = xh.astype(np.float64)
    v = xd.copy()
    v[:, 1:] = xd[:, :3] * xd[:, 1:]
    v[:, ::2] += [4.0, 320.0]
    v[:, 0] = v[:, 3] * 0.5
    np.testing.assert_allclose(out.to_numpy(), v, rtol=1e-6)
    seed = rand(rng, (5, 4))
    out.grad.from_numpy(seed)
    slice_writes.grad(x, out, m)
    want = np.zeros((5, 4))   # out = (x2 x3 / 2, x0 x1, x1 x2, x2 x3)
    want[:, 0] = seed[:, 1] * xd[:, 1]
    want[:, 1] = seed[:, 1] * xd[:, 0] + seed[:, 2] * xd[:, 2]
    want[:, 2] = seed[:, 2] * xd[:, 1] + (seed[:, 3] + 0.5 * seed[:, 0]) * xd[:, 3]
    want[:, 3] = (seed[:, 3] + 0.5 * seed[:, 0]) * xd[:, 2]
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)


# ---- element-wise vector comparisons, & and |, .any() / .all() ----------------------------------------------
@sp.kernel
def masks(x: sp.Array, y: sp.Array, out: sp.Array, flags: sp.Array):
    for i in range(x.shape[0]):
        a, c = x[i], y[i]
        m = (a > 0) & (c < 1)
        out[i] = float(m) + 2.0 * float((a > 0) | (c <= 0)) + 4.0 * float(a == a)
        f = 0.0
        if m.any():
            f += 1.0
        if (a >= -1.5).all():
            f += 2.0
        if m.all():
            f += 4.0
        flags[i] = f + 8.0 * float(sp.Vector.any(a != a)) + 16.0 * float((a + 0.5).all())


@pytest.mark.backends
def test_vector_comparisons_and_masks(rng):
    xh, yh = rand(rng, (64, 3)), rand(rng, (64, 3))
    x, y = sp.from_numpy(xh, dtype=sp.vec3), sp.from_numpy(yh, dtype=sp.vec3)
    out, flags = sp.ndarray(sp.vec3, (64,)), sp.ndarray(sp.f32, (64,))
    masks(x, y, out, flags)
    m = (xh > 0) & (yh < 1)
    assert np.array_equal(out.to_numpy(), m + 2.0 * ((xh > 0) | (yh <= 0)) + 4.0)
    want = m.any(1) * 1.0 + (xh >= -1.5).all(1) * 2.0 + m.all(1) * 4.0 + (xh + 0.5 != 0).all(1) * 16.0
    assert np.array_equal(flags.to_numpy(), want) and 0 < want.min() < want.max()

"""Arrays of more than four dimensions in kernels: indexing, `x.shape[k]`, vector and matrix elements adding
axes, gradients, forward mode and Tape programs, against float64 numpy; and launches whose extents pass the
128 bytes of push constants every Vulkan device offers (they go to the runtime's shape table)."""
import re

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from tests.conftest import rand

# tests marked `backends` run on Vulkan and on the interpreter backend

SHAPE6 = (2, 3, 1, 2, 3, 4)


@sp.kernel
def wave6(a: sp.Array, b: sp.Array, s: sp.f32):
    for i, j, k, l, m, n in sp.ndrange(a.shape[0], a.shape[1], a.shape[2], a.shape[3], a.shape[4], a.shape[5]):
        b[i, j, k, l, m, n] = s * sp.sin(a[i, j, k, l, m, n]) * a.shape[-1] + a[i, j, k, l, m, n] * (l + 2 * n)


def wave6_np(a, s):
    l, n = np.indices(a.shape)[[3, 5]]
    return s * np.sin(a) * a.shape[-1] + a * (l + 2 * n), s * np.cos(a) * a.shape[-1] + (l + 2 * n)


@pytest.mark.backends
def test_six_dims_forward_gradient_and_forward_mode(rng):
    ah = rand(rng, SHAPE6)
    a = sp.from_numpy(ah, needs_grad=True, needs_dual=True)
    b = sp.ndarray(sp.f32, SHAPE6, needs_grad=True, needs_dual=True)
    value, slope = wave6_np(ah.astype(np.float64), 0.7)
    wave6(a, b, 0.7)
    np.testing.assert_allclose(b.to_numpy(), value, rtol=1e-5, atol=1e-6)
    bbar, seed = rand(rng, SHAPE6), rand(rng, SHAPE6)
    b.grad.from_numpy(bbar)
    wave6.grad(a, b, 0.7)
    np.testing.assert_allclose(a.grad.to_numpy(), slope * bbar, rtol=1e-5, atol=1e-6)
    a.dual.from_numpy(seed)
    wave6.fwd(a, b, 0.7)
    np.testing.assert_allclose(b.dual.to_numpy(), slope * seed, rtol=1e-5, atol=1e-6)


@sp.kernel
def spin(p: sp.Array, out: sp.Array, loss: sp.Array):
    for i, j, k, l, m in sp.ndrange(p.shape[0], p.shape[1], p.shape[2], p.shape[3], p.shape[4]):
        v = p[i, j, k, l, m]                        # a vec3 of a 5-d array: storage (.., 3), 6 axes
        w = sp.cross(v, sp.vec3(0.3, -0.2, 0.9)) + v * sp.length(v)
        out[i, j, k, l, m] = w
        loss[None] += sp.dot(w, w) * p.shape[2]


def spin_np(p):
    w = np.cross(p, [0.3, -0.2, 0.9]) + p * np.linalg.norm(p, axis=-1, keepdims=True)
    return w, np.sum(w * w) * p.shape[2]


@pytest.mark.backends
def test_vector_elements_add_an_axis_tape_gradient(rng):
    shape = (2, 1, 3, 2, 2)
    ph = rand(rng, shape + (3,))
    p = sp.from_numpy(ph, needs_grad=True, dtype=sp.vec3)
    assert p.ndim == 5 and p.storage_shape == shape + (3,)
    out, loss = sp.ndarray(sp.vec3, shape), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        spin(p, out, loss)
    p64 = ph.astype(np.float64)
    w, total = spin_np(p64)
    np.testing.assert_allclose(out.to_numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss[None], total, rtol=1e-5)
    g = central(lambda q: spin_np(q)[1], p64)
    np.testing.assert_allclose(p.grad.to_numpy().ravel(), g, rtol=1e-4, atol=1e-4)


@sp.kernel
def frame(m: sp.Array, x: sp.Array, y: sp.Array):
    for i, j, k, l in sp.ndrange(x.shape[0], x.shape[1], x.shape[2], x.shape[3]):
        y[i, j, k, l] = m[i, j, k, l] @ x[i, j, k, l]    # mat2 elements: 6 storage axes


@pytest.mark.backends
def test_matrix_elements_of_a_four_dim_array(rng):
    shape = (2, 2, 1, 3)
    mh, xh = rand(rng, shape + (2, 2)), rand(rng, shape + (2,))
    m, x = sp.from_numpy(mh, dtype=sp.mat2, needs_grad=True), sp.from_numpy(xh, dtype=sp.vec2, needs_grad=True)
    y = sp.ndarray(sp.vec2, shape, needs_grad=True)
    frame(m, x, y)
    np.testing.assert_allclose(y.to_numpy(), np.einsum("...ij,...j->...i", mh, xh), rtol=1e-5, atol=1e-6)
    ybar = rand(rng, shape + (2,))
    y.grad.from_numpy(ybar)
    frame.grad(m, x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), np.einsum("...ij,...i->...j", mh, ybar), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.grad.to_numpy(), ybar[..., :, None] * xh[..., None, :], rtol=1e-5, atol=1e-6)


# ---- extents past the push-constant budget ------------------------------------------------------------------
SHAPE8 = (3, 1, 2, 1, 2, 1, 2, 4)


@sp.kernel
def blend8(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, out: sp.Array, s: sp.f64, t: sp.f64):
    for i, j in sp.ndrange(a.shape[0], a.shape[7]):
        for u in range(a.shape[2]):
            out[i, 0, u, 0, 1, 0, 1, j] = s * a[i, 0, u, 0, 1, 0, 1, j] * b[i, 0, u, 0, 1, 0, 1, j] * sp.sin(
                c[i, 0, u, 0, 1, 0, 1, j]) + t * d[i, 0, u, 0, 1, 0, 1, j] * a.shape[6]


def pushed_extents(kernel, *args):
    """The extents kernel's first task takes from the shape table ((array, axis) pairs; [] on the interpreter)."""
    ck = kernel._compiled(kernel._bind(args)[0])
    return [f[1:3] for f in getattr(ck.tasks[0].lowered, "spilled_shapes", ())]


@pytest.mark.backends
def test_extents_past_the_push_budget_gradient_and_replays(rng):
    """Five 8-d arrays need 36 extents (144 bytes) plus two f64 scalars: they come from the shape table. Two
    shapes take two table entries; a launch repeated with the same objects replays its recorded dispatch."""
    for shape in (SHAPE8, (2, 1, 3, 1, 2, 1, 2, 3)):
        hs = [rand(rng, shape, dtype=np.float64) for _ in range(4)]
        a, b, c, d = (sp.from_numpy(h, needs_grad=True) for h in hs)
        out = sp.ndarray(sp.f64, shape, needs_grad=True)
        if runtime.get().backend == "vulkan":
            assert len(pushed_extents(blend8, a, b, c, d, out, 0.5, 2.0)) == 36
        blend8(a, b, c, d, out, 0.5, 2.0)
        blend8(a, b, c, d, out, 0.5, 2.0)   # the same objects: the recorded dispatch again
        A, B, C, D = hs
        sel = (slice(None), 0, slice(None), 0, 1, 0, 1, slice(None))
        want = 0.5 * A * B * np.sin(C) + 2.0 * D * shape[6]
        np.testing.assert_allclose(out.to_numpy()[sel], want[sel], rtol=1e-6, atol=1e-7)
        obar = rand(rng, shape, dtype=np.float64)
        out.grad.from_numpy(obar)
        blend8.grad(a, b, c, d, out, 0.5, 2.0)
        got = a.grad.to_numpy()
        np.testing.assert_allclose(got[sel], (0.5 * B * np.sin(C) * obar)[sel], rtol=1e-6, atol=1e-7)
        assert np.count_nonzero(got) == np.count_nonzero(got[sel])   # nothing else touched
        np.testing.assert_allclose(c.grad.to_numpy()[sel], (0.5 * A * B * np.cos(C) * obar)[sel], rtol=1e-5,
                                   atol=1e-6)


@sp.kernel
def shift8(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, out: sp.Array, k: sp.i32):
    for i, j in sp.ndrange(a.shape[0], a.shape[7]):
        out[i, 0, 1, 0, 1, 0, 1, j] = a[i, 0, 1, 0, 1, 0, 1, j + k] + b[i, 0, 0, 0, 0, 0, 0, j] \
            + c[i, 0, 0, 0, 0, 0, 0, j] + d[i, 0, 0, 0, 0, 0, 0, j]


def test_bounds_checks_name_extents_from_the_table(debug, rng):
    arrays = [sp.from_numpy(rand(rng, SHAPE8)) for _ in range(5)]
    assert len(pushed_extents(shift8, *arrays, 0)) == 5 * 8   # a checked array's every extent
    shift8(*arrays, 0)
    sp.sync()
    shift8(*arrays, 1)
    with pytest.raises(sp.DeviceError) as info:
        sp.sync()
    assert re.search(r"out-of-bounds load: a\[\d, 0, 1, 0, 1, 0, 1, 4\] is out of bounds for shape "
                     r"\(3, 1, 2, 1, 2, 1, 2, 4\)", str(info.value)), str(info.value)


# ---- a whole program ----------------------------------------------------------------------------------------
@sp.kernel
def diffuse5(u: sp.Array, v: sp.Array, w: sp.Array, dt: sp.f32):
    for i, j, k, l, m in sp.ndrange(u.shape[0], u.shape[1], u.shape[2], u.shape[3], u.shape[4]):
        left = u[i, j, k, l, m - 1] if m > 0 else 0.0
        v[i, j, k, l, m] = u[i, j, k, l, m] + dt * sp.tanh(left * w[l])


@sp.kernel
def energy5(u: sp.Array, loss: sp.Array):
    for i, j, k, l, m in sp.ndrange(u.shape[0], u.shape[1], u.shape[2], u.shape[3], u.shape[4]):
        loss[None] += u[i, j, k, l, m] ** 2


@pytest.mark.backends
def test_tape_program_over_five_dim_buffers(rng):
    """diffuse5 back and forth between two 5-d arrays (the Tape keeps what later launches overwrite), a host
    write into one element on the way; gradients against central differences of the float64 program."""
    shape, steps = (2, 1, 2, 3, 4), 4
    u0, w0 = rand(rng, shape), rand(rng, 3)
    u, v = sp.from_numpy(u0, needs_grad=True), sp.ndarray(sp.f32, shape, needs_grad=True)
    w, loss = sp.from_numpy(w0, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    spot = (1, 0, 1, 2, 1)
    with sp.Tape(loss):
        for s in range(steps):
            diffuse5(u, v, w, 0.4) if s % 2 == 0 else diffuse5(v, u, w, 0.4)
            if s == 1:
                u[spot] = 0.25
        energy5(u, loss)

    def program(u, w):
        for s in range(steps):
            left = np.concatenate([np.zeros(shape[:-1] + (1,)), u[..., :-1]], axis=-1)
            u = u + 0.4 * np.tanh(left * w[None, None, None, :, None])
            if s == 1:
                u = u.copy()
                u[spot] = 0.25
        return np.sum(u * u)

    u64, w64 = u0.astype(np.float64), w0.astype(np.float64)
    np.testing.assert_allclose(loss[None], program(u64, w64), rtol=1e-5)
    np.testing.assert_allclose(u.grad.to_numpy().ravel(), central(lambda x: program(x, w64), u64), rtol=2e-4,
                               atol=1e-5)
    np.testing.assert_allclose(w.grad.to_numpy(), central(lambda x: program(u64, x), w64), rtol=2e-4, atol=1e-5)


def central(f, base, eps=1e-6):
    """Central differences of the float64 function `f` at `base`, flattened."""
    g = np.zeros(base.size)
    for q in range(base.size):
        up, down = base.copy(), base.copy()
        up.flat[q] += eps
        down.flat[q] -= eps
        g[q] = (f(up) - f(down)) / (2 * eps)
    return g

"""Gradients of kernels indexed by (t // n, t % n), as sp.vmap, sp.ndrange and hand-batched loops write them: the
pair gives back the thread index, so the gradient updates of such arrays are plain read-add-writes (no atomics),
and the gradients still equal float64 numpy closed forms. Index pairs that do not give it back (t // n with
t % m, a divisor that may be 0, a shared array under sp.vmap) keep their atomics and sum every contribution."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # Vulkan, the interpreter and debug (bounds-checked) runs
B, N, M = 5, 7, 3


def rand(rng, *shape):
    return rng.uniform(0.2, 1.0, shape).astype(np.float32)


def atomic_arrays(k, *args):
    """The arrays whose gradient the derivative kernel of k updates with atomics (from its IR text)."""
    text = k.ir(*args, grad=True)
    return {name for name in ("x", "w", "y") if f"atomic_add f32 {name}.grad[" in text}


@sp.kernel
def flat(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for t in range(x.shape[0] * n):
        b = t // n
        j = t % n
        y[b, j] = sp.sin(x[b, j]) * w[j] + x[b, j] * x[b, j]


@sp.kernel
def flat_by_four(x: sp.Array, w: sp.Array, y: sp.Array):
    for t in range(x.shape[0] * 4):
        y[t // 4, t % 4] = sp.sin(x[t // 4, t % 4]) * w[t % 4] + x[t // 4, t % 4] * x[t // 4, t % 4]


@sp.kernel
def grid(x: sp.Array, w: sp.Array, y: sp.Array):
    for b, j in sp.ndrange(x.shape[0], x.shape[1]):
        y[b, j] = sp.sin(x[b, j]) * w[j] + x[b, j] * x[b, j]


@sp.kernel
def over_x(x: sp.Array, w: sp.Array, y: sp.Array):
    for b, j in x:
        y[b, j] = sp.sin(x[b, j]) * w[j] + x[b, j] * x[b, j]


def elementwise_np(x, w, seed):
    """d/dx and d/dw of sum(seed * (sin(x) w + x^2)), w broadcast over the leading axes."""
    x, w, seed = (a.astype(np.float64) for a in (x, w, seed))
    lead = tuple(range(x.ndim - 1))
    return seed * (np.cos(x) * w + 2 * x), np.sum(seed * np.sin(x), axis=lead)


def check_elementwise(k, x0, w0, scalars=()):
    seed = np.random.default_rng(3).uniform(0.5, 1.5, x0.shape).astype(np.float32)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, x0.shape, needs_grad=True)
    args = (x, w, y, *scalars)
    assert atomic_arrays(k, *args) == {"w"}   # x.grad: one element per thread; w.grad: shared by the rows
    k(*args)
    y.grad.from_numpy(seed)
    k.grad(*args)
    want_x, want_w = elementwise_np(x0, w0, seed)
    np.testing.assert_allclose(x.grad.to_numpy(), want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), want_w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [grid, over_x], ids=["ndrange", "loop_over_x"])
def test_two_dimensional_parallel_loops(rng, k):
    check_elementwise(k, rand(rng, B, N), rand(rng, N))


def test_hand_batched_loop_over_t_div_and_mod_n(rng):
    check_elementwise(flat, rand(rng, B, N), rand(rng, N), (N,))


def test_constant_divisor(rng):
    check_elementwise(flat_by_four, rand(rng, B, 4), rand(rng, 4))


@sp.kernel
def cube(x: sp.Array, w: sp.Array, y: sp.Array):
    for a, b, j in sp.ndrange(x.shape[0], x.shape[1], x.shape[2]):
        y[a, b, j] = sp.sin(x[a, b, j]) * w[j] + x[a, b, j] * x[a, b, j]


def test_three_dimensional_ndrange(rng):
    """(t // C) // B, (t // C) % B, t % C: two pairs, one inside the other."""
    check_elementwise(cube, rand(rng, 3, 4, N), rand(rng, N))


@sp.kernel
def accumulate(x: sp.Array, w: sp.Array, y: sp.Array):
    for j in range(x.shape[0]):
        y[j] += sp.sin(x[j]) * w[j]


@sp.kernel
def rows(x: sp.Array, w: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        y[i, j] = sp.sin(x[i, j]) * w[j] + x[i, j] * x[i, j]


@sp.kernel
def repeated_reads(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
    for j in range(x.shape[0]):
        p = x[j]
        for k in range(steps):
            p = p * w[j] + sp.sin(x[j + 0])
        y[j] = p


def test_vmap_of_an_accumulating_kernel(rng):
    """The per-instance kernel updates x.grad[j] and w.grad[j] with plain read-add-writes; batched, x.grad[b, j]
    too, while w, shared by the instances, sums their contributions atomically."""
    x0, w0, seed = rand(rng, B, N), rand(rng, N), rand(rng, B, N)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, (B, N), needs_grad=True)
    k = sp.vmap(accumulate, in_axes=(0, None, 0))
    one = (sp.from_numpy(x0[0], needs_grad=True), w, sp.ndarray(sp.f32, N, needs_grad=True))
    assert atomic_arrays(accumulate, *one) == set()   # one instance: w[j] is private to thread j as well
    assert atomic_arrays(k, x, w, y) == {"w"}
    k(x, w, y)
    y.grad.from_numpy(seed)
    k.grad(x, w, y)
    xf, wf, g = x0.astype(np.float64), w0.astype(np.float64), seed.astype(np.float64)
    np.testing.assert_allclose(x.grad.to_numpy(), g * np.cos(xf) * wf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), np.sum(g * np.sin(xf), axis=0), rtol=1e-5, atol=1e-5)


def test_vmap_of_a_two_dimensional_kernel(rng):
    """Batched, the per-instance pair (i, j) = (l // C, l % C) of the local index l = t % (R C) sits inside the
    instance pair (t // (R C), l)."""
    x0, w0 = rand(rng, B, M, N), rand(rng, N)
    seed = rng.uniform(0.5, 1.5, x0.shape).astype(np.float32)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, x0.shape, needs_grad=True)
    k = sp.vmap(rows, in_axes=(0, None, 0))
    assert atomic_arrays(k, x, w, y) == {"w"}
    k(x, w, y)
    y.grad.from_numpy(seed)
    k.grad(x, w, y)
    want_x, want_w = elementwise_np(x0, w0, seed)
    np.testing.assert_allclose(x.grad.to_numpy(), want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), want_w, rtol=1e-5, atol=1e-5)


def test_vmap_with_reads_in_a_loop(rng):
    """x[j] read in every iteration: its adjoint summed in the loop and added once after it, plainly."""
    steps = 4
    x0, w0, seed = rand(rng, B, N), rand(rng, B, N), rand(rng, B, N)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, (B, N), needs_grad=True)
    k = sp.vmap(repeated_reads, in_axes=(0, 0, 0, None))
    assert atomic_arrays(k, x, w, y, steps) == set()
    k(x, w, y, steps)
    y.grad.from_numpy(seed)
    k.grad(x, w, y, steps)
    xf, wf = x0.astype(np.float64), w0.astype(np.float64)
    p, dx, dw = xf.copy(), np.ones_like(xf), np.zeros_like(xf)   # p and its derivatives, step by step
    for _ in range(steps):
        dx, dw, p = dx * wf + np.cos(xf), dw * wf + p, p * wf + np.sin(xf)
    np.testing.assert_allclose(y.to_numpy(), p, rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), seed * dx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), seed * dw, rtol=1e-5, atol=1e-6)


# ---- pairs that do not give the thread back: atomics stay, every contribution counts ----

@sp.kernel
def other_modulus(x: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for t in range(y.shape[0] * n):
        y[t // n, t % n] = sp.sin(x[t // n, t % m])


@sp.kernel
def other_dividend(x: sp.Array, y: sp.Array, n: sp.i32):
    for t in range(y.shape[0] * n):
        y[t // n, t % n] = sp.sin(x[t // n, (t // 2) % n])


@sp.kernel
def unproven_divisor(x: sp.Array, y: sp.Array, n: sp.i32):
    for t in range(y.shape[0] * y.shape[1]):   # n may be 0 while threads run: nothing says it is not
        y[t // y.shape[1], t % y.shape[1]] = sp.sin(x[t // n, t % n])


def colliding_np(x, seed, rows_cols):
    """d/dx of sum(seed * sin(x[rows, cols])): repeated elements sum their contributions."""
    want = np.zeros(x.shape)
    rows, cols = rows_cols
    np.add.at(want, (rows, cols), seed.ravel().astype(np.float64) * np.cos(x.astype(np.float64)[rows, cols]))
    return want


@pytest.mark.parametrize("case", ["other_modulus", "other_dividend", "unproven_divisor"])
def test_pairs_that_collide_or_are_unproven_stay_atomic(rng, case):
    n, m = N, M   # t % M repeats within a row of N; (t // 2) % N repeats every two threads
    t = np.arange(B * n)
    k, scalars, index = {
        "other_modulus": (other_modulus, (n, m), (t // n, t % m)),
        "other_dividend": (other_dividend, (n,), (t // n, (t // 2) % n)),
        "unproven_divisor": (unproven_divisor, (n,), (t // n, t % n)),
    }[case]
    x0, seed = rand(rng, B, n), rand(rng, B, n)
    x, y = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (B, n), needs_grad=True)
    assert atomic_arrays(k, x, y, *scalars) == {"x"}
    k(x, y, *scalars)
    y.grad.from_numpy(seed)
    k.grad(x, y, *scalars)
    np.testing.assert_allclose(x.grad.to_numpy(), colliding_np(x0, seed, index), rtol=1e-5, atol=1e-6)


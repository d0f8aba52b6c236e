"""Derivatives of sp.vmap kernels: `.grad`, `.fwd`, sp.Tape and sp.FwdMode of a batched launch equal those of a loop
over the instances (float64 numpy closed forms built `for b in range(B)`); a shared input's gradient is the sum
over the batch. A whole program (a Tape over several steps of a batched spring chain) against central finite
differences of a float64 numpy simulation. On Vulkan and the interpreter."""
import numpy as np
import pytest

import spvad as sp
from tests.common_kernels import central, chain_advance, chain_energy, chain_forces, chain_np, sin_steps

pytestmark = pytest.mark.backends
B, N, DT = 4, 6, 0.05


def rand(rng, *shape):
    return rng.uniform(0.2, 1.0, shape).astype(np.float32)


step = sp.kernel(sin_steps)


def step_np(x, dt, n):
    """(result, d result / d x) of `step` for one instance, in float64."""
    p, d = x.astype(np.float64), np.ones(x.shape)
    for _ in range(n):
        d = d * (1.0 + dt * np.cos(p))
        p = p + dt * np.sin(p)
    return p, d


@sp.kernel
def weighted(x: sp.Array, w: sp.Array, y: sp.Array, s: sp.f32):
    for i in range(x.shape[0]):
        y[i] = s * x[i] * w[i] + sp.sin(w[i])


@sp.kernel
def sum_squares(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


def test_grad_of_a_batched_input_and_a_batched_scalar(rng):
    x0, seed, dts = rand(rng, B, N), rand(rng, B, N), rng.uniform(0.01, 0.1, B).astype(np.float32)
    xb, vb = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (B, N), needs_grad=True)
    bstep = sp.vmap(step, in_axes=(0, 0, 0, None))
    bstep(xb, vb, dts, 5)
    vb.grad.from_numpy(seed)
    bstep.grad(xb, vb, dts, 5)
    want = np.stack([step_np(x0[b], float(dts[b]), 5)[1] * seed[b] for b in range(B)])
    np.testing.assert_allclose(xb.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_grad_of_a_shared_input_is_the_sum_over_the_batch(rng):
    x0, w0, seed = rand(rng, B, N), rand(rng, N), rand(rng, B, N)
    xb, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    yb = sp.ndarray(sp.f32, (B, N), needs_grad=True)
    bw = sp.vmap(weighted, in_axes=(0, None, 0, None))
    bw(xb, w, yb, 1.5)
    yb.grad.from_numpy(seed)
    bw.grad(xb, w, yb, 1.5)
    want_x, want_w = np.zeros((B, N)), np.zeros(N)
    for b in range(B):
        xf, wf, g = x0[b].astype(np.float64), w0.astype(np.float64), seed[b].astype(np.float64)
        want_x[b] = 1.5 * wf * g
        want_w += (1.5 * xf + np.cos(wf)) * g
    np.testing.assert_allclose(xb.grad.to_numpy(), want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), want_w, rtol=1e-5, atol=1e-5)


def test_fwd_of_a_batched_launch(rng):
    x0, tangent = rand(rng, B, N), rand(rng, B, N)
    xb = sp.from_numpy(x0, needs_dual=True)
    vb = sp.ndarray(sp.f32, (B, N), needs_dual=True)
    xb.dual.from_numpy(tangent)
    sp.vmap(step, in_axes=(0, 0, None, None)).fwd(xb, vb, DT, 4)
    for b in range(B):
        p, d = step_np(x0[b], DT, 4)
        np.testing.assert_allclose(vb.to_numpy()[b], p, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(vb.dual.to_numpy()[b], d * tangent[b], rtol=1e-5, atol=1e-6)


def test_fwdmode_seeds_a_shared_input(rng):
    x0, w0, seed = rand(rng, B, N), rand(rng, N), rand(rng, N)
    xb, w = sp.from_numpy(x0), sp.from_numpy(w0, needs_dual=True)
    yb = sp.ndarray(sp.f32, (B, N), needs_dual=True)
    with sp.FwdMode(loss=yb, param=w, seed=seed):
        sp.vmap(weighted, in_axes=(0, None, 0, None))(xb, w, yb, 0.5)
    want = np.stack([(0.5 * x0[b].astype(np.float64) + np.cos(w0.astype(np.float64))) * seed for b in range(B)])
    np.testing.assert_allclose(yb.dual.to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_tape_over_batched_launches(rng):
    x0, w0 = rand(rng, B, N), rand(rng, N)
    xb, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    yb = sp.ndarray(sp.f32, (B, N), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        sp.vmap(weighted, in_axes=(0, None, 0, None))(xb, w, yb, 1.5)
        sp.vmap(sum_squares, in_axes=(0, None))(yb, loss)   # one loss for the batch: an atomic sum
    xf, wf = x0.astype(np.float64), w0.astype(np.float64)
    y = 1.5 * xf * wf + np.sin(wf)
    np.testing.assert_allclose(loss.to_numpy(), np.sum(y * y), rtol=1e-5)
    np.testing.assert_allclose(xb.grad.to_numpy(), 2 * y * 1.5 * wf, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.grad.to_numpy(), np.sum(2 * y * (1.5 * xf + np.cos(wf)), axis=0), rtol=1e-4)


# ---- a whole program: a batched spring chain over several steps, springs shared by every instance ----
forces, advance, energy = (sp.kernel(f) for f in (chain_forces, chain_advance, chain_energy))


def batched_chain_np(x0, k, steps):
    """The batched program's loss in float64: the sum over instances of each chain's energy."""
    return sum(chain_np(x0[b], k, steps) for b in range(x0.shape[0]))


@pytest.fixture(params=[False, True], ids=["plain", "debug"])
def checked(request):
    """The test's backend, and once more with sp.init(debug=True): every access of the batched primal and
    gradient launches is bounds-checked on the device (an out-of-bounds one fails the sync)."""
    backend = request.node.callspec.params["backend"]
    if request.param:
        sp.init(backend=backend, debug=True)
    yield
    if request.param:
        sp.sync()
        sp.init() if backend == "vulkan" else sp.init(backend=backend)


def test_tape_over_a_batched_simulation_matches_finite_differences(rng, checked):
    steps, n = 5, 5
    x0 = (np.arange(n) * 1.1 + rng.uniform(-0.2, 0.2, (B, n))).astype(np.float32)
    k0 = rng.uniform(5.0, 10.0, n - 1).astype(np.float32)
    start = np.zeros((B, steps + 1, n), np.float32)
    start[:, 0] = x0
    x = sp.from_numpy(start, needs_grad=True)
    v = sp.ndarray(sp.f32, (B, steps + 1, n), needs_grad=True)
    f = sp.ndarray(sp.f32, (B, steps, n), needs_grad=True)
    k = sp.from_numpy(k0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    bforces = sp.vmap(forces, in_axes=(0, 0, None, None))
    badvance = sp.vmap(advance, in_axes=(0, 0, 0, None))
    benergy = sp.vmap(energy, in_axes=(0, None, None))
    with sp.Tape(loss=loss):
        for t in range(steps):
            bforces(x, f, k, t)
            badvance(x, v, f, t)
        benergy(x, loss, steps)
    xf, kf = x0.astype(np.float64), k0.astype(np.float64)
    np.testing.assert_allclose(loss.to_numpy(), batched_chain_np(xf, kf, steps), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy()[:, 0], central(lambda a: batched_chain_np(a, kf, steps), xf, 1e-5),
                               rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(k.grad.to_numpy(), central(lambda a: batched_chain_np(xf, a, steps), kf, 1e-5),
                               rtol=1e-3, atol=1e-3)


@sp.kernel
def noisy(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * sp.random()


def test_each_instance_draws_its_own_random_numbers_and_the_gradient_sees_them(rng):
    x0, seed = rand(rng, B, N), rand(rng, B, N)
    xb, yb = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (B, N), needs_grad=True)
    bnoisy = sp.vmap(noisy)
    bnoisy(xb, yb)
    drawn = yb.to_numpy().astype(np.float64) / x0
    assert len({tuple(np.round(row, 6)) for row in drawn}) == B   # as B launches would: no two rows alike
    yb.grad.from_numpy(seed)
    bnoisy.grad(xb, yb)
    np.testing.assert_allclose(xb.grad.to_numpy(), seed * drawn, rtol=1e-5)


@sp.no_grad
@sp.kernel
def doubled(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


def test_no_grad_on_the_kernel_holds_for_its_batched_launches(rng):
    x0 = rand(rng, B, N)
    xb, yb = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (B, N), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        sp.vmap(doubled)(xb, yb)
        sp.vmap(sum_squares, in_axes=(0, None))(yb, loss)
    np.testing.assert_allclose(yb.grad.to_numpy(), 4.0 * x0.astype(np.float64), rtol=1e-6)   # 2 y
    np.testing.assert_array_equal(xb.grad.to_numpy(), 0.0)   # the Tape skips doubled's gradient


def test_a_loss_per_instance_from_a_batched_0d_array(rng):
    y0, seed = rand(rng, B, N), rand(rng, B)
    yb, losses = sp.from_numpy(y0, needs_grad=True), sp.ndarray(sp.f32, (B,), needs_grad=True)
    bsum = sp.vmap(sum_squares)   # loss[None] of each instance: element b of a (B,) ndarray
    bsum(yb, losses)
    np.testing.assert_allclose(losses.to_numpy(), np.sum(y0.astype(np.float64) ** 2, axis=1), rtol=1e-5)
    losses.grad.from_numpy(seed)
    bsum.grad(yb, losses)
    np.testing.assert_allclose(yb.grad.to_numpy(), 2.0 * y0 * seed[:, None].astype(np.float64), rtol=1e-5)

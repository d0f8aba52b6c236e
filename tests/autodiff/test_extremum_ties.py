"""Derivatives of sp.atomic_max / sp.atomic_min: the winners (contributions equal to the final value) share
the derivative equally, as torch.amax and jnp.max do; when no contribution equals it, the value the array
held before the launch keeps it. Reverse mode (k.grad, Tape) and forward mode (k.fwd, FwdMode), against
closed forms in float64."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N = 8


@sp.kernel
def shifted_max(x: sp.Array, c: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(m[None], x[i] + c[None])


@sp.kernel
def shifted_min(x: sp.Array, c: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_min(m[None], x[i] * c[None])


def with_ties(rng, k, extremum):
    """N random values of which exactly k share the extremum."""
    x = rng.uniform(0.5, 1.5, N).astype(np.float32)
    top = np.float32(3.0 if extremum == "max" else 0.1)
    x[rng.choice(N, k, replace=False)] = top
    return x


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("k", range(1, N + 1))
def test_tied_winners_share_the_gradient(kind, k, rng):
    """max(x + c) and min(x * c): d/dc is 1 (resp. the winning x), each of the k winners gets 1/k."""
    kernel, init = (shifted_max, -1e30) if kind == "max" else (shifted_min, 1e30)
    x0 = with_ties(rng, k, kind)
    c0 = np.float32(0.75)
    x = sp.from_numpy(x0, needs_grad=True)
    c = sp.from_numpy(np.array(c0), needs_grad=True)
    m = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(m):
        m.fill(init)
        kernel(x, c, m)
    winners = x0 == (x0.max() if kind == "max" else x0.min())
    assert winners.sum() == k
    share = 1.0 / k if kind == "max" else float(c0) / k
    np.testing.assert_allclose(x.grad.to_numpy(), np.where(winners, share, 0.0), rtol=1e-6)
    np.testing.assert_allclose(c.grad[None], 1.0 if kind == "max" else float(x0[winners][0]), rtol=1e-6)

    # forward mode: the dual of m is the winners' mean tangent
    seed = rng.uniform(-1, 1, N)
    xd = sp.from_numpy(x0, needs_dual=True)
    cd = sp.from_numpy(np.array(c0), needs_dual=True)
    md = sp.ndarray(sp.f32, (), needs_dual=True)
    md.fill(init)
    with sp.FwdMode(loss=md, param=xd, seed=seed):
        kernel(xd, cd, md)
    scale = 1.0 if kind == "max" else float(c0)
    np.testing.assert_allclose(md.dual[None], scale * seed[winners].mean(), rtol=1e-5)


@sp.kernel
def relu_pool(x: sp.Array, out: sp.Array, width: sp.i32):
    for i in range(x.shape[0]):
        sp.atomic_max(out[i // width], sp.max(x[i], 0.0))


@sp.kernel
def weighted(out: sp.Array, w: sp.Array, loss: sp.Array):
    for j in range(out.shape[0]):
        loss[None] += out[j] * w[j]


def test_max_pool_over_relu_zeros(rng):
    """Windows of ReLU outputs, some all zero (every element ties): out starts at 0, the ReLU zeros carry
    no derivative, and in windows with a positive maximum the tied winners split it."""
    width, windows = 4, 6
    x0 = rng.uniform(-1.0, 1.0, width * windows).astype(np.float32)
    x0[:width] = -np.abs(x0[:width])              # window 0: all ReLU zeros
    x0[width:2 * width] = [0.8, 0.8, -0.2, 0.8]   # window 1: three tied winners
    w0 = rng.uniform(0.5, 1.5, windows).astype(np.float32)
    x = sp.from_numpy(x0, needs_grad=True)
    w = sp.from_numpy(w0)
    out = sp.ndarray(sp.f32, (windows,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        out.fill(0.0)
        relu_pool(x, out, width)
        weighted(out, w, loss)
    relu = np.maximum(x0.astype(np.float64), 0.0).reshape(windows, width)
    best = relu.max(axis=1, keepdims=True)
    winners = (relu == best) & (best > 0)
    want = np.where(winners, w0[:, None] / np.maximum(winners.sum(axis=1, keepdims=True), 1), 0.0)
    np.testing.assert_allclose(out.to_numpy(), best[:, 0], rtol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), want.reshape(-1), rtol=1e-6)


@sp.kernel
def start_from(y: sp.Array, m: sp.Array):
    for i in range(1):
        m[None] = y[0] * 2.0


@sp.kernel
def raise_to(x: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(m[None], x[i])


@pytest.mark.parametrize("old_wins", [True, False])
def test_the_old_value_keeps_the_gradient_when_no_contribution_wins(old_wins, rng):
    y0 = np.array([1.5 if old_wins else -1.5], np.float32)
    x0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
    y = sp.from_numpy(y0, needs_grad=True)
    x = sp.from_numpy(x0, needs_grad=True)
    m = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(m):
        start_from(y, m)
        raise_to(x, m)
    top = np.argmax(x0)
    np.testing.assert_allclose(y.grad.to_numpy(), [2.0 if old_wins else 0.0])
    np.testing.assert_allclose(x.grad.to_numpy(), 0.0 if old_wins else np.eye(N)[top])


def test_reused_extremum_array_under_a_tape(rng):
    """One m for three reductions: each gradient needs the m its launch left (the winners), which the next
    fill overwrites; the Tape keeps it."""
    xs0 = [rng.uniform(-1, 1, N).astype(np.float32) for _ in range(3)]
    xs = [sp.from_numpy(v, needs_grad=True) for v in xs0]
    c = sp.from_numpy(np.array(0.25, np.float32), needs_grad=True)
    m = sp.ndarray(sp.f32, (), needs_grad=True)
    total = sp.ndarray(sp.f32, (1,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        for x in xs:
            m.fill(-1e30)
            shifted_max(x, c, m)
            accumulate_squared(m, total)
        weighted(total, sp.from_numpy(np.ones(1, np.float32)), loss)
    assert tape.checkpoint_bytes > 0
    for x, v in zip(xs, xs0):   # loss = sum_k (max(x_k) + c)^2
        np.testing.assert_allclose(x.grad.to_numpy(), np.eye(N)[np.argmax(v)] * 2 * (v.max() + 0.25), rtol=1e-5)
    np.testing.assert_allclose(c.grad[None], sum(2 * (v.max() + 0.25) for v in xs0), rtol=1e-5)


@sp.kernel
def accumulate_squared(m: sp.Array, total: sp.Array):
    for i in range(1):
        total[0] += m[None] * m[None]


@sp.kernel
def pool2d(x: sp.Array, out: sp.Array):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        sp.atomic_min(out[i // 2, j // 3], x[i, j] * x[i, j])


def test_two_dimensional_targets_forward_and_reverse_agree(rng):
    """<J t, s> = <t, J^T s> on a 2-D min-pool (per-element winners, fix-up over a 2-D target)."""
    x0 = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    t0, s0 = rng.uniform(-1, 1, (4, 6)), rng.uniform(-1, 1, (2, 2)).astype(np.float32)
    xg = sp.from_numpy(x0, needs_grad=True)
    out = sp.ndarray(sp.f32, (2, 2), needs_grad=True)
    out.fill(1e30)
    pool2d(xg, out)
    out.grad.from_numpy(s0)
    pool2d.grad(xg, out)
    xf = sp.from_numpy(x0, needs_dual=True)
    outf = sp.ndarray(sp.f32, (2, 2), needs_dual=True)
    outf.fill(1e30)
    with sp.FwdMode(loss=outf, param=xf, seed=t0.reshape(-1)):
        pool2d(xf, outf)
    lhs = float(np.sum(outf.dual.to_numpy() * s0))
    rhs = float(np.sum(t0 * xg.grad.to_numpy()))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-5)
    assert abs(rhs) > 1e-3   # not a trivially zero pairing

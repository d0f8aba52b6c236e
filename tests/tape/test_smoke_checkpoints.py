"""DiffTaichi's smoke (smoke_taichi_gpu.py) ported small: advection reads the velocity as `v[t + t_offset]`
(t_offset a scalar argument here, a compile-time constant in the original), the Gauss-Seidel pressure rows as
`p[k + t * G]`, and every row of every array is written once, so a Tape keeps nothing: it used to copy all of v
at every step (ir/rows.py knew only `t + constant`). The loss and the gradients of the initial velocity and
smoke against the same algorithm in float64 numpy (central differences along random directions), on Vulkan
and the interpreter."""
import numpy as np
import pytest

import spvad as sp
from tests.conftest import rand

pytestmark = pytest.mark.backends

n_grid, steps, G = 8, 5, 3   # G: Gauss-Seidel iterations per step
dx = 1.0 / n_grid


@sp.func
def imod(n, divisor):
    ret = n % divisor
    if ret < 0:
        ret += divisor
    return ret


@sp.func
def dec_index(index):
    new_index = index - 1
    if new_index < 0:
        new_index = n_grid - 1
    return new_index


@sp.func
def inc_index(index):
    new_index = index + 1
    if new_index >= n_grid:
        new_index = 0
    return new_index


@sp.kernel
def compute_div(v_updated: sp.Array, div: sp.Array, t: sp.i32):
    for y, x in sp.ndrange(n_grid, n_grid):
        div[t, y, x] = -0.5 * dx * (v_updated[t, inc_index(y), x][0] - v_updated[t, dec_index(y), x][0] +
                                    v_updated[t, y, inc_index(x)][1] - v_updated[t, y, dec_index(x)][1])


@sp.kernel
def compute_p(div: sp.Array, p: sp.Array, t: sp.i32, k: sp.i32):
    for y, x in sp.ndrange(n_grid, n_grid):
        a = k + t * G
        p[a + 1, y, x] = (div[t, y, x] + p[a, dec_index(y), x] + p[a, inc_index(y), x] +
                          p[a, y, dec_index(x)] + p[a, y, inc_index(x)]) / 4


@sp.kernel
def update_v(v: sp.Array, v_updated: sp.Array, p: sp.Array, t: sp.i32):
    for y, x in sp.ndrange(n_grid, n_grid):
        a = G * t + G   # the last pressure of step t (the original reads p[G * t - 1])
        v[t, y, x] = sp.Vector([v_updated[t, y, x][0] - 0.5 * (p[a, inc_index(y), x] - p[a, dec_index(y), x]) / dx,
                                v_updated[t, y, x][1] - 0.5 * (p[a, y, inc_index(x)] - p[a, y, dec_index(x)]) / dx])


@sp.kernel
def advect(v: sp.Array, field: sp.template(), field_out: sp.template(), t_offset: sp.i32, t: sp.i32):
    for y, x in sp.ndrange(n_grid, n_grid):
        center_x = y - v[t + t_offset, y, x][0]
        center_y = x - v[t + t_offset, y, x][1]
        left_ix = sp.cast(sp.floor(center_x), sp.i32)
        top_ix = sp.cast(sp.floor(center_y), sp.i32)
        rw = center_x - left_ix
        bw = center_y - top_ix
        left_ix = imod(left_ix, n_grid)
        right_ix = inc_index(left_ix)
        top_ix = imod(top_ix, n_grid)
        bot_ix = inc_index(top_ix)
        field_out[t, y, x] = (1 - rw) * ((1 - bw) * field[t - 1, left_ix, top_ix] +
                                         bw * field[t - 1, left_ix, bot_ix]) + \
            rw * ((1 - bw) * field[t - 1, right_ix, top_ix] + bw * field[t - 1, right_ix, bot_ix])


@sp.kernel
def compute_loss(smoke: sp.Array, target: sp.Array, loss: sp.Array):
    for i in range(n_grid):
        for j in range(n_grid):
            loss[None] += (target[i, j] - smoke[steps - 1, i, j]) ** 2 * (1 / n_grid ** 2)


def forward(a):
    for t in range(1, steps):
        advect(a["v"], a["v"], a["v_updated"], -1, t)
        compute_div(a["v_updated"], a["div"], t)
        for k in range(G):
            compute_p(a["div"], a["p"], t, k)
        update_v(a["v"], a["v_updated"], a["p"], t)
        advect(a["v"], a["smoke"], a["smoke"], 0, t)
    compute_loss(a["smoke"], a["target"], a["loss"])


# ---- the same in float64 numpy ---------------------------------------------------------------------------
def up(f, axis):      # f[inc_index(i)] along `axis`
    return np.roll(f, -1, axis)


def down(f, axis):    # f[dec_index(i)]
    return np.roll(f, 1, axis)


def advect_np(v, field):
    """field_out[y, x] from velocity v (n, n, 2) and field (n, n[, 2]) as the kernel computes it."""
    y, x = np.meshgrid(np.arange(n_grid), np.arange(n_grid), indexing="ij")
    cx, cy = y - v[..., 0], x - v[..., 1]
    left, top = np.floor(cx).astype(int), np.floor(cy).astype(int)
    rw, bw = cx - left, cy - top
    left, top = left % n_grid, top % n_grid
    right, bot = (left + 1) % n_grid, (top + 1) % n_grid
    if field.ndim == 3:
        rw, bw = rw[..., None], bw[..., None]
    return (1 - rw) * ((1 - bw) * field[left, top] + bw * field[left, bot]) + \
        rw * ((1 - bw) * field[right, top] + bw * field[right, bot])


def loss_np(q, target):
    v, smoke = q["v0"], q["smoke0"]
    p = np.zeros((n_grid, n_grid))
    for _ in range(1, steps):
        v_updated = advect_np(v, v)
        div = -0.5 * dx * (up(v_updated[..., 0], 0) - down(v_updated[..., 0], 0) +
                           up(v_updated[..., 1], 1) - down(v_updated[..., 1], 1))
        for _ in range(G):
            p = (div + down(p, 0) + up(p, 0) + down(p, 1) + up(p, 1)) / 4
        v = np.stack([v_updated[..., 0] - 0.5 * (up(p, 0) - down(p, 0)) / dx,
                      v_updated[..., 1] - 0.5 * (up(p, 1) - down(p, 1)) / dx], axis=-1)
        smoke = advect_np(v, smoke)
    return np.sum((target - smoke) ** 2) / n_grid ** 2


def test_smoke_keeps_nothing_and_its_gradients_match_float64(rng):
    v0, smoke0, target = rand(rng, (n_grid, n_grid, 2), 0.2, 1.3), rand(rng, (n_grid, n_grid), 0.0, 1.0), \
        rand(rng, (n_grid, n_grid), 0.0, 1.0)
    a = {"v": sp.ndarray(sp.vec2, (steps, n_grid, n_grid), needs_grad=True),
         "v_updated": sp.ndarray(sp.vec2, (steps, n_grid, n_grid), needs_grad=True),
         "div": sp.ndarray(sp.f32, (steps, n_grid, n_grid), needs_grad=True),
         "p": sp.ndarray(sp.f32, (steps * G + 1, n_grid, n_grid), needs_grad=True),
         "smoke": sp.ndarray(sp.f32, (steps, n_grid, n_grid), needs_grad=True),
         "target": sp.from_numpy(target), "loss": sp.ndarray(sp.f32, (), needs_grad=True)}
    for name, first in (("v", v0), ("smoke", smoke0)):
        full = np.zeros(a[name].storage_shape, np.float32)
        full[0] = first
        a[name].from_numpy(full)
    with sp.Tape(a["loss"]) as tape:
        forward(a)
    assert tape.checkpoint_bytes == 0

    q = {"v0": v0.astype(np.float64), "smoke0": smoke0.astype(np.float64)}
    target64 = target.astype(np.float64)
    np.testing.assert_allclose(a["loss"][None], loss_np(q, target64), rtol=1e-4)
    grads = {"v0": a["v"].grad.to_numpy()[0], "smoke0": a["smoke"].grad.to_numpy()[0]}
    eps = 1e-6
    for name in q:
        for _ in range(2):
            d = rng.standard_normal(q[name].shape)
            plus, minus = dict(q), dict(q)
            plus[name], minus[name] = q[name] + eps * d, q[name] - eps * d
            want = (loss_np(plus, target64) - loss_np(minus, target64)) / (2 * eps)
            assert float(np.sum(grads[name] * d)) == pytest.approx(want, rel=2e-3, abs=1e-6), name

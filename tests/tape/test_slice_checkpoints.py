"""A Tape keeps only the slices a recorded gradient reads, along whatever axis carries time (checkpoints.py,
ir/rows.py): a column `h[i, t]` of an (n, T) array rewritten in place is kept as that column (a strided copy,
also across the memory blocks of an addressed array), a row read as `v[t + k]` with k a scalar argument
as that row, and examples/electric.py (time on the second axis of hidden and gravitation) keeps two rows of
8 bytes per step where it kept whole arrays. Gradients against float64 references on Vulkan and the
interpreter."""
import numpy as np
import pytest

import spvad as sp
from tests.conftest import rand
from tests.examples.test_electric import PARAMS, load, rollout_numpy
from tests.launch.test_big_arrays import shrink_limits

pytestmark = pytest.mark.backends

N, T, DT = 6, 5, 0.3


@sp.kernel
def column_step(h: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(h.shape[0]):
        h[i, t + 1] = h[i, t] + DT * sp.sin(h[i, t]) * w[i]


@sp.kernel
def squash_column(h: sp.Array, t: sp.i32):
    for i in range(h.shape[0]):
        h[i, t] = sp.tanh(1.5 * h[i, t])   # in place: its gradient reads the column it overwrites


@sp.kernel
def column_loss(h: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(h.shape[0]):
        loss[None] += h[i, t] * h[i, t]


def directional_check(got, loss_of, p, name, rng, eps=1e-6):
    """`got` (the gradient w.r.t. p[name]) against central differences of the float64 `loss_of` along two
    random directions."""
    for _ in range(2):
        d = rng.standard_normal(p[name].shape)
        plus, minus = dict(p), dict(p)
        plus[name], minus[name] = p[name] + eps * d, p[name] - eps * d
        want = (loss_of(plus) - loss_of(minus)) / (2 * eps)
        assert float(np.sum(got * d)) == pytest.approx(want, rel=1e-3, abs=1e-5), name


@pytest.mark.parametrize("n, blocks", [(N, False), (2000, True)])
def test_a_column_rewritten_in_place_keeps_that_column(rng, monkeypatch, n, blocks):
    """squash_column(t) reads and rewrites column t of an (n, T + 1) array: each keeps one column (n floats,
    one region per row of h), not the array. With `blocks`, h is an addressed array in 4 KiB blocks, so the
    column's regions fall in several blocks."""
    if blocks:
        if sp.device_info()["backend"] != "vulkan":
            pytest.skip("addressed buffers are Vulkan's")
        shrink_limits(monkeypatch)
    x0, w0 = rand(rng, n), rand(rng, n)
    h0 = np.zeros((n, T + 1), np.float32)
    h0[:, 0] = x0
    h, w = sp.from_numpy(h0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        for t in range(T):
            column_step(h, w, t)
            squash_column(h, t + 1)
        column_loss(h, loss, T)
    assert h.buffer.addressed == blocks
    assert tape.checkpoint_bytes == T * n * 4

    def loss_of(p):
        x = p["x"]
        for _ in range(T):
            x = np.tanh(1.5 * (x + DT * np.sin(x) * p["w"]))
        return np.sum(x * x)

    p = {"x": x0.astype(np.float64), "w": w0.astype(np.float64)}
    np.testing.assert_allclose(loss[None], loss_of(p), rtol=1e-5)
    directional_check(h.grad.to_numpy()[:, 0], loss_of, p, "x", rng)
    directional_check(w.grad.to_numpy(), loss_of, p, "w", rng)


@sp.kernel
def shifted(v: sp.Array, out: sp.Array, w: sp.Array, t: sp.i32, k: sp.i32):
    for i in range(v.shape[1]):
        out[t, i] = sp.sin(v[t + k, i] * w[i])   # reads row t + k: two scalars


@sp.kernel
def rewrite_row(v: sp.Array, row: sp.i32):
    for i in range(v.shape[1]):
        v[row, i] = v[row, i] * v[row, i]


@sp.kernel
def all_loss(out: sp.Array, loss: sp.Array):
    for t, i in out:
        loss[None] += out[t, i] * out[t, i]


def test_a_row_read_at_an_offset_then_rewritten_keeps_that_row(rng):
    """shifted(t, k) reads v[t + k]; rewrite_row(t + k) then squares that row in place, and shifted reads it
    again at another offset (row T + t of out, k - T): one row is kept per step, and the gradient of the
    first read sees the row as it read it."""
    k = 2
    v0, w0 = rand(rng, (T + k, N)), rand(rng, N)
    v, w = sp.from_numpy(v0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    out, loss = sp.ndarray(sp.f32, (2 * T, N), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        for t in range(T):
            shifted(v, out, w, t, k)
            rewrite_row(v, t + k)
            shifted(v, out, w, T + t, k - T)   # row t + k again, squared
        all_loss(out, loss)
    assert tape.checkpoint_bytes == T * N * 4

    def loss_of(p):
        v, out = p["v"].copy(), np.zeros((2 * T, N))
        for t in range(T):
            out[t] = np.sin(v[t + k] * p["w"])
            v[t + k] = v[t + k] ** 2
            out[T + t] = np.sin(v[t + k] * p["w"])
        return np.sum(out * out)

    p = {"v": v0.astype(np.float64), "w": w0.astype(np.float64)}
    np.testing.assert_allclose(loss[None], loss_of(p), rtol=1e-5)
    directional_check(v.grad.to_numpy(), loss_of, p, "v", rng)
    directional_check(w.grad.to_numpy(), loss_of, p, "w", rng)


def test_electric_keeps_a_row_of_x_and_v_per_step(rng):
    """examples/electric.py: nn1(t) reads x[t] and v[t] before advance(t) overwrites them, so each step keeps
    those two rows (a vec2 each; not x[t - 1], which advance's own gradient reads and nothing overwrites);
    hidden[i, t] and gravitation[i, t] (one column per step, written once) keep
    nothing. Before rows along any axis, the Tape copied hidden and gravitation whole at every step. Loss
    and weight gradients against the example's float64 numpy version, on a second rollout (the network
    reads the states the first left)."""
    steps = 12
    m = load(steps=steps, n_hidden=8)
    m.init_weights(np.random.default_rng(3))
    for k in range(2):
        m.initialize(np.random.default_rng(10 + k))
        state = [a.to_numpy().astype(np.float64) for a in (m.goal, m.goal_v, m.x, m.v)]
        params = [getattr(m, p).to_numpy().astype(np.float64) for p in PARAMS]
        with sp.Tape(m.loss) as tape:
            m.forward()
        assert tape.checkpoint_bytes == (steps - 1) * 2 * 8
    np.testing.assert_allclose(m.loss[None], rollout_numpy(m, params, *state), rtol=1e-4)
    grads = [getattr(m, p).grad.to_numpy() for p in PARAMS]
    for which in range(4):
        p = dict(enumerate(params))
        directional_check(grads[which], lambda q: rollout_numpy(m, [q[j] for j in range(4)], *state), p, which,
                          rng)


@sp.kernel
def pair(a: sp.Array, out: sp.Array, k: sp.i32, r0: sp.i32, r1: sp.i32):
    for i in range(a.shape[1]):
        out[k, i] = sp.sin(a[r0, i]) * sp.cos(a[r1, i])


@sp.kernel
def bump(a: sp.Array, r: sp.i32):
    for i in range(a.shape[1]):
        a[r, i] = a[r, i] * 1.5 + 0.1


@sp.kernel
def squash_both(a: sp.Array):
    for i in range(a.shape[1]):
        first, second = a[0, i], a[1, i]
        a[0, i] = sp.tanh(first)
        a[1, i] = sp.tanh(second)


@sp.kernel
def sum_squares(a: sp.Array, loss: sp.Array):
    for r, i in a:
        loss[None] += a[r, i] * a[r, i]


@pytest.mark.parametrize("n", [5, 70_000])   # 70,000 floats a row: the last copy is a buffer of its own
def test_each_version_reads_its_own_rows_of_a_shared_copy(rng, n):
    """pair reads rows 0 and 1 (version 1); bump rewrites row 0, keeping it (copy 1); pair reads the new row 0
    (version 2); squash_both rewrites both rows, keeping one copy of them (copy 2) that holds row 1 of version
    1 and row 0 of version 2. The first pair's gradient must take row 0 from copy 1 and row 1 from copy 2."""
    if n > 1000 and sp.device_info()["backend"] != "vulkan":
        pytest.skip("the interpreter runs a thread at a time")
    a0 = rand(rng, (2, n))
    a = sp.from_numpy(a0, needs_grad=True)
    out, loss = sp.ndarray(sp.f32, (2, n), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        pair(a, out, 0, 0, 1)
        bump(a, 0)
        pair(a, out, 1, 0, 0)
        squash_both(a)
        sum_squares(out, loss)
        sum_squares(a, loss)
    assert tape.checkpoint_bytes == 3 * n * 4   # row 0, then rows 0 and 1

    def loss_of(p):
        a = p["a"].copy()
        out0 = np.sin(a[0]) * np.cos(a[1])
        a[0] = a[0] * 1.5 + 0.1
        out1 = np.sin(a[0]) * np.cos(a[0])
        a = np.tanh(a)
        return np.sum(out0 ** 2) + np.sum(out1 ** 2) + np.sum(a ** 2)

    p = {"a": a0.astype(np.float64)}
    np.testing.assert_allclose(loss[None], loss_of(p), rtol=1e-4)
    directional_check(a.grad.to_numpy(), loss_of, p, "a", rng)

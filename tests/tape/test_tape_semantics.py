"""Taichi's Tape semantics: the loss starts from 0 in every Tape, `clear_gradients=` and
`sp.clear_all_gradients()`; arrays created inside the block (their first host writes are their
initialisation, not an overwrite). Whole programs against float64 references, on Vulkan and the interpreter."""
import gc
import weakref

import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends


def rand(rng, shape, lo=0.2, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


@sp.kernel
def advance(u: sp.Array, c: sp.Array, t: sp.i32):
    for i in range(1, u.shape[1] - 1):   # a damped 1-D wave, one array row per step (as DiffTaichi's wave)
        lap = u[t, i - 1] - 2.0 * u[t, i] + u[t, i + 1]
        u[t + 1, i] = u[t, i] + c[None] * sp.tanh(lap) - 0.1 * u[t, i]


@sp.kernel
def misfit(u: sp.Array, target: sp.Array, t: sp.i32, loss: sp.Array):
    for i in range(u.shape[1]):
        d = u[t, i] - target[i]
        loss[None] += d * d   # accumulated: only right if the Tape starts it at 0


def wave_np(u0, c, target, steps):
    u = u0.astype(np.float64).copy()
    for _ in range(steps):
        nxt = u.copy()
        lap = u[:-2] - 2 * u[1:-1] + u[2:]
        nxt[1:-1] = u[1:-1] + c * np.tanh(lap) - 0.1 * u[1:-1]
        u = nxt
    return np.sum((u - target) ** 2)


def test_a_loss_accumulated_with_plus_equals_starts_at_zero_in_every_tape(rng):
    """DiffTaichi's wave/smoke/electric pattern: each iteration's Tape reports that iteration's loss."""
    n, steps = 12, 6
    u0, target = rand(rng, n), rand(rng, n)
    u0[0] = u0[-1] = 0.0
    u = sp.ndarray(sp.f32, (steps + 1, n))
    c = sp.from_numpy(np.array(0.3, np.float32), needs_grad=True)
    tgt = sp.from_numpy(target)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    losses = []
    for _ in range(4):   # gradient descent on the wave speed
        u.from_numpy(np.vstack([u0[None], np.zeros((steps, n), np.float32)]))
        with sp.Tape(loss):
            for t in range(steps):
                advance(u, c, t)
            misfit(u, tgt, steps, loss)
        cv = float(c[None])
        losses.append(loss[None])
        np.testing.assert_allclose(loss[None], wave_np(u0, cv, target, steps), rtol=1e-4)
        fd = (wave_np(u0, cv + 1e-6, target, steps) - wave_np(u0, cv - 1e-6, target, steps)) / 2e-6
        np.testing.assert_allclose(c.grad[None], fd, rtol=1e-3, atol=1e-5)
        c[None] = cv - 0.05 * float(c.grad[None]) / max(1.0, abs(float(c.grad[None])))
    assert losses[-1] < losses[0]   # the loss falls instead of piling up


@sp.kernel
def put(loss: sp.Array, v: sp.f32):
    loss[None] = v


@sp.kernel
def sum_squares(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def test_the_loss_is_zeroed_in_launch_order(rng):
    p = rand(rng, 7)
    x = sp.from_numpy(p, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    put(loss, 5.0)   # queued, not yet run: the Tape's zero comes after it
    with sp.Tape(loss):
        sum_squares(x, loss)
    np.testing.assert_allclose(loss[None], np.sum(p.astype(np.float64) ** 2), rtol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), 2.0 * p, rtol=1e-6)


def test_clear_gradients_false_keeps_accumulated_gradients(rng):
    p, q = rand(rng, 5), rand(rng, 5)
    x = sp.from_numpy(p, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        sum_squares(x, loss)
    x.from_numpy(q)
    with sp.Tape(loss, clear_gradients=False):   # minibatches: gradients add up
        sum_squares(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2.0 * (p.astype(np.float64) + q), rtol=1e-6)
    with sp.Tape(loss):                            # the default clears them again
        sum_squares(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2.0 * q, rtol=1e-6)


def test_clear_all_gradients_zeroes_every_live_array_and_keeps_none_alive(rng):
    x = sp.from_numpy(rand(rng, 4), needs_grad=True)
    unseen = sp.ndarray(sp.f32, (3,), needs_grad=True)   # never touched by a Tape
    unseen.grad.fill(2.5)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        sum_squares(x, loss)
    assert np.all(x.grad.to_numpy() != 0)
    sp.clear_all_gradients()
    for a in (x, unseen, loss):
        np.testing.assert_array_equal(a.grad.to_numpy(), 0.0)
    gone = weakref.ref(unseen)
    del unseen
    gc.collect()
    assert gone() is None   # tracked weakly
    sp.clear_all_gradients()


# ---- arrays created inside the block ---------------------------------------------------------------------
@sp.kernel
def energy(x: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += w[i] * sp.sin(x[i]) * x[i]


def energy_grads(p, w):
    p, w = p.astype(np.float64), w.astype(np.float64)
    return w * (np.cos(p) * p + np.sin(p)), np.sin(p) * p


def test_an_array_created_inside_the_tape_gets_its_gradient(rng):
    p, wv = rand(rng, 6), rand(rng, 6)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        x = sp.from_numpy(p, needs_grad=True)     # its upload initialises it: no overwrite
        w = sp.ndarray(sp.f32, (6,), needs_grad=True)
        w.from_numpy(wv)
        energy(x, w, loss)
    gx, gw = energy_grads(p, wv)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-5, atol=1e-6)


def test_fill_and_setitem_of_a_new_array_initialise_it(rng):
    p = rand(rng, 5)
    x = sp.from_numpy(p, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        w = sp.ndarray(sp.f32, (5,), needs_grad=True)
        w.fill(2.0)
        w[3] = -0.5                                # still before any launch: initialisation
        energy(x, w, loss)
    wv = np.array([2.0, 2.0, 2.0, -0.5, 2.0], np.float32)
    gx, gw = energy_grads(p, wv)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-5, atol=1e-6)


def test_an_overwrite_after_a_launch_still_cuts(rng):
    """Host writes into a new array after a recorded launch read it overwrite what that launch saw: the
    gradient is that of the array's first contents, through the first launch only (as documented)."""
    p, p2, wv = rand(rng, 4), rand(rng, 4), rand(rng, 4)
    w = sp.from_numpy(wv, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        x = sp.from_numpy(p, needs_grad=True)
        energy(x, w, loss)
        x.from_numpy(p2)                          # an overwrite: the first contents reach the loss once
        energy(x, w, loss)
    gx, _ = energy_grads(p, wv)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-5, atol=1e-6)
    want = np.sin(p.astype(np.float64)) * p + np.sin(p2.astype(np.float64)) * p2
    np.testing.assert_allclose(w.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)


@sp.kernel
def blend(a: sp.Array, b: sp.Array, out: sp.Array):
    for i in range(a.shape[0]):
        out[i] = a[i] * sp.cos(b[i])


def test_a_whole_program_allocating_inside_the_tape(rng):
    """Scratch buffers made per step inside the block, some filled from the host, reused by later steps."""
    p, q = rand(rng, 6), rand(rng, 6)
    x = sp.from_numpy(p, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def program(xv, qv):
        a = xv
        for _ in range(3):
            a = a * np.cos(qv)
        return np.sum(a * a)

    with sp.Tape(loss):
        b = sp.from_numpy(q, needs_grad=True)
        a = x
        for _ in range(3):
            nxt = sp.ndarray(sp.f32, (6,))
            nxt.fill(0.0)                          # born here: its fill is its initialisation
            blend(a, b, nxt)
            a = nxt
        sum_squares(a, loss)
    eps, pd, qd = 1e-6, p.astype(np.float64), q.astype(np.float64)
    fd_x = [(program(pd + eps * e, qd) - program(pd - eps * e, qd)) / (2 * eps) for e in np.eye(6)]
    fd_b = [(program(pd, qd + eps * e) - program(pd, qd - eps * e)) / (2 * eps) for e in np.eye(6)]
    np.testing.assert_allclose(loss[None], program(pd, qd), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), fd_x, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.grad.to_numpy(), fd_b, rtol=1e-4, atol=1e-5)

"""Reverse-mode semantics around the loops: what a gradient launch does to the outputs' .grad (stores
consume it, atomic adds keep it), atomic max/min (only the winner gets the gradient), and `sp.Tape`.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import check_grad, positive, rand

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N = 12


# ---- global store semantics: a kernel's gradient consumes the .grad of what it stores ------------------
@sp.kernel
def overwrite(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * 0.9 + 0.1
            y[i] = v   # overwritten each iteration


@sp.kernel
def accumulate(x: sp.Array, loss: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * 0.9 + 0.1
        loss[None] += v


def test_store_consumes_output_grad(rng):
    """`y[i] = e` overwrites y, so the gradient of the launch takes y.grad into e and zeroes it: y's
    value before the launch did not influence y afterwards (as in Taichi). `loss[None] += e` keeps it."""
    x = sp.from_numpy(rand(rng, N), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    overwrite(x, y, 4)
    y.grad.fill(1.0)
    overwrite.grad(x, y, 4)
    np.testing.assert_array_equal(y.grad.to_numpy(), np.zeros(N))
    np.testing.assert_allclose(x.grad.to_numpy(), np.full(N, 0.9 ** 4), rtol=1e-6)

    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    accumulate(x, loss, 3)
    loss.grad.fill(2.0)
    accumulate.grad(x, loss, 3)
    assert loss.grad[None] == 2.0


# ---- atomic max/min: only the winning element receives the gradient ----------------------------------
@sp.kernel
def reduce_max(x: sp.Array, w: sp.Array, m: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.1
        sp.atomic_max(m[None], v)


@sp.kernel
def reduce_min(x: sp.Array, w: sp.Array, m: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.1
        sp.atomic_min(m[None], v)


@pytest.mark.parametrize("kernel,pick,init", [(reduce_max, np.argmax, -1e30), (reduce_min, np.argmin, 1e30)],
                         ids=["max", "min"])
def test_atomic_extremum_gradient_goes_to_winner(kernel, pick, init, rng):
    xn, wn = rand(rng, N), rand(rng, N, 0.5, 1.5)

    def ref(x, w, m, n):
        vals = []
        for i in range(len(x)):
            v = x[i]
            for _ in range(n):
                v = v * w[i] + 0.1
            vals.append(v)
        m[()] = max(m[()], max(vals)) if kernel is reduce_max else min(m[()], min(vals))

    dev = check_grad(kernel, ref, [xn, wn, np.array(init, np.float32), 3], [2], [0, 1], rng)
    g = dev[0].grad.to_numpy()
    assert np.count_nonzero(g) == 1 and np.flatnonzero(g)[0] == pick(
        [_final(xn[i], wn[i], 3) for i in range(N)])


def _final(x, w, n):
    v = float(x)
    for _ in range(n):
        v = v * float(w) + 0.1
    return v


# ---- sp.Tape --------------------------------------------------------------------------------------------
@sp.kernel
def tape_first(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + w[i] * sp.sin(v)
        y[i] = v


@sp.kernel
def tape_second(y: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        u = y[i]
        k = 0
        while u > 0.1 and k < 5:
            u = u * 0.5 * w[i]
            k += 1
        loss[None] += u * u


def _tape_ref(x, w, n):
    loss = 0.0
    for i in range(len(x)):
        v = float(x[i])
        for _ in range(n):
            v = v + float(w[i]) * math.sin(v)
        u, k = v, 0
        while u > 0.1 and k < 5:
            u = u * 0.5 * float(w[i])
            k += 1
        loss += u * u
    return loss


def _fd(f, a, eps=1e-6):
    g = np.zeros(a.shape)
    for j in range(a.size):
        p, m = a.astype(np.float64), a.astype(np.float64)
        p[j] += eps
        m[j] -= eps
        g[j] = (f(p) - f(m)) / (2 * eps)
    return g


def test_tape_two_kernel_chain(rng):
    """Tape zeroes the grads of arrays it sees, seeds loss.grad = 1 and runs the gradients in reverse."""
    xn, wn, n = rand(rng, N), positive(rng, N, 0.5, 1.5), 4
    x = sp.from_numpy(xn, needs_grad=True)
    w = sp.from_numpy(wn, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    for a in (x, w, y):
        a.grad.fill(123.0)   # stale values: the Tape must zero them
    loss.grad.fill(-7.0)
    with sp.Tape(loss=loss):
        tape_first(x, w, y, n)
        tape_second(y, w, loss)
    np.testing.assert_allclose(loss[None], _tape_ref(xn, wn, n), rtol=1e-5)
    assert loss.grad[None] == 1.0
    gx = _fd(lambda a: _tape_ref(a, wn, n), xn)
    gw = _fd(lambda a: _tape_ref(xn, a, n), wn)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-4, atol=1e-4 * np.abs(gx).max())
    np.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-4, atol=1e-4 * np.abs(gw).max())
    np.testing.assert_array_equal(y.grad.to_numpy(), np.zeros(N))   # consumed by tape_first's gradient


def test_tape_rejects_non_scalar_loss():
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    with pytest.raises(sp.SpvadError, match="single element"):
        sp.Tape(loss=y)
    with pytest.raises(sp.SpvadError, match="needs_grad"):
        sp.Tape(loss=sp.ndarray(sp.f32, ()))


# ---- known bugs elsewhere ---------------------------------------------------------------------------------
@sp.kernel
def serial_plain_init(x: sp.Array, s: sp.Array, n: sp.i32):
    acc = 0.0   # a pure top-level assignment: the frontend treats it as a lazy constant
    if n > 0:
        for k in range(n):
            acc = acc + x[k]
    s[None] = acc


def test_serial_task_accumulates_from_plain_initialiser(rng):
    xn = rand(rng, N)
    x, s = sp.from_numpy(xn), sp.ndarray(sp.f32, ())
    serial_plain_init(x, s, 5)
    np.testing.assert_allclose(s[None], xn[:5].astype(np.float64).sum(), rtol=1e-5)

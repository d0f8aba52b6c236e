"""`sp.stop_gradient(v)`: v as a constant for kernel-level derivatives, reverse (`k.grad`, Tape) and forward
(`k.fwd`, FwdMode), for scalars and vectors (in-kernel derivatives: test_inkernel_derivatives.py)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


def rand(rng, shape, lo=0.2, hi=1.0):
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(np.float32)


@sp.kernel
def stopped(x: sp.Array, w: sp.Array, v: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        a = sp.stop_gradient(v[i])
        y[i] = x[i] * sp.stop_gradient(x[i]) + sp.sin(sp.stop_gradient(w[i]) * x[i]) + sp.dot(a, v[i]) * w[i]


def stopped_ref(X, W, V):
    return X * X + np.sin(W * X) + (V * V).sum(1) * W


def test_reverse_and_forward(rng):
    """y = x sg(x) + sin(sg(w) x) + (sg(v) . v) w: dy/dx = x + w cos(w x), dy/dw = v . v, dy/dv = v w."""
    n = 8
    X, W, V = rand(rng, n), rand(rng, n), rand(rng, (n, 3))
    x, w = sp.from_numpy(X, needs_grad=True, needs_dual=True), sp.from_numpy(W, needs_grad=True, needs_dual=True)
    v = sp.from_numpy(V, dtype=sp.vec3, needs_grad=True, needs_dual=True)
    y = sp.ndarray(sp.f32, (n,), needs_grad=True, needs_dual=True)
    seed = rand(rng, n)
    stopped(x, w, v, y)
    X64, W64, V64 = X.astype(np.float64), W.astype(np.float64), V.astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), stopped_ref(X64, W64, V64), rtol=1e-5)
    y.grad.from_numpy(seed)
    stopped.grad(x, w, v, y)
    np.testing.assert_allclose(x.grad.to_numpy(), seed * (X64 + W64 * np.cos(W64 * X64)), rtol=1e-5)
    np.testing.assert_allclose(w.grad.to_numpy(), seed * (V64 * V64).sum(1), rtol=1e-5)
    np.testing.assert_allclose(v.grad.to_numpy(), seed[:, None] * V64 * W64[:, None], rtol=1e-5)
    for arr, s in ((x, 1.0), (w, 0.0), (v, 0.0)):
        arr.dual.fill(s)
    stopped.fwd(x, w, v, y)
    np.testing.assert_allclose(y.dual.to_numpy(), X64 + W64 * np.cos(W64 * X64), rtol=1e-5)


@sp.kernel
def stopped_loss(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * sp.stop_gradient(x[i] * x[i])


def test_tape_and_fwdmode(rng):
    """d/dx sum x sg(x^2) = x^2 (the stopped factor is constant)."""
    X = rand(rng, 6)
    x = sp.from_numpy(X, needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    with sp.Tape(loss=loss):
        stopped_loss(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), X.astype(np.float64) ** 2, rtol=1e-6)
    with sp.FwdMode(loss=loss, param=x, seed=np.ones(6)):
        stopped_loss(x, loss)
    assert float(loss.dual.to_numpy()) == pytest.approx(float((X.astype(np.float64) ** 2).sum()), rel=1e-5)


def test_host_identity():
    assert sp.stop_gradient(1.5) == 1.5

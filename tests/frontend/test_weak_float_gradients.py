"""Gradients of f64 kernels whose locals start from float literals (weak floats, spvad/frontend/weak_floats.py):
values, `k.grad`, `k.fwd` and a Tape over several launches reusing a buffer, against float64 closed forms to
1e-12 relative (an f32 local anywhere would be off by 1e-8), on Vulkan and the interpreter backend."""
import numpy as np
import pytest

import spvad as sp
from adcheck import assert_close, rand
from test_weak_floats import horner

pytestmark = pytest.mark.backends
RTOL = 1e-12
ROWS, COLS, STEPS = 6, 5, 7


@pytest.fixture(autouse=True)
def float64_device():
    if not sp.device_info()["features"].get("float64"):
        pytest.skip("the device has no float64")


@sp.kernel
def weighted_rows(x: sp.Array, w: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0                                   # f64: what it sums is
        for k in range(x.shape[1]):                 # a dynamic loop: acc goes on an (f64) adstack
            acc = acc + w[k] * x[i, k] * x[i, k] / 3.0
        out[i] = acc * 0.1 + sp.sqrt(2.0) * x[i, 0]


def weighted_rows_ref(x, w):
    """(out, d out_i / d x_ik, d out_i / d w_k)."""
    out = 0.1 / 3.0 * (x * x) @ w + np.sqrt(2.0) * x[:, 0]
    dx = 0.2 / 3.0 * w * x
    dx[:, 0] += np.sqrt(2.0)
    return out, dx, 0.1 / 3.0 * x * x


@sp.kernel
def horner_rows(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        out[i] = horner(x[i], n)


def horner_ref(x, n):
    """(0.1 (1 + x + ... + x^(n-1)), its derivative)."""
    powers = np.arange(n)
    return 0.1 * (x[:, None] ** powers).sum(axis=1), 0.1 * (powers[1:] * x[:, None] ** (powers[1:] - 1)).sum(axis=1)


@sp.kernel
def half_sum_squared(p: sp.Array, out: sp.Array):
    for i in range(p.shape[0]):
        s = sp.Vector([0.0, 0.0, 0.0])
        for k in range(p.shape[1]):
            s += p[i, k] * 0.5
        out[i] = s.dot(s)


@sp.kernel
def half_squares(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        h = 0.5                                     # meets an f64 only: f64
        loss[None] += h * y[i] * y[i]


def test_reverse_and_forward_mode_of_an_f64_local_sum(rng):
    x, w = rand(rng, (ROWS, COLS), 0.2, 1.0, np.float64) / 3.0, rand(rng, COLS, 0.5, 1.5, np.float64) / 7.0
    dx, dw = sp.from_numpy(x, needs_grad=True, ), sp.from_numpy(w, needs_grad=True)
    out = sp.ndarray(sp.f64, ROWS, needs_grad=True)
    weighted_rows(dx, dw, out)
    want, d_x, d_w = weighted_rows_ref(x, w)
    assert_close(out.to_numpy(), want, RTOL, "forward")
    seed = rand(rng, ROWS, 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    weighted_rows.grad(dx, dw, out)
    assert_close(dx.grad.to_numpy(), seed[:, None] * d_x, RTOL, "d/dx")
    assert_close(dw.grad.to_numpy(), seed @ d_w, RTOL, "d/dw")

    fx, fw = sp.from_numpy(x, needs_dual=True), sp.from_numpy(w, needs_dual=True)
    fout = sp.ndarray(sp.f64, ROWS, needs_dual=True)
    tx, tw = rand(rng, x.shape, dtype=np.float64), rand(rng, w.shape, dtype=np.float64)
    fx.dual.from_numpy(tx)
    fw.dual.from_numpy(tw)
    weighted_rows.fwd(fx, fw, fout)
    assert_close(fout.dual.to_numpy(), (d_x * tx).sum(axis=1) + d_w @ tw, RTOL, "tangent")


def test_a_func_with_f64_arguments_computes_in_f64_in_both_modes(rng):
    x = rand(rng, ROWS, 0.3, 0.9, np.float64)
    want, slope = horner_ref(x, STEPS)
    dx, out = sp.from_numpy(x, needs_grad=True), sp.ndarray(sp.f64, ROWS, needs_grad=True)
    horner_rows(dx, out, STEPS)
    assert_close(out.to_numpy(), want, RTOL, "forward")
    seed = rand(rng, ROWS, 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    horner_rows.grad(dx, out, STEPS)
    assert_close(dx.grad.to_numpy(), seed * slope, RTOL, "d/dx")

    fx, fout = sp.from_numpy(x, needs_dual=True), sp.ndarray(sp.f64, ROWS, needs_dual=True)
    tangent = rand(rng, ROWS, dtype=np.float64)
    fx.dual.from_numpy(tangent)
    horner_rows.fwd(fx, fout, STEPS)
    assert_close(fout.dual.to_numpy(), slope * tangent, RTOL, "tangent")


def test_a_vector_local_of_f64_components(rng):
    p = rand(rng, (ROWS, COLS, 3), dtype=np.float64) / 3.0
    dp = sp.ndarray(sp.Vector(3, sp.f64), (ROWS, COLS), needs_grad=True, needs_dual=True)
    dp.from_numpy(p)
    out = sp.ndarray(sp.f64, ROWS, needs_grad=True, needs_dual=True)
    s = 0.5 * p.sum(axis=1)
    half_sum_squared(dp, out)
    assert_close(out.to_numpy(), (s * s).sum(axis=1), RTOL, "forward")
    seed = rand(rng, ROWS, 0.5, 1.5, np.float64)
    out.grad.from_numpy(seed)
    half_sum_squared.grad(dp, out)
    assert_close(dp.grad.to_numpy(), np.repeat((seed[:, None] * s)[:, None], COLS, axis=1), RTOL, "d/dp")
    tangent = rand(rng, p.shape, dtype=np.float64)
    dp.dual.from_numpy(tangent)
    half_sum_squared.fwd(dp, out)
    assert_close(out.dual.to_numpy(), (s * tangent.sum(axis=1)).sum(axis=1), RTOL, "tangent")


def test_a_tape_over_f64_launches_reusing_a_buffer(rng):
    """loss = sum(y1^2 / 2) + sum(y2^2 / 2), y1 and y2 written into one buffer by two launches."""
    x1, x2 = (rand(rng, (ROWS, COLS), 0.2, 1.0, np.float64) / 3.0 for _ in range(2))
    w = rand(rng, COLS, 0.5, 1.5, np.float64) / 7.0
    d1, d2, dw = (sp.from_numpy(a, needs_grad=True) for a in (x1, x2, w))
    y = sp.ndarray(sp.f64, ROWS, needs_grad=True)
    loss = sp.ndarray(sp.f64, (), needs_grad=True)
    with sp.Tape(loss):
        weighted_rows(d1, dw, y)
        half_squares(y, loss)
        weighted_rows(d2, dw, y)   # overwrites what the first gradient needs
        half_squares(y, loss)
    (y1, dx1, dw1), (y2, dx2, dw2) = weighted_rows_ref(x1, w), weighted_rows_ref(x2, w)
    assert_close(loss.to_numpy(), 0.5 * (y1 @ y1 + y2 @ y2), RTOL, "loss")
    assert_close(d1.grad.to_numpy(), y1[:, None] * dx1, RTOL, "d/dx1")
    assert_close(d2.grad.to_numpy(), y2[:, None] * dx2, RTOL, "d/dx2")
    assert_close(dw.grad.to_numpy(), y1 @ dw1 + y2 @ dw2, RTOL, "d/dw")

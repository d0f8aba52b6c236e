"""numpy scalars as kernel arguments, as users pass them (`for t in np.arange(T)`, `x.sum()`, `np.float16`):
any numpy integer or float scalar is a number like Python's int or float, range-checked against the
parameter's dtype; values and gradients are those of the same launches with Python numbers. A 0-d array is
refused by name (a mutable container, not a value; tests/kernel/test_control_flow.py pins it too)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N, T = 7, 5


@sp.kernel
def step(x: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = sp.sin(x[t, i]) * w[i] + 0.1 * t


@sp.kernel
def total(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        sp.atomic_add(loss[None], x[t, i] * x[t, i])


@sp.kernel
def affine(out: sp.Array, a: sp.f32, b, c):
    for i in range(out.shape[0]):
        out[i] = a * i + b + c


def rollout(x0, w, times):
    x = sp.ndarray(sp.f32, (T + 1, N), needs_grad=True)
    wa = sp.from_numpy(w, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    x.from_numpy(np.vstack([x0, np.zeros((T, N), np.float32)]))
    with sp.Tape(loss):
        for t in times:
            step(x, wa, t)
        total(x, loss, times[-1] + 1)
    return float(loss[None]), wa.grad.to_numpy(), x.grad.to_numpy()[0]


def loss_np(x0, w):
    x = x0.astype(np.float64)
    for t in range(T):
        x = np.sin(x) * w + 0.1 * t
    return np.sum(x * x)


def test_numpy_integer_time_steps_under_a_tape(rng):
    x0 = rng.uniform(-1, 1, N).astype(np.float32)
    w = rng.uniform(0.5, 1.5, N).astype(np.float32)
    as_numpy = rollout(x0, w, np.arange(T))                 # np.int64 steps
    as_python = rollout(x0, w, list(range(T)))
    np.testing.assert_allclose(as_numpy[0], as_python[0], rtol=1e-6)
    np.testing.assert_allclose(as_numpy[1], as_python[1], rtol=1e-6)
    np.testing.assert_allclose(as_numpy[2], as_python[2], rtol=1e-6)
    np.testing.assert_allclose(as_numpy[0], loss_np(x0, w.astype(np.float64)), rtol=1e-5)
    eps, d = 1e-6, rng.standard_normal(N)
    want = (loss_np(x0, w + eps * d) - loss_np(x0, w - eps * d)) / (2 * eps)
    np.testing.assert_allclose(as_numpy[1] @ d, want, rtol=1e-3)


@pytest.mark.parametrize("a, b, c", [
    (np.int64(2), np.int16(-3), np.float16(0.5)),    # int64 into an f32 parameter; unannotated int16 and float16
    (np.float32(1.5), np.uint8(200), np.int8(-2)),
    (2, np.uint64(7), np.float64(0.25)),
])
def test_numpy_scalars_are_numbers(a, b, c):
    out = sp.ndarray(sp.f64 if isinstance(c, np.float64) else sp.f32, (5,))
    affine(out, a, b, c)
    want = float(a) * np.arange(5) + float(b) + float(c)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-6)
    specs = affine._bind((out, a, b, c))[0]
    assert specs[1] == sp.f32 and specs[2] == sp.i32


@pytest.mark.parametrize("value, what", [
    (np.int64(2**40), "does not fit in i32"),
    (np.float32(1.5), "is i32 but got float"),
    (np.array([1, 2]), "must be an sp.ndarray or a scalar"),
    (np.complex64(1j), "must be a number"),
    (np.array(3), r"0-d array \(pass a\[\(\)\] or float\(a\)\)"),
])
def test_numpy_values_that_are_no_i32_are_refused(value, what):
    x = sp.ndarray(sp.f32, (T + 1, N))
    w = sp.ndarray(sp.f32, (N,))
    with pytest.raises(sp.ArgumentError, match=what):
        step(x, w, value)

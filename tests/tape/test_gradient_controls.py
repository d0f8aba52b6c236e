"""Gradient controls (issue 37): `sp.FwdMode(clear_gradients=...)` and its cleared seed, `@sp.no_grad` kernels
inside a Tape, and `@sp.grad_replaced` on methods with `.grad`. References are float64 numpy closed forms."""
import numpy as np
import pytest

import spvad as sp
from test_custom_gradients import rand, square, square_grad_scaled

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

N = 9


@sp.kernel
def sin_times(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.sin(x[i]) * x[i]


@sp.kernel
def sum_squares(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


@sp.no_grad
@sp.kernel
def diagnostic(y: sp.Array, d: sp.Array, loss: sp.Array):
    """Writes a diagnostic array and adds to the loss: neither is differentiated under a Tape."""
    for i in range(y.shape[0]):
        d[i] = y[i] * y[i] * y[i]
        loss[None] += 100.0 * y[i]


def test_fwdmode_clears_duals_and_seed(rng):
    x0, seed = rand(rng, N), rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    xf = x0.astype(np.float64)
    want = (np.cos(xf) * xf + np.sin(xf)) * seed
    for _ in range(2):   # the second block gives the same tangent, not twice it
        with sp.FwdMode(loss=y, param=x, seed=seed):
            sin_times(x, y)
        np.testing.assert_allclose(y.dual.to_numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(x.dual.to_numpy(), 0.0)   # the seed is cleared on exit


def test_fwdmode_without_clearing_accumulates_into_the_loss_dual(rng):
    x0, seed = rand(rng, N), rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_dual=True)
    xf = x0.astype(np.float64)
    want = np.sum(2 * xf * seed)
    with sp.FwdMode(loss=loss, param=x, seed=seed):
        sum_squares(x, loss)
    with sp.FwdMode(loss=loss, param=x, seed=seed, clear_gradients=False):
        sum_squares(x, loss)
    np.testing.assert_allclose(loss.dual.to_numpy(), 2 * want, rtol=1e-5)


def test_no_grad_kernel_is_skipped_by_the_tape(rng):
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    d = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        sin_times(x, y)
        diagnostic(y, d, loss)
        sum_squares(y, loss)
    xf = x0.astype(np.float64)
    yf = np.sin(xf) * xf
    np.testing.assert_allclose(d.to_numpy(), yf ** 3, rtol=1e-5, atol=1e-6)   # it ran
    np.testing.assert_allclose(loss.to_numpy(), np.sum(yf * yf) + 100 * np.sum(yf), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * yf * (np.cos(xf) * xf + np.sin(xf)), rtol=1e-5, atol=1e-6)


@sp.no_grad
@sp.kernel
def reset_after_reading(y: sp.Array, d: sp.Array):
    for i in range(y.shape[0]):
        d[i] = y[i] + 1.0
        y[i] = 0.0


@sp.kernel
def sixth_power(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        v = x[i] * x[i] * x[i]
        loss[None] += v * v


def test_no_grad_kernel_is_not_checked_by_a_validating_tape(rng):
    """Reading then overwriting y in one launch breaks the global data access rule of a differentiated
    launch; a no_grad kernel has no gradient to protect, so a validating Tape lets it run."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    d = sp.ndarray(sp.f32, (N,))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss, validation=True):
        sin_times(x, y)
        reset_after_reading(y, d)
        sixth_power(x, loss)
    xf = x0.astype(np.float64)
    np.testing.assert_allclose(d.to_numpy(), np.sin(xf) * xf + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y.to_numpy(), 0.0)
    np.testing.assert_allclose(x.grad.to_numpy(), 6 * xf ** 5, rtol=1e-5, atol=1e-6)


def test_no_grad_refuses_a_plain_function():
    with pytest.raises(sp.SpvadError, match="no_grad"):
        sp.no_grad(lambda x: x)


class Model:
    """A class whose step method has a supplied gradient (3x the true one, so a match proves it ran)."""

    def __init__(self, n):
        self.y = sp.ndarray(sp.f32, (n,), needs_grad=True)

    @sp.grad_replaced
    def step(self, x):
        square(x, self.y)

    @sp.grad_for(step)
    def step_grad(self, x):
        square_grad_scaled(x, self.y, 3.0)


def test_grad_replaced_method_and_its_grad(rng):
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    m = Model(N)
    with sp.Tape(loss=loss):
        m.step(x)
        sum_squares(m.y, loss)
    xf = x0.astype(np.float64)
    np.testing.assert_allclose(m.y.to_numpy(), xf * xf, rtol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), 3 * 2 * xf * 2 * xf * xf, rtol=1e-5, atol=1e-6)
    x.grad.fill(0)
    m.y.grad.fill(1)
    m.step.grad(x)   # runs the supplied gradient
    np.testing.assert_allclose(x.grad.to_numpy(), 3 * 2 * xf, rtol=1e-5, atol=1e-6)


def test_grad_of_a_replaced_function(rng):
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)

    @sp.grad_replaced
    def f(x, y):
        square(x, y)

    @sp.grad_for(f)
    def f_grad(x, y):
        square_grad_scaled(x, y, 1.0)

    y.grad.fill(1)
    f.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x0.astype(np.float64), rtol=1e-5, atol=1e-6)


@sp.kernel
def cube_into(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i] * x[i]


@pytest.mark.parametrize("how", ["copy_from", "copy", "clone"])
def test_copies_are_recorded_by_the_tape(rng, how):
    """loss = sum(sin(b) b)^2 with b a copy of a = x^3: the gradient flows through the copy."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    a = sp.ndarray(sp.f32, (N,), needs_grad=True)
    b = sp.ndarray(sp.f32, (N,), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        cube_into(x, a)
        if how == "copy_from":
            b.copy_from(a)
        elif how == "copy":
            sp.copy(b, a)
        else:
            b = a.clone()
        sin_times(b, y)
        sum_squares(y, loss)
        a.fill(0)   # a later overwrite of the copy's source changes nothing of the gradient
    xf = x0.astype(np.float64)
    af = xf ** 3
    yf = np.sin(af) * af
    np.testing.assert_allclose(b.to_numpy(), af, rtol=1e-6)
    want = 2 * yf * (np.cos(af) * af + np.sin(af)) * 3 * xf * xf
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-4, atol=1e-5)


def test_copy_into_an_array_without_grad_and_an_overwritten_destination(rng):
    """b (no needs_grad) first holds sin(x) x, then a copy of x: only the copy reaches the loss."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_grad=True)
    b = sp.ndarray(sp.f32, (N,))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        sin_times(x, b)
        b.copy_from(x)
        sum_squares(b, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x0.astype(np.float64), rtol=1e-5, atol=1e-6)
    assert b.grad is None   # the temporary companion goes with the Tape


def test_copy_inside_fwdmode_copies_the_dual(rng):
    x0, seed = rand(rng, N), rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    b = sp.ndarray(sp.f32, (N,), needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        b.copy_from(x)
        sin_times(b, y)
    xf = x0.astype(np.float64)
    np.testing.assert_allclose(y.dual.to_numpy(), (np.cos(xf) * xf + np.sin(xf)) * seed, rtol=1e-5, atol=1e-6)


def test_copy_refuses_another_shape():
    a, b = sp.ndarray(sp.f32, (3,)), sp.ndarray(sp.f32, (4,))
    with pytest.raises(sp.SpvadError, match="copy_from"):
        a.copy_from(b)

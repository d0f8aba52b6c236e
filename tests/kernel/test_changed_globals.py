"""Module-level values a kernel reads are compile-time constants (as in Taichi): its compiled launches keep
them. A variant compiled after one changed (its gradient, forward mode, other dtypes) would use the new value
and disagree with the launches already compiled (a loss from the old constant, its gradient from the new):
that is refused by name, for numbers, lists, tuples and @sp.funcs; a kernel defined again takes the new
values, and an unchanged value compiles every mode as before (float64 closed forms)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

SCALE = 2.0
WEIGHTS = [2.0, 3.0, 5.0]
TABLE = tuple(np.linspace(0.5, 1.5, 50).tolist())


@sp.func
def shape_fn(v):
    return v * v


def make_kernels():
    @sp.kernel
    def weighted(x: sp.Array, y: sp.Array):
        for i in x:
            y[i] = shape_fn(x[i]) * WEIGHTS[i % 3] * SCALE + TABLE[i % 50]

    @sp.kernel
    def total(y: sp.Array, loss: sp.Array):
        for i in y:
            loss[None] += y[i]
    return weighted, total


def arrays(rng):
    x0 = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    x = sp.from_numpy(x0, needs_grad=True, needs_dual=True)
    y = sp.ndarray(sp.f32, (6,), needs_grad=True, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    return x0.astype(np.float64), x, y, loss


def want_grad(x0):
    return 2 * x0 * np.array(WEIGHTS)[np.arange(6) % 3] * SCALE


@pytest.mark.parametrize("change", ["number", "list item", "tuple", "func"])
def test_a_value_changed_after_the_first_compile_is_refused_by_name(change, rng, monkeypatch):
    global shape_fn
    weighted, total = make_kernels()
    x0, x, y, loss = arrays(rng)
    weighted(x, y)   # the forward, compiled with the values as they are
    name = {"number": "SCALE", "list item": "WEIGHTS", "tuple": "TABLE", "func": "shape_fn"}[change]
    if change == "number":
        monkeypatch.setitem(globals(), "SCALE", 5.0)
    elif change == "list item":   # changed in place (put back by the `finally` below)
        WEIGHTS[0] = 100.0
    elif change == "tuple":
        monkeypatch.setitem(globals(), "TABLE", TABLE[::-1])
    else:
        monkeypatch.setitem(globals(), "shape_fn", sp.func(lambda v: v * v * v))
    try:
        with pytest.raises(sp.CompileError, match=f"kernel weighted: {name} changed since"):
            with sp.Tape(loss):
                weighted(x, y)
                total(y, loss)
        with pytest.raises(sp.CompileError, match=f"{name} changed since"):
            with sp.FwdMode(loss=y, param=x, seed=np.ones(6)):
                weighted(x, y)
    finally:
        WEIGHTS[0] = 2.0
        monkeypatch.undo()   # the values the kernel was compiled with: every mode compiles
    with sp.Tape(loss):
        weighted(x, y)
        total(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), want_grad(x0), rtol=1e-5)


def test_a_kernel_defined_again_takes_the_new_values(rng, monkeypatch):
    weighted, total = make_kernels()
    x0, x, y, loss = arrays(rng)
    weighted(x, y)
    monkeypatch.setitem(globals(), "SCALE", 5.0)
    weighted, total = make_kernels()   # a notebook cell run again
    with sp.Tape(loss):
        weighted(x, y)
        total(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), want_grad(x0), rtol=1e-5)
    assert want_grad(x0)[0] == pytest.approx(2 * x0[0] * 2.0 * 5.0)


class Settings:
    pass


SETTINGS = Settings()
SETTINGS.gain, SETTINGS.iteration = 1.5, 0
grad = 5   # a global named like an attribute the kernel reads (x.grad, x.shape): not what it reads


@sp.kernel
def gained(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i] * SETTINGS.gain


def test_a_program_changing_what_the_kernel_does_not_read_compiles_every_mode(rng, monkeypatch):
    """No false refusal: an object's other attributes (a counter) and globals that share a name with an
    attribute change freely between the forward and its gradient."""
    x0, x, y, loss = arrays(rng)
    weighted, total = make_kernels()
    gained(x, y)
    monkeypatch.setattr(SETTINGS, "iteration", 7)
    monkeypatch.setitem(globals(), "grad", 6)
    with sp.Tape(loss):
        gained(x, y)
        total(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x0 * 1.5, rtol=1e-5)

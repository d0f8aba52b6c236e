"""Compile-time autodiff rule errors: reading `.grad`/`.dual` in a differentiated kernel, differentiating
through the value an atomic returns, and forward-mode atomic max/min whose replay would read an array the
loop overwrote. Each raises
`sp.AutodiffRuleError` naming the kernel, the array and the source line, before anything is launched."""
import inspect

import numpy as np
import pytest

import spvad as sp

N = 8


def line_of(kernel, text):
    src, first = inspect.getsourcelines(kernel.fn)
    return first + next(k for k, line in enumerate(src) if text in line)


def arrays(grad=True, dual=True):
    x = sp.from_numpy(np.linspace(0.2, 1.1, N).astype(np.float32), needs_grad=grad, needs_dual=dual)
    y = sp.ndarray(sp.f32, (N,), needs_grad=grad, needs_dual=dual)
    return x, y


@sp.kernel
def reads_grad(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x.grad[i]


@sp.kernel
def reads_dual(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] + x.dual[i]


@sp.kernel
def uses_atomic_result(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        old = sp.atomic_add(y[0], x[i])
        y[i] = old * x[i]


@sp.kernel
def atomic_max_active(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(y[0], sp.sin(x[i]))


@pytest.mark.parametrize("mode", ["grad", "fwd"])
@pytest.mark.parametrize("kernel,field,text", [
    (reads_grad, "x.grad", "y[i] = x[i] * x.grad[i]"),
    (reads_dual, "x.dual", "y[i] = x[i] + x.dual[i]"),
], ids=["grad", "dual"])
def test_reading_a_companion_buffer(kernel, field, text, mode):
    x, y = arrays()
    kernel(x, y)   # the primal kernel may read it
    with pytest.raises(sp.AutodiffRuleError) as info:
        getattr(kernel, mode)(x, y)
    msg = str(info.value)
    assert f"'{field}'" in msg and kernel.name in msg
    assert f":{line_of(kernel, text)}:" in msg and text in msg


def test_reading_grad_inside_a_tape():
    x, y = arrays()
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match="'x.grad'"):
        with sp.Tape(loss=loss):
            reads_grad(x, y)


@pytest.mark.parametrize("mode", ["grad", "fwd"])
def test_value_returned_by_atomic_add(mode):
    x, y = arrays()
    with pytest.raises(sp.AutodiffRuleError, match="value returned by sp.atomic_add") as info:
        getattr(uses_atomic_result, mode)(x, y)
    assert f":{line_of(uses_atomic_result, 'old = sp.atomic_add')}:" in str(info.value)


@sp.kernel
def extremum_of_overwritten(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        x[i] = v * 2.0
        sp.atomic_max(y[0], sp.sin(v))


def test_forward_mode_extremum_replay_needs_unchanged_inputs():
    """Forward mode finds the winners by replaying the loop: it must read what the launch read."""
    x, y = arrays()
    with pytest.raises(sp.AutodiffRuleError, match="extremum_of_overwritten.*atomic_max.*overwrites 'x'") as info:
        extremum_of_overwritten.fwd(x, y)
    assert f":{line_of(extremum_of_overwritten, 'sp.atomic_max(y[0]')}:" in str(info.value)


def test_atomic_max_of_inactive_arrays_is_fine():
    """Without needs_dual on the input nothing is differentiated: the launch just runs. With it, a target
    without .dual would silently stop the derivative: k.fwd names it."""
    x = sp.from_numpy(np.linspace(0.2, 1.1, N).astype(np.float32))
    y = sp.from_numpy(np.full(N, -5.0, np.float32))
    atomic_max_active.fwd(x, y)
    np.testing.assert_allclose(y[0], np.sin(1.1), rtol=1e-6)
    with pytest.raises(sp.ArgumentError, match="atomic_max_active: output 'y' has no .dual"):
        atomic_max_active.fwd(sp.from_numpy(np.ones(N, np.float32), needs_dual=True), y)


def test_runtime_usable_after_rule_errors():
    x, y = arrays()
    with pytest.raises(sp.AutodiffRuleError):
        reads_grad.grad(x, y)

    @sp.kernel
    def fine(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = x[i] * x[i]

    fine(x, y)
    y.grad.fill(1.0)
    fine.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x.to_numpy(), rtol=1e-6)

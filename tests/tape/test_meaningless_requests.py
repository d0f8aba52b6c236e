"""Requests that cannot mean anything are errors, never silent no-ops: k.grad(...) when no array has a
gradient, needs_grad / needs_dual on integer or bool arrays (every way of creating one)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends


@sp.kernel
def scale(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = 3.0 * x[i]


def test_k_grad_without_any_gradient_is_an_error():
    x, y = sp.from_numpy(np.arange(1.0, 5.0, dtype=np.float32)), sp.ndarray(sp.f32, (4,))
    scale(x, y)
    with pytest.raises(sp.ArgumentError, match="scale.*nothing to differentiate.*'x', 'y'.*needs_grad=True"):
        scale.grad(x, y)
    gx = sp.from_numpy(np.arange(1.0, 5.0, dtype=np.float32), needs_grad=True)
    gy = sp.ndarray(sp.f32, (4,), needs_grad=True)
    gy.grad.from_numpy(np.array([0.5, -1.0, 2.0, 1.5], np.float32))
    scale.grad(gx, gy)   # with gradients: the usual accumulation
    np.testing.assert_allclose(gx.grad.to_numpy(), 3.0 * np.array([0.5, -1.0, 2.0, 1.5]))


@pytest.mark.parametrize("flag", ["needs_grad", "needs_dual"])
@pytest.mark.parametrize("dtype", [sp.i32, sp.u32, sp.u1, sp.Vector(3, sp.i32)])
def test_derivative_companions_of_integer_arrays_are_refused(flag, dtype):
    with pytest.raises(sp.ArgumentError, match=f"{flag}=True on a .* carry no derivative"):
        sp.ndarray(dtype, (4,), **{flag: True})


@pytest.mark.parametrize("flag", ["needs_grad", "needs_dual"])
@pytest.mark.parametrize("data", [np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int64),
                                  np.arange(4, dtype=np.uint32), np.array([True, False])])
def test_from_numpy_of_integer_data_refuses_companions(flag, data):
    with pytest.raises(sp.ArgumentError, match=f"{flag}=True .* carry no derivative"):
        sp.from_numpy(data, **{flag: True})
    with pytest.raises(sp.ArgumentError, match=f"{flag}=True .* carry no derivative"):
        sp.from_numpy(data, dtype=sp.i32, **{flag: True})
    sp.from_numpy(data.astype(np.float32), **{flag: True})   # float data takes them

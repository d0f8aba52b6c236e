"""Options checked where they are given: a bad `ad_stack_size` raises sp.ArgumentError at sp.init or at
@sp.kernel (naming the option, the value and the accepted range), never a raw error at the first gradient;
valid values, numpy integers included, still size the adstacks of a dynamic loop."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.spirv.lower_adstack import MAX_CAPACITY

BAD = ["big", 2**40, MAX_CAPACITY + 1, -3, 0, True, False, 2.5, 4.0, np.float32(3), np.bool_(True), [4]]


def iterate(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(n):
            p = sp.sin(p) * 1.1
        y[i] = p


def test_max_capacity_is_the_lowering_bound():
    """4 words per entry (a 64-bit primal and its adjoint) at the largest capacity still fit a u32 offset."""
    assert MAX_CAPACITY == 2**30 - 1 and 4 * MAX_CAPACITY < 2**32


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_bad_ad_stack_size_is_refused_at_decoration(value):
    with pytest.raises(sp.ArgumentError, match=r"@sp.kernel\(ad_stack_size=\.\.\.\) must be None or an int "
                                               r"from 1 to 1,073,741,823 \(2\*\*30 - 1\), got ") as err:
        sp.kernel(ad_stack_size=value)(iterate)
    assert repr(value) in str(err.value)


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_bad_ad_stack_size_is_refused_at_init_and_changes_nothing(value):
    before = runtime.current()
    with pytest.raises(sp.ArgumentError, match=r"sp.init\(ad_stack_size=\.\.\.\) must be None or an int from 1 "
                                               r"to 1,073,741,823") as err:
        sp.init(ad_stack_size=value)
    assert repr(value) in str(err.value)
    assert runtime.current() is before   # refused before the runtime was reset


def test_bad_ad_stack_size_is_refused_by_the_runtime_itself():
    with pytest.raises(sp.ArgumentError, match=r"ad_stack_size=.*got -3"):
        runtime.Runtime(ad_stack_size=-3)


@pytest.mark.parametrize("value", [None, 1, MAX_CAPACITY, np.int64(16), np.uint8(3)], ids=repr)
def test_valid_ad_stack_sizes_are_kept_as_ints(value):
    k = sp.kernel(ad_stack_size=value)(iterate)
    assert k.ad_stack_size == (None if value is None else int(value))
    assert k.ad_stack_size is None or type(k.ad_stack_size) is int


def reference(x, n):
    """y = (sin . 1.1)^n (x) and dy/dx, in float64."""
    p, d = x.astype(np.float64), np.ones(len(x))
    for _ in range(n):
        d, p = d * 1.1 * np.cos(p), 1.1 * np.sin(p)
    return p, d


@pytest.mark.backends
@pytest.mark.parametrize("size", [8, np.int32(12)], ids=repr)
def test_a_valid_size_sizes_a_dynamic_loop_gradient(size, rng):
    k = sp.kernel(ad_stack_size=size)(iterate)
    xv = rng.uniform(-1, 1, 16).astype(np.float32)
    x = sp.from_numpy(xv, needs_grad=True)
    y = sp.ndarray(sp.f32, (16,), needs_grad=True)
    k(x, y, 7)
    y.grad.fill(1.0)
    k.grad(x, y, 7)
    want_y, want_g = reference(xv, 7)
    np.testing.assert_allclose(y.to_numpy(), want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), want_g, rtol=1e-4, atol=1e-6)


def test_a_valid_size_at_init_sizes_a_dynamic_loop_gradient(fresh, rng):
    sp.init(ad_stack_size=np.int64(8))
    assert runtime.get().ad_stack_size == 8
    k = sp.kernel(iterate)
    xv = rng.uniform(-1, 1, 16).astype(np.float32)
    x = sp.from_numpy(xv, needs_grad=True)
    y = sp.ndarray(sp.f32, (16,), needs_grad=True)
    k(x, y, 6)
    y.grad.fill(1.0)
    k.grad(x, y, 6)
    np.testing.assert_allclose(x.grad.to_numpy(), reference(xv, 6)[1], rtol=1e-4, atol=1e-6)

"""One ndarray bound to two parameters: what a kernel stores through one is what it loads through the other,
whatever the optimiser forwards or moves (store-to-load forwarding, redundant loads, loop-invariant loads)."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


@sp.kernel
def store_both_then_read(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        a[i] = a[i] + 1.0
        b[i] = b[i] * 3.0
        y[i] = a[i]           # b's store wrote this element when a and b are one array


@sp.kernel
def reload_in_loop(a: sp.Array, b: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(a.shape[0]):
        t = 0.0
        for k in range(n):
            t = t + a[i]      # not loop-invariant when b is a
            b[i] = b[i] + 1.0
        y[i] = t


def test_a_store_through_one_parameter_is_seen_through_the_other(rng):
    x0 = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    x, y = sp.from_numpy(x0), sp.ndarray(sp.f32, (8,))
    store_both_then_read(x, x, y)
    np.testing.assert_allclose(y.to_numpy(), (x0 + 1.0) * 3.0, rtol=1e-6)
    a, b = sp.from_numpy(x0), sp.from_numpy(x0)
    store_both_then_read(a, b, y)
    np.testing.assert_allclose(y.to_numpy(), x0 + 1.0, rtol=1e-6)


def test_a_load_in_a_loop_sees_the_other_parameters_stores(rng):
    x0 = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    x, y = sp.from_numpy(x0), sp.ndarray(sp.f32, (8,))
    reload_in_loop(x, x, y, 4)
    np.testing.assert_allclose(y.to_numpy(), 4 * x0 + 6.0, rtol=1e-6)   # x0 + (x0+1) + (x0+2) + (x0+3)
    a, b = sp.from_numpy(x0), sp.from_numpy(x0)
    reload_in_loop(a, b, y, 4)
    np.testing.assert_allclose(y.to_numpy(), 4 * x0, rtol=1e-6)

"""Driver limits that would otherwise give silently wrong numbers are reported as errors."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime


@sp.kernel
def nested_sum(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(n):
                v = v + 0.001
        y[i] = v


def loop_cap():
    return runtime.get().device.info["limits"].get("max_loop_iterations", 0)


def test_loops_within_the_cap_run_exactly(rng):
    x = sp.from_numpy(rng.uniform(1, 2, 4).astype(np.float32))
    y = sp.ndarray(sp.f32, 4)
    nested_sum(x, y, 40)
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() + 1600 * 0.001, rtol=1e-4)


def test_a_loop_cut_short_by_the_driver_raises_and_the_runtime_recovers(rng):
    cap = loop_cap()
    if not cap:
        pytest.skip("this driver has no loop-iteration cap")
    n = int(np.ceil(np.sqrt(cap))) + 10          # n*n inner iterations exceed the cap
    x = sp.from_numpy(rng.uniform(1, 2, 4).astype(np.float32))
    y = sp.ndarray(sp.f32, 4)
    nested_sum(x, y, n)
    with pytest.raises(sp.DeviceError, match="stopped a loop"):
        sp.sync()
    nested_sum(x, y, 10)                          # the runtime stays usable
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() + 100 * 0.001, rtol=1e-5)

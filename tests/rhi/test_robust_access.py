"""Without debug=True nothing checks indices in kernels; the driver's robust buffer access (enabled on GPUs
that offer it; lavapipe bounds-checks every storage-buffer access by itself) keeps a stray store from
touching other arrays' memory."""
import numpy as np

import spvad as sp


@sp.kernel
def stray(x: sp.Array, offset: sp.i32):
    for i in range(x.shape[0]):
        x[i + offset] = 7.0


def test_stray_stores_touch_no_other_array():
    arrays = [sp.from_numpy(np.zeros(16, np.float32)) for _ in range(8)]
    for offset in (16, 1000, 100_000, -50):
        stray(arrays[3], offset)
    sp.sync()
    for k, a in enumerate(arrays):   # offset -50 and 16: not even array 3's own elements
        np.testing.assert_array_equal(a.to_numpy(), np.zeros(16), err_msg=f"array {k}")
    stray(arrays[3], 0)   # in bounds: it runs as usual
    np.testing.assert_array_equal(arrays[3].to_numpy(), 7.0)

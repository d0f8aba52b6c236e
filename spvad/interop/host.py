"""Host (numpy) data into a new ndarray and back, with from_numpy's dtype rules: the step every bridge shares.
Data of a dtype the device stores as it is crosses in one copy, straight into the device memory."""
import numpy as np

from .. import runtime
from .. import types as T
from ..errors import ArgumentError
from ..ndarray import Ndarray

SUPPORTED = "float32, float64, int32, uint32 and bool (other integers become i32 when their values fit)"
HINTS = {"f": "convert it to float32 or float64 first", "c": "pass the real and imaginary parts as two arrays"}


def spvad_dtype(data, who):
    """The dtype `sp.from_numpy(data)` gives: float64 -> f64, int64 -> i32 when the values fit, ...; a clear
    ArgumentError for anything else (float16, complex, objects, integers that do not fit)."""
    dt = T.from_numpy_dtype(data.dtype)
    if dt is not None:
        return dt
    if np.issubdtype(data.dtype, np.integer):
        if data.size and (data.min() < -2**31 or data.max() >= 2**31):
            raise ArgumentError(f"{who}: {data.dtype} values in [{data.min()}, {data.max()}] do not fit in i32 "
                                "(spvad's integers are 32-bit)")
        return T.i32
    hint = HINTS.get(data.dtype.kind, "convert it first")
    raise ArgumentError(f"{who}: {data.dtype} data is not supported (spvad arrays hold {SUPPORTED}); {hint}")


def check_needs_grad(dt, needs_grad, who):
    if needs_grad and not dt.is_float:
        raise ArgumentError(f"{who}: needs_grad=True needs float data, got {dt} (integers carry no gradient)")


def to_ndarray(data, needs_grad, who, dtype=None):
    """A new ndarray holding a copy of the host array `data` (any strides); `dtype` from spvad_dtype."""
    dt = dtype or spvad_dtype(data, who)
    check_needs_grad(dt, needs_grad, who)
    a = Ndarray(dt, data.shape, needs_grad=needs_grad)
    if data.dtype != a._np_dtype:   # a conversion (int64 -> i32, bool -> words): from_numpy's checked path
        return a.from_numpy(data)
    with runtime.LOCK:
        a._host_write("from_numpy")
        a._view().reshape(data.shape)[...] = data   # one strided copy into the mapped memory
    return a


def host_dtype(a):
    """The numpy dtype of `a.to_numpy()` (bool for u1; the device stores bools as 32-bit words)."""
    return np.dtype(bool) if a.element_dtype.is_bool else a._np_dtype

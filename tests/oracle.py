"""Test helper: run a kernel launch on the device AND on the IR interpreter (the semantic oracle).

`launch_and_interpret(k, *args)` snapshots every ndarray the launch touches (arguments and captured
globals), runs the interpreter on the very IR the device runs (`k._compiled(specs).ir`), launches the
kernel, and returns both results so a test can compare each with an independent numpy reference.
"""
import numpy as np

from spvad.ir.interp import run_kernel


def interpret(k, *args):
    """Run the compiled IR of `k(*args)` in the interpreter on copies of the arrays' current contents.

    Returns one numpy array per bound ndarray, in the order of the IR's `Kernel.arrays`."""
    specs, arrays, scalars = k._bind(args)
    ck = k._compiled(specs)
    bound = arrays + k.captured_now(ck)
    assert len(bound) == len(ck.ir.arrays)
    buffers = {}
    for p, obj in zip(ck.ir.arrays, bound):
        assert (p.dtype, p.ndim) == (obj.dtype, obj.ndim)
        buffers[(p.index, "primal")] = obj.to_numpy().copy()
    run_kernel(ck.ir, buffers, list(scalars))
    return [buffers[(p.index, "primal")] for p in ck.ir.arrays], bound


def launch_and_interpret(k, *args):
    """(device results, interpreter results): one numpy array per bound ndarray (arguments first, then
    captured globals), after one launch of `k(*args)` on each."""
    ref, bound = interpret(k, *args)
    k(*args)
    dev = [a.to_numpy() for a in bound]
    return dev, ref


def assert_same(dev, ref, rtol=0.0, atol=0.0, what=""):
    """Device vs reference: exact for integers and bools, within tolerance for floats (NaN == NaN)."""
    dev, ref = np.asarray(dev), np.asarray(ref)
    assert dev.shape == ref.shape, f"{what}: shape {dev.shape} != {ref.shape}"
    if dev.dtype.kind == "f" or ref.dtype.kind == "f":
        np.testing.assert_allclose(dev.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(dev, ref, err_msg=what)

"""`sp.init(debug=True)` checks every global load, store and atomic against its array's shape on the device:
an out-of-bounds access is skipped (a load gives 0), the first one of a launch is raised at the next sync as
`sp.DeviceError` naming the kernel, the array, the index, the shape and the source line, and the runtime
stays usable. Forward, gradient (incl. its extra tasks) and forward-mode kernels alike; 1-D, 2-D and vector
ndarrays. The interpreter (the oracle) reports the same accesses with the same words."""
import inspect
import re

import numpy as np
import pytest

import spvad as sp
from spvad.frontend import build_kernel
from spvad.ir.interp import OutOfBoundsError, run_kernel

N = 4


def line_of(kernel, text):
    src, first = inspect.getsourcelines(kernel.fn)
    return first + next(k for k, line in enumerate(src) if text in line)


def raised(launch):
    """The DeviceError the next sync raises after `launch()` (which must not raise by itself)."""
    launch()
    with pytest.raises(sp.DeviceError) as info:
        sp.sync()
    return str(info.value)


def assert_names(msg, kernel, what, access, shape, text):
    """`msg` names the kernel, the kind of access, the array with its whole index, the shape and the line."""
    assert msg.startswith(f"kernel {kernel.name} ("), msg
    assert f"out-of-bounds {what}: {access} is out of bounds for shape {shape}" in msg, msg
    assert f"{__file__}:{line_of(kernel, text)}: {text}" in msg, msg


def f32(values):
    return sp.from_numpy(np.asarray(values, np.float32))


# ---- forward kernels ---------------------------------------------------------------------------------------
@sp.kernel
def shift_load(x: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = x[i + 1] * 2.0


@sp.kernel
def shift_store(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i + 1] = x[i] * 2.0


@sp.kernel
def scatter_add(x: sp.Array, hist: sp.Array, k: sp.i32):
    for i in range(x.shape[0]):
        hist[i + k] += x[i]


@sp.kernel
def counts(x: sp.Array, hist: sp.Array, k: sp.i32):
    for i in range(x.shape[0]):
        sp.atomic_add(hist[i - k], 1)


@sp.kernel
def next_column(a: sp.Array, b: sp.Array):
    for i, j in sp.ndrange(a.shape[0], a.shape[1]):
        b[i, j] = a[i, j + 1]


@sp.kernel
def next_row_store(a: sp.Array, b: sp.Array):
    for i, j in sp.ndrange(a.shape[0], a.shape[1]):
        b[i + 1, j] = a[i, j]


@sp.kernel
def next_vector(v: sp.Array, out: sp.Array):
    for i in range(out.shape[0]):
        out[i] = v[i + 1] * 2.0


def test_load_past_the_end_reads_zero_and_raises_at_sync(debug):
    x, y = f32([1, 2, 3, 4]), sp.ndarray(sp.f32, (N,))
    msg = raised(lambda: shift_load(x, y))
    assert_names(msg, shift_load, "load", "x[4]", "(4,)", "y[i] = x[i + 1] * 2.0")
    assert y.to_numpy().tolist() == [4, 6, 8, 0]   # the skipped load gave 0, the thread went on
    assert raised(lambda: shift_load(x, y)) == msg   # the same arguments: the recorded launch, replayed


def test_store_past_the_end_is_skipped(debug):
    x = f32([1, 2, 3, 4])
    y = f32([9, 9, 9, 9])
    guard = sp.ndarray(sp.f32, (N,))   # created after y: the next buffer a stray store could reach
    guard.fill(7.0)
    msg = raised(lambda: shift_store(x, y))
    assert_names(msg, shift_store, "store", "y[4]", "(4,)", "y[i + 1] = x[i] * 2.0")
    assert y.to_numpy().tolist() == [9, 2, 4, 6] and guard.to_numpy().tolist() == [7] * N


def test_float_and_int_atomics(debug):
    x, hist = f32([1, 2, 3, 4]), sp.ndarray(sp.f32, (N,))
    msg = raised(lambda: scatter_add(x, hist, 1))
    assert_names(msg, scatter_add, "atomic add", "hist[4]", "(4,)", "hist[i + k] += x[i]")
    assert hist.to_numpy().tolist() == [0, 1, 2, 3]
    ints = sp.ndarray(sp.i32, (N,))
    msg = raised(lambda: counts(x, ints, 1))   # i - 1 < 0 for thread 0: a negative index
    assert_names(msg, counts, "atomic add", "hist[-1]", "(4,)", "sp.atomic_add(hist[i - k], 1)")
    assert ints.to_numpy().tolist() == [1, 1, 1, 0]


def test_2d_each_axis_is_checked(debug):
    """a[i, 3] of a (3, 3) array lies inside the buffer (it is a[i + 1, 0]) but outside its row."""
    a0 = np.arange(9, dtype=np.float32).reshape(3, 3) + 1
    a, b = sp.from_numpy(a0), sp.ndarray(sp.f32, (3, 3))
    msg = raised(lambda: next_column(a, b))
    assert re.search(r"out-of-bounds load: a\[[012], 3\] is out of bounds for shape \(3, 3\)", msg), msg
    assert f":{line_of(next_column, 'b[i, j] =')}: b[i, j] = a[i, j + 1]" in msg
    want = np.concatenate([a0[:, 1:], np.zeros((3, 1), np.float32)], axis=1)
    np.testing.assert_array_equal(b.to_numpy(), want)
    c = sp.from_numpy(np.zeros((3, 3), np.float32))
    msg = raised(lambda: next_row_store(a, c))
    assert re.search(r"out-of-bounds store: b\[3, [012]\] is out of bounds for shape \(3, 3\)", msg), msg
    np.testing.assert_array_equal(c.to_numpy()[1:], a0[:2])


def test_vector_ndarray_names_the_storage_index(debug):
    """An ndarray of vec3 is a float array with a trailing axis of 3 components: the index names both."""
    v = sp.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3), dtype=sp.vec3)
    out = sp.ndarray(sp.vec3, (N,))
    msg = raised(lambda: next_vector(v, out))
    assert_names(msg, next_vector, "load", "v[4, 0]", "(4, 3)", "out[i] = v[i + 1] * 2.0")
    np.testing.assert_array_equal(out.to_numpy()[3], [0, 0, 0])


# ---- gradient and forward-mode kernels ----------------------------------------------------------------------
@sp.kernel
def shift_linear(x: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = 3.0 * x[i + 1]


@sp.kernel
def shifted_sin(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i + 1] = sp.sin(x[i])


@sp.kernel
def shifted_max(x: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(m[i + 1], x[i])


@sp.kernel
def halve_shifted(x: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        v = x[i + 1]
        while v > 0.1:
            v = v * 0.5
        y[i] = v


def grad_arrays(n_out=N):
    x = sp.from_numpy(np.linspace(0.5, 2.0, N).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (n_out,), needs_grad=True)
    y.grad.fill(1.0)
    return x, y


def test_gradient_kernel_checks_its_gradient_accesses(debug):
    """The reverse of `y[i] = 3 * x[i + 1]` adds into x.grad[i + 1]: out of bounds for the last thread."""
    x, y = grad_arrays()
    msg = raised(lambda: shift_linear.grad(x, y))
    assert msg.startswith("kernel shift_linear (") and "_grad)" in msg.partition("\n")[0], msg
    assert re.search(r"out-of-bounds (atomic add|load|store): x\.grad\[4\] is out of bounds for shape \(4,\)",
                     msg), msg
    assert f":{line_of(shift_linear, 'y[i] = 3.0 * x[i + 1]')}: y[i] = 3.0 * x[i + 1]" in msg
    np.testing.assert_allclose(x.grad.to_numpy(), [0, 3, 3, 3])


def test_gradient_kernel_checks_its_primal_and_output_reads(debug):
    x, y = grad_arrays()
    msg = raised(lambda: shifted_sin.grad(x, y))
    assert re.search(r"out-of-bounds \w+( add)?: y\.grad\[4\] is out of bounds for shape \(4,\)", msg), msg
    assert "y[i + 1] = sp.sin(x[i])" in msg
    # a float32 cos: absolute error up to ~2**-21 on a GPU (Vulkan sets no precision for it)
    np.testing.assert_allclose(x.grad.to_numpy()[:3], np.cos(x.to_numpy()[:3]), rtol=1e-6, atol=1e-6)


def test_gradient_extra_tasks_are_checked(debug):
    """atomic_max's gradient counts ties in extra tasks: their accesses are checked too."""
    x = sp.from_numpy(np.linspace(0.5, 2.0, N).astype(np.float32), needs_grad=True)
    m = sp.ndarray(sp.f32, (N,), needs_grad=True)
    m.grad.fill(1.0)
    msg = raised(lambda: shifted_max.grad(x, m))
    assert re.search(r"kernel shifted_max \(shifted_max_t0_ties\): out-of-bounds load: m\[4\] is out of "
                     r"bounds for shape \(4,\)", msg), msg   # the counting task reads what the launch left
    assert f":{line_of(shifted_max, 'sp.atomic_max')}: sp.atomic_max(m[i + 1], x[i])" in msg


def test_adstack_depth_probe_is_checked(debug):
    """A data-dependent loop: the gradient first runs a counting kernel, which reads x[4] too."""
    x, y = grad_arrays()
    with pytest.raises(sp.DeviceError) as info:
        halve_shifted.grad(x, y)
        sp.sync()
    msg = str(info.value)
    assert_names(msg, halve_shifted, "load", "x[4]", "(4,)", "v = x[i + 1]")


def test_forward_mode_kernel(debug):
    x = sp.from_numpy(np.linspace(0.5, 2.0, N).astype(np.float32), needs_dual=True)
    x.dual.fill(1.0)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    msg = raised(lambda: shift_linear.fwd(x, y))
    assert msg.startswith("kernel shift_linear (") and "_fwd)" in msg.partition("\n")[0], msg
    assert re.search(r"out-of-bounds load: x(\.dual)?\[4\] is out of bounds for shape \(4,\)", msg), msg
    assert "y[i] = 3.0 * x[i + 1]" in msg
    assert y.dual.to_numpy().tolist() == [3, 3, 3, 0]


# ---- after an error ---------------------------------------------------------------------------------------
def test_runtime_stays_usable_and_each_launch_reports_its_own(debug):
    x, y = f32([1, 2, 3, 4]), sp.ndarray(sp.f32, (N,))
    raised(lambda: shift_load(x, y))
    shift_load(x, sp.ndarray(sp.f32, (3,)))   # in bounds: nothing to report
    sp.sync()
    hist = sp.ndarray(sp.f32, (N,))
    msg = raised(lambda: scatter_add(x, hist, 2))
    assert "hist[4]" in msg or "hist[5]" in msg, msg
    assert hist.to_numpy().tolist() == [0, 0, 1, 2]
    msg = raised(lambda: shift_load(f32([1, 2]), y))
    assert re.search(r"x\[[234]\] is out of bounds for shape \(2,\)", msg), msg


def test_only_the_first_violation_since_the_sync_is_reported(debug):
    """Two launches before one sync: the first launch's violation is the one raised, and only once."""
    x, hist = f32([1, 2, 3, 4]), sp.ndarray(sp.f32, (N,))
    scatter_add(x, hist, 3)    # threads 1..3 out of bounds
    scatter_add(x, hist, 1)    # thread 3 out of bounds
    with pytest.raises(sp.DeviceError) as info:
        sp.sync()
    assert re.search(r"hist\[[456]\] is out of bounds", str(info.value)), str(info.value)
    sp.sync()   # reported once


# ---- the oracle agrees -------------------------------------------------------------------------------------
def test_the_interpreter_reports_the_same_access():
    from spvad.frontend import ArraySpec
    kernel, _, _ = build_kernel(shift_store.fn, [ArraySpec(sp.f32, 1), ArraySpec(sp.f32, 1)])
    with pytest.raises(OutOfBoundsError) as info:
        run_kernel(kernel, {(0, "primal"): np.ones(N, np.float32), (1, "primal"): np.zeros(N, np.float32)}, [])
    msg = str(info.value)
    assert "out-of-bounds store: y[4] is out of bounds for shape (4,)" in msg, msg
    assert f"{__file__}:{line_of(shift_store, 'y[i + 1] =')}: y[i + 1] = x[i] * 2.0" in msg


@sp.kernel
def read_in_loop(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + w[i + 2]          # loop-invariant: read once, before the loop, under its trip condition
        y[i] = v


def test_a_load_moved_out_of_a_loop_is_checked_only_when_the_loop_runs(debug):
    x, w, y = f32([1.0, 2.0, 3.0]), f32([0.5, 0.25, 0.125]), sp.ndarray(sp.f32, (3,))
    read_in_loop(x, w, y, 0)          # no iteration: nothing read, nothing to report
    np.testing.assert_array_equal(y.to_numpy(), [1.0, 2.0, 3.0])
    msg = raised(lambda: read_in_loop(x, w, y, 2))
    assert_names(msg, read_in_loop, "load", "w[3]", (3,), "v = v + w[i + 2]")
    np.testing.assert_array_equal(y.to_numpy(), [1.25, 2.0, 3.0])   # thread 0 in bounds, the others read 0

"""Arrays past the driver's largest storage-buffer binding (maxStorageBufferRange: 128 MiB on lavapipe) are reached
by buffer device address, in memory blocks when they pass the largest allocation (rhi/vulkan/buffers.py,
spirv/lower_addressed.py): forward, gradient, forward mode, Tape programs and host I/O, against float64 numpy.

One test runs a real 40M-float (160 MiB) array; the others shrink the device's binding range and block size
(`small_limits`) so that small arrays take the same path in many blocks, elements straddling them."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.rhi.vulkan import buffers as vk_buffers

from tests.conftest import rand

RANGE, BLOCK = 1 << 12, 1 << 12   # bytes: arrays past 4 KiB are addressed, in blocks of 4 KiB


def shrink_limits(monkeypatch):
    dev = runtime.get().device
    monkeypatch.setitem(dev.info["limits"], "max_storage_buffer_range", RANGE)
    monkeypatch.setattr(dev, "address_chunk_bytes", BLOCK)


@pytest.fixture
def small_limits(monkeypatch):
    shrink_limits(monkeypatch)


@pytest.fixture
def small_limits_debug(monkeypatch, debug):
    shrink_limits(monkeypatch)


@sp.kernel
def weighted_rows(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        s = 0.0
        for k in range(w.shape[0]):
            v = x[i * w.shape[0] + k]
            s += v * v * w[k]
        y[i] = s


def test_forty_million_floats_forward_and_gradient(rng):
    """160 MiB of f32 (past lavapipe's 128 MiB binding), its gradient as large: against float64 numpy; then
    a[i], fill and to_numpy past 128 MiB."""
    k, rows = 40, 1_000_000
    xh = rng.random(k * rows, dtype=np.float32)   # uniform in [-2, 2), made in f32 (no 320 MB f64 copy)
    xh *= 4
    xh -= 2
    wh, ybar = rand(rng, k), rand(rng, rows)
    x = sp.from_numpy(xh, needs_grad=True)
    if runtime.get().device.info["limits"]["max_storage_buffer_range"] < x.buffer.nbytes:   # lavapipe: 128 MiB
        assert x.buffer.addressed and x.grad.buffer.addressed
    w, y = sp.from_numpy(wh), sp.ndarray(sp.f32, (rows,), needs_grad=True)
    weighted_rows(x, w, y)
    y.grad.from_numpy(ybar)
    weighted_rows.grad(x, w, y)
    got_y, got_gx = y.to_numpy(), x.grad.to_numpy()
    part = rows // 50   # float64 references a part at a time (assert_allclose makes several temporaries)
    for lo in range(0, rows, part):
        xs = xh[lo * k:(lo + part) * k].reshape(-1, k).astype(np.float64)
        np.testing.assert_allclose(got_y[lo:lo + part], xs ** 2 @ wh, rtol=1e-5, atol=1e-4)   # 40 f32 terms of up to 4
        want = 2 * xs * wh * ybar[lo:lo + part, None].astype(np.float64)
        np.testing.assert_allclose(got_gx[lo * k:(lo + part) * k].reshape(-1, k), want, rtol=1e-5, atol=1e-7)
    del got_gx
    far = [k * rows - 1, (1 << 25) + 12345, 7]   # past 128 MiB, and near the start
    assert [x[i] for i in far] == [float(xh[i]) for i in far]
    x.fill(0.25)
    x[far[1]] = -3.5
    assert [x[i] for i in far] == [0.25, -3.5, 0.25] and x.to_numpy().sum(dtype=np.float64) == 0.25 * (k * rows - 1) - 3.5


# ---- the same path in many blocks (small limits) ----------------------------------------------------------
@sp.kernel
def scaled_sin(x: sp.Array, y: sp.Array, a: sp.f32):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        y[i, j] = a * sp.sin(x[i, j]) + x[i, j] * x[i, j]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_blocks_forward_gradient_and_forward_mode(small_limits, rng, dtype):
    xh = rand(rng, (300, 37), dtype=dtype)
    x = sp.from_numpy(xh, needs_grad=True, needs_dual=True)
    y = sp.ndarray(x.dtype, xh.shape, needs_grad=True, needs_dual=True)
    assert x.buffer.addressed and len(x.buffer._blocks) > 3 and y.grad.buffer.addressed
    x64 = xh.astype(np.float64)
    tol = dict(rtol=1e-5, atol=1e-6)
    scaled_sin(x, y, 0.7)
    np.testing.assert_allclose(y.to_numpy(), 0.7 * np.sin(x64) + x64 ** 2, **tol)
    ybar = rand(rng, xh.shape, dtype=dtype)
    y.grad.from_numpy(ybar)
    scaled_sin.grad(x, y, 0.7)
    np.testing.assert_allclose(x.grad.to_numpy(), (0.7 * np.cos(x64) + 2 * x64) * ybar, **tol)
    seed = rand(rng, xh.shape, dtype=dtype)
    x.dual.from_numpy(seed)
    scaled_sin.fwd(x, y, 0.7)
    np.testing.assert_allclose(y.dual.to_numpy(), (0.7 * np.cos(x64) + 2 * x64) * seed, **tol)


@sp.kernel
def scatter_sums(x: sp.Array, idx: sp.Array, out: sp.Array, peak: sp.Array):
    for i in range(x.shape[0]):
        v = x[i] * x[i]
        out[idx[i]] += v                  # float atomics through addresses (native f32, f64 compare-exchange)
        sp.atomic_max(peak[idx[i] % 7], sp.sin(x[i]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atomics_and_their_gradients_in_blocks(small_limits, rng, dtype):
    n, m = 5000, 1500
    xh, ih = rand(rng, n, dtype=dtype), rng.integers(0, m, n).astype(np.int32)
    x = sp.from_numpy(xh, needs_grad=True)
    out, peak = sp.ndarray(x.dtype, (m,), needs_grad=True), sp.ndarray(x.dtype, (7,), needs_grad=True)
    peak.fill(-2.0)
    idx = sp.from_numpy(ih)
    scatter_sums(x, idx, out, peak)
    x64 = xh.astype(np.float64)
    want = np.zeros(m)
    np.add.at(want, ih, x64 ** 2)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-5, atol=1e-6)
    obar, pbar = rand(rng, m, dtype=dtype), rand(rng, 7, dtype=dtype)
    out.grad.from_numpy(obar)
    peak.grad.from_numpy(pbar)
    scatter_sums.grad(x, idx, out, peak)
    winner = np.zeros(n)   # sin is increasing on [-1, 1]: each group's largest x wins (no ties among random x)
    for c in range(7):
        members = np.flatnonzero(ih % 7 == c)
        winner[members[np.argmax(x64[members])]] = pbar[c]
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x64 * obar[ih] + np.cos(x64) * winner, rtol=1e-4, atol=1e-5)



# ---- whole programs: a Tape keeps copies of addressed arrays, host writes go block by block ---------------
@sp.kernel
def relax(a: sp.Array, b: sp.Array, w: sp.Array, dt: sp.f32):
    for i in range(a.shape[0]):
        b[i] = a[i] + dt * sp.tanh(a[i] * w[i % w.shape[0]])


@sp.kernel
def sum_squares(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def relax_np(a, w, dt):
    return a + dt * np.tanh(a * np.resize(w, a.shape))


def test_tape_double_buffering_and_host_writes(small_limits, rng):
    """relax(a, b), relax(b, a), ... overwrites what earlier gradients read (the Tape copies addressed
    buffers); host writes into the middle of b (across a block's end) cut what they overwrote."""
    n, steps = 3001, 5
    x0, w0, patch = rand(rng, n), rand(rng, 7), rand(rng, 40)
    a, b = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (n,), needs_grad=True)
    w, loss = sp.from_numpy(w0, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    at = BLOCK // 4 - 20   # b[at:at + 40] spans the end of b's first block
    with sp.Tape(loss) as tape:
        for s in range(steps):
            relax(a, b, w, 0.3) if s % 2 == 0 else relax(b, a, w, 0.3)
        for k, v in enumerate(patch):
            b[at + k] = v
        relax(b, a, w, 0.3)
        sum_squares(a, loss)
    assert tape.checkpoint_bytes > 0 and a.buffer.addressed

    def loss_of(x, w):
        for _ in range(steps):
            x = relax_np(x, w, 0.3)
        x = x.copy()
        x[at:at + 40] = patch
        return np.sum(relax_np(x, w, 0.3) ** 2)

    x64, w64 = x0.astype(np.float64), w0.astype(np.float64)
    np.testing.assert_allclose(loss[None], loss_of(x64, w64), rtol=1e-5)
    eps, g = 1e-6, np.zeros(7)
    for j in range(7):   # central differences of the float64 program in w; x0's gradient in closed form
        wp, wm = w64.copy(), w64.copy()
        wp[j] += eps
        wm[j] -= eps
        g[j] = (loss_of(x64, wp) - loss_of(x64, wm)) / (2 * eps)
    np.testing.assert_allclose(w.grad.to_numpy(), g, rtol=2e-4)
    gx = np.zeros(n)
    probe = rng.choice(n, 12, replace=False).tolist() + [at - 1, at, at + 39, at + 40, n - 1]
    for j in probe:
        xp, xm = x64.copy(), x64.copy()
        xp[j] += eps
        xm[j] -= eps
        gx[j] = (loss_of(xp, w64) - loss_of(xm, w64)) / (2 * eps)
    np.testing.assert_allclose(a.grad.to_numpy()[probe], gx[probe], rtol=2e-4, atol=1e-6)
    assert np.all(a.grad.to_numpy()[at:at + 40] == 0)   # the values the host write replaced reach nothing


@pytest.mark.parametrize("dtype,shape", [(sp.f32, (5000,)), (sp.vec3, (1500,)), (sp.mat2, (700,)),
                                         (sp.f64, (30, 41)), (sp.i32, (2, 3, 500)), (sp.u1, (3000,))])
def test_host_io_across_blocks(small_limits, rng, dtype, shape):
    """from_numpy / to_numpy / fill / a[i] on arrays in many blocks, elements straddling them."""
    a = sp.ndarray(dtype, shape)
    assert a.buffer.addressed and len(a.buffer._blocks) > 1
    data = rng.integers(-9, 9, a.storage_shape) if a.element_dtype.is_int else rand(rng, a.storage_shape)
    data = data > 0 if a.element_dtype.is_bool else data
    a.from_numpy(data)
    np.testing.assert_array_equal(a.to_numpy(), data.astype(a.to_numpy().dtype))
    last = tuple(s - 1 for s in shape)
    mid = tuple(s // 2 for s in shape)
    for key in (last, mid):
        np.testing.assert_array_equal(a[key], data[key])
    value = np.ones(a.element_shape) * 3 if a.width else (True if a.element_dtype.is_bool else 3)
    a.fill(value)
    assert (a.to_numpy() == value).all()
    a[mid] = value * 2 if a.width else (False if a.element_dtype.is_bool else -5)
    got = a.to_numpy()
    assert (got[mid] == a[mid]).all() and (got[last] == value).all()
    assert np.count_nonzero(got != value) == max(a.width, 1)


@sp.kernel
def halve_until_small(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        while v > 0.5:      # trip counts read from the data: the gradient's adstack depth is measured first
            v = v * 0.5 + 0.1 * sp.sin(v)
        y[i] = v


def test_depth_probe_reads_addressed_arrays(small_limits, rng):
    xh = rng.uniform(0.6, 30.0, 2000).astype(np.float32)
    x, y = sp.from_numpy(xh, needs_grad=True), sp.ndarray(sp.f32, (2000,), needs_grad=True)
    halve_until_small(x, y)
    y.grad.fill(1.0)
    halve_until_small.grad(x, y)
    v, dv = xh.astype(np.float64), np.ones(2000)
    while (v > 0.5).any():
        on = v > 0.5
        dv = np.where(on, dv * (0.5 + 0.1 * np.cos(v)), dv)
        v = np.where(on, v * 0.5 + 0.1 * np.sin(v), v)
    np.testing.assert_allclose(y.to_numpy(), v, rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), dv, rtol=1e-4)


@sp.kernel
def shifted_copy(x: sp.Array, y: sp.Array, k: sp.i32):
    for i in range(y.shape[0]):
        y[i] = x[i + k]


def test_debug_reports_out_of_bounds_on_addressed_arrays(small_limits_debug, rng):
    x, y = sp.from_numpy(rand(rng, 3000)), sp.ndarray(sp.f32, (3000,))
    assert x.buffer.addressed
    shifted_copy(x, y, 1)
    with pytest.raises(sp.DeviceError, match=r"out-of-bounds load: x\[3000\] is out of bounds for shape \(3000,\)"):
        sp.sync()
    np.testing.assert_array_equal(y.to_numpy()[:-1], x.to_numpy()[1:])


@sp.kernel
def shifted_store(x: sp.Array, y: sp.Array, k: sp.i32):
    for i in range(x.shape[0]):
        y[i + k] = x[i]


@pytest.mark.parametrize("k", [5000, -7000])
def test_a_stray_index_stays_inside_the_array(small_limits, rng, k):
    """Without debug, an index past either end (a user's bug) is clamped to the array's last element:
    addresses have no robust buffer access, and no other memory may be read or written."""
    x, y, guard = (sp.from_numpy(rand(rng, 3000)) for _ in range(3))
    before_y, before_guard = y.to_numpy(), guard.to_numpy()
    shifted_store(x, y, k)
    got = y.to_numpy()
    np.testing.assert_array_equal(got[:-1], before_y[:-1])
    assert got[-1] in x.to_numpy()
    np.testing.assert_array_equal(guard.to_numpy(), before_guard)
    shifted_copy(x, y, k)
    np.testing.assert_array_equal(y.to_numpy(), np.full(3000, x[2999], np.float32))


# ---- what is refused, and what stays as it was ------------------------------------------------------------
def test_small_arrays_compile_as_before(rng):
    """Arrays within the binding range: no buffer device address in the module (the common case's code)."""
    x, y = sp.from_numpy(rand(rng, 64)), sp.ndarray(sp.f32, (64,))
    assert not x.buffer.addressed
    text = shifted_copy.disassemble(x, y, 0)
    assert "PhysicalStorageBuffer" not in text and "shape_table" not in text


def test_without_buffer_device_address_the_error_says_why(small_limits, monkeypatch):
    monkeypatch.setitem(runtime.get().device.info["features"], "buffer_device_address", False)
    with pytest.raises(sp.DeviceError, match="maxStorageBufferRange .* bufferDeviceAddress"):
        sp.ndarray(sp.f32, (5000,))
    sp.ndarray(sp.f32, (500,)).fill(1.0)   # the runtime stays usable


def test_an_array_past_the_memory_is_refused(monkeypatch):
    dev = runtime.get().device
    monkeypatch.setattr(vk_buffers, "host_available_bytes", lambda: 1 << 20)
    monkeypatch.setattr(dev, "_largest_heap", 1 << 20)
    monkeypatch.setitem(dev.info["limits"], "max_storage_buffer_range", 1 << 16)
    with pytest.raises(sp.DeviceError, match="does not fit in memory"):
        sp.ndarray(sp.f32, (1 << 19,))
    a = sp.ndarray(sp.f32, (1000,))   # the runtime stays usable
    a.fill(2.0)
    assert a[999] == 2.0


@sp.kernel
def first_n(n: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(n[1000]):
        y[i] = 2.0 * x[i]


def test_a_loop_bound_read_from_an_addressed_array_is_refused(small_limits, rng):
    """The counting kernel binds arrays plainly: a bound in an array past the largest binding is an error
    naming it, not a count read from the address table."""
    counts = sp.from_numpy(np.full(2048, 7, np.int32))   # 8 KiB: past the shrunk 4 KiB binding range
    x = sp.from_numpy(rng.standard_normal(16).astype(np.float32))
    y = sp.ndarray(sp.f32, 16)
    assert counts.buffer.addressed
    with pytest.raises(sp.ArgumentError, match="'n'.*past the device's largest storage-buffer binding"):
        first_n(counts, x, y)
    small = sp.from_numpy(np.full(1001, 7, np.int32))    # the runtime goes on
    first_n(small, x, y)
    np.testing.assert_allclose(y.to_numpy()[:7], 2.0 * x.to_numpy()[:7], rtol=1e-6)

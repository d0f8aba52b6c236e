"""sp.capture() / g.replay(): a replay runs the captured launches again on the arrays' contents at the time
of the replay (a capture binds arrays and scalars, not contents), a captured Tape gives the gradients of the
Tape run as usual, the flags a replay raises are reported at the next sync, and what API.md refuses is
refused with sp.ArgumentError. Values against float64 numpy references, on Vulkan and on the interpreter."""
import gc

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.rhi.base import Device

pytestmark = pytest.mark.backends

N, T, DT = 24, 6, 0.05


@sp.kernel
def step(x: sp.Array, v: sp.Array, dt: sp.f32, t: sp.i32):
    for i in range(x.shape[0]):
        v[i] = v[i] + dt * sp.sin(x[i]) + 0.01 * t
        x[i] = x[i] + dt * v[i]


def steps_reference(x, v):
    x, v = x.astype(np.float64), v.astype(np.float64)
    for t in range(T):
        v = v + DT * np.sin(x) + 0.01 * t
        x = x + DT * v
    return x, v


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def test_replay_runs_the_launches_again_on_the_contents_of_then():
    rng = np.random.default_rng(1)
    x0, v0 = rand(rng, N), rand(rng, N)
    x, v = sp.from_numpy(x0), sp.from_numpy(v0)
    with sp.capture() as g:
        for t in range(T):
            step(x, v, DT, t)
    np.testing.assert_array_equal(x.to_numpy(), x0)   # captured, not run
    for _ in range(3):   # new contents before each replay: the capture binds the arrays, not their values
        x0, v0 = rand(rng, N), rand(rng, N)
        x.from_numpy(x0)
        v.from_numpy(v0)
        g.replay()
        rx, rv = steps_reference(x0, v0)
        np.testing.assert_allclose(x.to_numpy(), rx, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(v.to_numpy(), rv, rtol=1e-5, atol=1e-5)
    x1, v1 = x.to_numpy(), v.to_numpy()
    g.replay()   # two replays in a row: the second continues from where the first left
    g.replay()
    rx, rv = steps_reference(*steps_reference(x1, v1))
    np.testing.assert_allclose(x.to_numpy(), rx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.to_numpy(), rv, rtol=1e-4, atol=1e-5)
    assert g.replays == 5


def test_a_kernel_called_outside_after_a_capture_runs_at_once():
    rng = np.random.default_rng(2)
    x0, v0 = rand(rng, N), rand(rng, N)
    x, v = sp.from_numpy(x0), sp.from_numpy(v0)
    with sp.capture():
        step(x, v, DT, 0)
    for t in range(T):   # the same kernel, arrays and scalars (its fast path): launched, not captured
        step(x, v, DT, t)
    rx, rv = steps_reference(x0, v0)
    np.testing.assert_allclose(x.to_numpy(), rx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v.to_numpy(), rv, rtol=1e-5, atol=1e-5)


@sp.kernel
def scale_first(a: sp.Array, n: sp.Array, s: sp.f32):
    for i in range(n[None]):   # a thread count read from an array: the device reads it at each replay
        a[i] = a[i] * s + 1.0


def test_a_thread_count_read_from_an_array_follows_its_contents():
    rng = np.random.default_rng(9)
    a0 = rand(rng, N)
    a, n = sp.from_numpy(a0), sp.from_numpy(np.array(5, np.int32))
    with sp.capture() as g:
        scale_first(a, n, 0.5)
    want = a0.astype(np.float64)
    for count in (5, 17, 0, N):
        n[None] = count
        g.replay()
        want[:count] = want[:count] * 0.5 + 1.0
        np.testing.assert_allclose(a.to_numpy(), want, rtol=1e-6)


# ---- a whole Tape captured: its clears, seed, kept contents and backward ----
@sp.kernel
def rnn_step(x: sp.Array, h: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        x[t + 1, i] = sp.sin(x[t, i] * w[i]) + h[i]
        h[i] = h[i] * 0.5 + x[t, i]   # in place: the Tape keeps the contents the gradient reads


@sp.kernel
def square_sum(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i]


def rnn_loss(x0, h0, w):
    x, h = np.asarray(x0, np.float64), np.asarray(h0, np.float64).copy()
    for _ in range(T):
        x, h = np.sin(x * w) + h, h * 0.5 + x
    return float(np.sum(x * x))


def central_differences(f, p, eps=1e-6):
    g = np.zeros_like(p)
    for k in range(p.size):
        e = np.zeros_like(p)
        e.flat[k] = eps
        g.flat[k] = (f(p + e) - f(p - e)) / (2 * eps)
    return g


def test_a_captured_tape_gives_the_gradients_of_the_tape():
    rng = np.random.default_rng(3)
    n = 8
    x0 = np.zeros((T + 1, n), np.float32)
    x0[0] = rand(rng, n)
    h0, w0 = rand(rng, n), rand(rng, n, lo=0.5, hi=1.5)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    h = sp.from_numpy(h0)   # no .grad of its own: the Tape gives it a temporary one
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def tape():
        with sp.Tape(loss):
            for t in range(T):
                rnn_step(x, h, w, t)
            square_sum(x, loss, T)

    def reset(x_first, h_first):
        first = x0.copy()
        first[0] = x_first
        x.from_numpy(first)
        h.from_numpy(h_first)

    reset(x0[0], h0)
    tape()
    usual = (loss[None], w.grad.to_numpy(), x.grad.to_numpy()[0])
    reset(x0[0], h0)
    with sp.capture() as g:
        tape()
    gc.collect()   # the Tape's temporary .grad and kept copies live on in the capture
    for k in range(2):
        xf, hf = (x0[0], h0) if k == 0 else (rand(rng, n), rand(rng, n))
        reset(xf, hf)
        w.grad.fill(7.0)   # the captured Tape clears it again
        x.grad.fill(7.0)
        g.replay()
        got = (loss[None], w.grad.to_numpy(), x.grad.to_numpy()[0])
        if k == 0:   # the same launches on the same contents: the same numbers
            assert got[0] == usual[0]
            np.testing.assert_array_equal(got[1], usual[1])
            np.testing.assert_array_equal(got[2], usual[2])
        w64, xf64, hf64 = w0.astype(np.float64), xf.astype(np.float64), hf.astype(np.float64)
        np.testing.assert_allclose(got[0], rnn_loss(xf64, hf64, w64), rtol=1e-5)
        np.testing.assert_allclose(got[1], central_differences(lambda p: rnn_loss(xf64, hf64, p), w64),
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got[2], central_differences(lambda p: rnn_loss(p, hf64, w64), xf64),
                                   rtol=1e-4, atol=1e-4)


# ---- flags raised by a replay are reported at the next sync ----
@sp.kernel(ad_stack_size=4)
def repeated_sine(x: sp.Array, count: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for _ in range(count[0]):   # a depth read from an array: known only when the launch runs
            p = sp.sin(p)
        y[i] = p


def test_an_overflow_a_replay_flags_is_raised_at_the_next_sync():
    rng = np.random.default_rng(4)
    x0 = rand(rng, N)
    x, y = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    count = sp.from_numpy(np.array([3], np.int32))
    y.grad.fill(1.0)
    with sp.capture() as g:
        repeated_sine.grad(x, count, y)
    x.grad.fill(0.0)
    g.replay()
    want = np.ones(N)
    p = x0.astype(np.float64)
    for _ in range(3):
        want, p = want * np.cos(p), np.sin(p)
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)
    count.from_numpy(np.array([9], np.int32))   # deeper than the capacity of 4 the capture froze
    g.replay()
    with pytest.raises(sp.AdStackOverflowError, match="repeated_sine"):
        sp.sync()


# ---- what is refused ----
HOST_ACCESS = {
    "to_numpy": lambda a: a.to_numpy(),
    "sync": lambda a: sp.sync(),
    "fill": lambda a: a.fill(2.0),
    "from_numpy": lambda a: a.from_numpy(np.full(N, 2.0, np.float32)),
    "setitem": lambda a: a.__setitem__(0, 2.0),
    "getitem": lambda a: a[0],
}


@pytest.mark.parametrize("what", sorted(HOST_ACCESS))
def test_host_access_inside_a_capture_is_refused(what):
    rng = np.random.default_rng(5)
    x0, v0 = rand(rng, N), rand(rng, N)
    x, v = sp.from_numpy(x0), sp.from_numpy(v0)
    version = x.version
    with pytest.raises(sp.ArgumentError, match="inside sp.capture()"):
        with sp.capture():
            step(x, v, DT, 0)
            HOST_ACCESS[what](x)
    assert x.version == version + 1   # the captured launch's write; nothing of the refused call
    np.testing.assert_array_equal(x.to_numpy(), x0)   # nothing ran, nothing was written
    step(x, v, DT, 0)   # the runtime goes on
    x64, v64 = x0.astype(np.float64), v0.astype(np.float64)
    np.testing.assert_allclose(x.to_numpy(), x64 + DT * (v64 + DT * np.sin(x64)), rtol=1e-5, atol=1e-6)


def test_replay_after_an_array_was_released_is_refused():
    rng = np.random.default_rng(6)
    x, v = sp.from_numpy(rand(rng, N)), sp.from_numpy(rand(rng, N))
    with sp.capture() as g:
        step(x, v, DT, 0)
    g.replay()
    del x
    gc.collect()
    with pytest.raises(sp.ArgumentError, match="released"):
        g.replay()


def test_nesting_is_refused_clearly():
    rng = np.random.default_rng(7)
    x, v = sp.from_numpy(rand(rng, N), needs_grad=True), sp.from_numpy(rand(rng, N), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.ArgumentError, match="captures do not nest"):
        with sp.capture():
            with sp.capture():
                pass
    with pytest.raises(sp.ArgumentError, match="inside an open sp.Tape"):
        with sp.Tape(loss):
            with sp.capture():
                pass
    with sp.capture() as g:
        step(x, v, DT, 0)
        with pytest.raises(sp.ArgumentError, match="its own sp.capture"):
            g.replay()
    with pytest.raises(sp.ArgumentError, match="inside an open sp.Tape"):
        with sp.Tape(loss):
            g.replay()
    with pytest.raises(sp.ArgumentError, match="inside another sp.capture"):
        with sp.capture():
            g.replay()
    with pytest.raises(sp.ArgumentError, match="recorded already"):
        with g:
            pass
    xd, vd = sp.from_numpy(rand(rng, N), needs_dual=True), sp.from_numpy(rand(rng, N), needs_dual=True)
    with pytest.raises(sp.ArgumentError, match="inside sp.capture()"):   # its seed is a host write
        with sp.capture():
            with sp.FwdMode(loss=xd, param=vd, seed=np.ones(N, np.float32)):
                step(xd, vd, DT, 0)
    g.replay()   # still whole after all that


def test_a_backend_without_captures_says_so():
    device = runtime.get().device
    with pytest.raises(sp.DeviceError, match="cannot capture launches"):
        Device.begin_capture(device)   # what Metal inherits


@sp.kernel
def measured_sine(x: sp.Array, count: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for _ in range(count[0]):
            p = sp.sin(p)
        y[i] = p


def test_adstacks_measured_on_array_data_are_refused():
    rng = np.random.default_rng(8)
    x, y = sp.from_numpy(rand(rng, N), needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    count = sp.from_numpy(np.array([3], np.int32))
    with pytest.raises(sp.ArgumentError, match="ad_stack_size"):
        with sp.capture():
            measured_sine.grad(x, count, y)

"""Parallel loops whose bounds are read from arrays (`for i in range(n[None])`, `range(b[0], b[1], step)`,
`sp.ndrange(s[0], s[1])`): forward, reverse (k.grad) and forward mode (k.fwd) against float64 numpy
references and central finite differences, on random non-zero inputs, on Vulkan and the interpreter, with and
without debug=True (whose bounds checks must stay silent: a derivative touches only what the primal did)."""
import numpy as np
import pytest

import spvad as sp
from tests.adcheck import assert_close, check_grad, finite_differences, maybe_debug, rand

pytestmark = pytest.mark.backends

N = 12


def count(rng, lo=3, hi=N, dtype=np.int32):
    return np.array(rng.integers(lo, hi), dtype)


def bounds(rng):
    """b[0] < b[1] inside [0, N]: a window of the arrays."""
    lo = int(rng.integers(0, 4))
    return np.array([lo, int(rng.integers(lo + 4, N + 1))], np.int32)


# ---- the kernels and their float64 references (same signature, outputs written in place) ----------------
@sp.kernel
def first_n(n: sp.Array, x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(n[None]):
        y[i] = sp.sin(x[i]) * w[i]


def first_n_np(n, x, w, y):
    for i in range(int(n)):
        y[i] = np.sin(x[i]) * w[i]


@sp.kernel
def window(b: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(b[0], b[1]):
        y[i] = x[i] * x[i] + x[i - 1 if i > 0 else 0]


def window_np(b, x, y):
    for i in range(b[0], b[1]):
        y[i] = x[i] * x[i] + x[i - 1 if i > 0 else 0]


@sp.kernel
def stride_up(b: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(b[0], b[1] * 2 - b[1], 3):
        y[i] = sp.exp(x[i] * 0.5)


def stride_up_np(b, x, y):
    for i in range(b[0], b[1], 3):
        y[i] = np.exp(x[i] * 0.5)


@sp.kernel
def stride_down(b: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(b[1] - 1, b[0] - 1, -2):
        y[i] = x[i] * x[i] * x[i]


def stride_down_np(b, x, y):
    for i in range(b[1] - 1, b[0] - 1, -2):
        y[i] = x[i] ** 3


@sp.kernel
def grid(s: sp.Array, x: sp.Array, w: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(s[0], s[1]):
        y[i, j] = x[i, j] * x[i, j] * w[j]


def grid_np(s, x, w, y):
    for i in range(s[0]):
        for j in range(s[1]):
            y[i, j] = x[i, j] ** 2 * w[j]


@sp.kernel
def grid_pairs(b: sp.Array, s: sp.Array, x: sp.Array, y: sp.Array):
    for i, j in sp.ndrange((b[0], b[1]), s[1]):
        y[i, j] = sp.sin(x[i, j]) + x[i, 0]


def grid_pairs_np(b, s, x, y):
    for i in range(b[0], b[1]):
        for j in range(s[1]):
            y[i, j] = np.sin(x[i, j]) + x[i, 0]


@sp.kernel
def cube_sum(n: sp.Array, x: sp.Array, loss: sp.Array):
    for i in range(min(n[None], x.shape[0])):   # a u32 count, clamped to the array
        loss[None] += x[i] * x[i] * x[i]


def cube_sum_np(n, x, loss):
    for i in range(min(int(n), len(x))):
        loss[()] += x[i] ** 3


@sp.kernel
def steps(n: sp.Array, x: sp.Array, y: sp.Array, k: sp.i32):
    for i in range(n[None]):   # an adstack sized from the scalar k: launched without the host's count
        v = x[i]
        for _ in range(k):
            v = sp.sin(v) + 0.5 * v
        y[i] = v


def iterated_np(n, x, y, trips):
    """y[i] = v after trips(i) steps of v = sin(v) + 0.5 v from x[i], for i < n."""
    for i in range(int(n)):
        v = x[i]
        for _ in range(trips(i)):
            v = np.sin(v) + 0.5 * v
        y[i] = v


def steps_np(n, x, y, k):
    iterated_np(n, x, y, lambda i: k)


@sp.kernel
def triangle(n: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(n[None]):   # the inner trip count follows the thread index: the depth probe sizes it
        v = x[i]
        for _ in range(i):
            v = sp.sin(v) + 0.5 * v
        y[i] = v


def triangle_np(n, x, y):
    iterated_np(n, x, y, lambda i: i)


@sp.kernel
def halving(n: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(n[None] * 2 - n[None]):
        v = x[i] * 8.0
        while v > 1.0:         # data-dependent trips: the depth probe
            v = v * 0.5 + 0.01 * v * v
        y[i] = v


def halving_np(n, x, y):
    for i in range(int(n)):
        v = x[i] * 8.0
        while v > 1.0:
            v = v * 0.5 + 0.01 * v * v
        y[i] = v


CASES = {   # name -> (kernel, reference, make_args(rng), outputs, inputs to differentiate)
    "first_n": (first_n, first_n_np, lambda r: [count(r), rand(r, N), rand(r, N), np.zeros(N, np.float32)],
                [3], [1, 2]),
    "window": (window, window_np, lambda r: [bounds(r), rand(r, N), np.zeros(N, np.float32)], [2], [1]),
    "stride_up": (stride_up, stride_up_np, lambda r: [bounds(r), rand(r, N), np.zeros(N, np.float32)], [2], [1]),
    "stride_down": (stride_down, stride_down_np, lambda r: [bounds(r), rand(r, N), np.zeros(N, np.float32)],
                    [2], [1]),
    "grid": (grid, grid_np, lambda r: [np.array([3, 4], np.int32), rand(r, (5, 6)), rand(r, 6),
                                       np.zeros((5, 6), np.float32)], [3], [1, 2]),
    "grid_pairs": (grid_pairs, grid_pairs_np, lambda r: [np.array([1, 4], np.int32), np.array([9, 3], np.int32),
                                                         rand(r, (5, 4)), np.zeros((5, 4), np.float32)], [3], [2]),
    "cube_sum": (cube_sum, cube_sum_np, lambda r: [count(r, dtype=np.uint32), rand(r, N), np.zeros((), np.float32)],
                 [2], [1]),
    "steps": (steps, steps_np, lambda r: [count(r), rand(r, N), np.zeros(N, np.float32), 5], [2], [1]),
    "triangle": (triangle, triangle_np, lambda r: [count(r), rand(r, N), np.zeros(N, np.float32)], [2], [1]),
    "halving": (halving, halving_np, lambda r: [count(r), rand(r, N, 0.2, 1.0) ** 2, np.zeros(N, np.float32)],
                [2], [1]),
}


def check_fwd(kernel, ref, args, outs, wrt, rng, rtol=1e-4, eps=1e-6):
    """k.fwd: the outputs' .dual == the central difference of the reference along random input tangents."""
    dev = [sp.from_numpy(a, needs_dual=k in set(outs) | set(wrt)) if isinstance(a, np.ndarray) else a
           for k, a in enumerate(args)]
    tangents = {k: rand(rng, np.shape(args[k]), 0.5, 1.5) for k in wrt}
    for k, t in tangents.items():
        dev[k].dual.from_numpy(t)
    kernel.fwd(*dev)
    moved = []
    for h in (eps, -eps):
        a = [x.astype(np.float64) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x for x in args]
        for k, t in tangents.items():
            a[k] = a[k] + h * t
        ref(*a)
        moved.append([a[k] for k in outs])
    for k, hi, lo in zip(outs, *moved):
        want = (hi - lo) / (2 * eps)
        assert np.any(want != 0), "vacuous: zero directional derivative"
        assert_close(dev[k].dual.to_numpy(), want, rtol, f"forward-mode output {k} of {kernel.name}")


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_reverse(name, debug, rng):
    kernel, ref, make_args, outs, wrt = CASES[name]
    with maybe_debug(debug):
        check_grad(kernel, ref, make_args(rng), outs, wrt, rng)


@pytest.mark.parametrize("name", list(CASES))
def test_forward_mode(name, rng):
    kernel, ref, make_args, outs, wrt = CASES[name]
    check_fwd(kernel, ref, make_args(rng), outs, wrt, rng)


@pytest.mark.parametrize("value", [0, -5, -2**31])
def test_zero_or_negative_counts_run_no_thread(value, rng):
    x = sp.from_numpy(rand(rng, N), needs_grad=True, needs_dual=True)
    w = sp.from_numpy(rand(rng, N), needs_grad=True)
    y = sp.from_numpy(np.full(N, 7.0, np.float32), needs_grad=True, needs_dual=True)
    n = sp.from_numpy(np.array(value, np.int32))
    first_n(n, x, w, y)
    y.grad.fill(1.0)
    first_n.grad(n, x, w, y)
    x.dual.fill(1.0)
    first_n.fwd(n, x, w, y)
    assert (y.to_numpy() == 7.0).all() and not x.grad.to_numpy().any() and not w.grad.to_numpy().any()
    b = sp.from_numpy(np.array([8, 2], np.int32))   # an empty window
    window(b, x, y)
    stride_down(sp.from_numpy(np.array([8, 8], np.int32)), x, y)
    grid(sp.from_numpy(np.array([3, value], np.int32)), sp.from_numpy(rand(rng, (3, 3))), w,
         sp.ndarray(sp.f32, (3, 3)))
    assert (y.to_numpy() == 7.0).all()


# ---- whole programs: counts written by earlier launches and by the host, without syncs -------------------
@sp.kernel
def count_positive(x: sp.Array, n: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            sp.atomic_add(n[None], 1)


@sp.kernel
def set_count(n: sp.Array, v: sp.i32):
    n[None] = v


def test_counts_written_by_queued_launches_and_the_host(rng):
    xv = rand(rng, N)
    x, w = sp.from_numpy(xv), sp.from_numpy(rand(rng, N))
    n, y = sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, (N,))
    want = np.zeros(N)
    count_positive(x, n)           # the count is made on the device...
    first_n(n, x, w, y)            # ...and read there, in the same batch
    first_n_np(int((xv > 0).sum()), xv.astype(np.float64), w.to_numpy().astype(np.float64), want)
    assert_close(y.to_numpy(), want, 1e-5, "count from a kernel")
    for value in (2, 9, 5):        # the same objects again (a replay), the count rewritten in between
        y.fill(0.0)
        set_count(n, value - 1)
        n.fill(value)              # a host write queued after the kernel's
        first_n(n, x, w, y)
        got = y.to_numpy()
        assert got[:value].all() and not got[value:].any(), value


def test_repeated_gradient_launches_read_the_count_each_time(rng):
    """k.grad called again with the same arrays repeats its recorded dispatches (launch.BoundReplay), the
    counting one included: each reads the count as it is then."""
    xv, wv = rand(rng, N), rand(rng, N)
    x, w = sp.from_numpy(xv, needs_grad=True), sp.from_numpy(wv, needs_grad=True)
    y, n = sp.ndarray(sp.f32, (N,), needs_grad=True), sp.ndarray(sp.i32, ())
    want = np.zeros(N)
    for count in (3, 11, 0, 6):
        n.fill(count)
        y.grad.fill(1.0)
        first_n.grad(n, x, w, y)
        want[:count] += np.cos(xv[:count].astype(np.float64)) * wv[:count]
    assert first_n._grad_replay is not None
    assert_close(x.grad.to_numpy(), want, 1e-5, "accumulated gradients")


def test_a_tape_over_kernels_where_one_writes_the_count_the_next_reads(rng):
    """The gradient of each launch uses the count its forward launch saw, though later launches rewrite it."""
    xv = rand(rng, N)
    x = sp.from_numpy(xv, needs_grad=True)
    n = sp.ndarray(sp.i32, ())
    mid = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    w = rand(rng, N)
    with sp.Tape(loss):
        count_positive(x, n)                       # k = number of positive x
        first_n(n, x, sp.from_numpy(w), mid)       # mid[:k] = sin(x) w
        set_count(n, 4)                            # the count rewritten after its use...
        cube_sum(n, mid, loss)                     # ...and read again: loss = sum(mid[:4] ** 3)
        set_count(n, 1)
    k = int((xv > 0).sum())

    def total(xs):
        m = np.zeros(N)
        first_n_np(k, xs, w.astype(np.float64), m)
        return np.sum(m[:4] ** 3)
    xd = xv.astype(np.float64)
    assert_close(loss.to_numpy(), total(xd), 1e-5, "loss")
    fd = np.array([(total(xd + 1e-6 * e) - total(xd - 1e-6 * e)) / 2e-6 for e in np.eye(N)])
    assert np.any(fd != 0)
    assert_close(x.grad.to_numpy(), fd, 1e-4, "gradient through counts read from arrays")


@sp.kernel
def decay(n: sp.Array, src: sp.Array, dst: sp.Array, rate: sp.f32):
    for i in range(n[None]):
        dst[i] = src[i] * rate + sp.sin(src[i])


def test_a_tape_time_loop_with_a_count_that_shrinks_each_step(rng):
    """Steps t = 0..T-1 each run over the count left by the step before (decremented on the device): the
    gradients, replayed in reverse, use each step's own count."""
    T = 4
    xv = rand(rng, N)
    states = [sp.from_numpy(xv, needs_grad=True)] + [sp.ndarray(sp.f32, (N,), needs_grad=True) for _ in range(T)]
    n = sp.from_numpy(np.array(N, np.int32))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for t in range(T):
            decay(n, states[t], states[t + 1], 0.5)
            set_count(n, N - 2 * (t + 1))
        cube_sum(sp.from_numpy(np.array(N, np.uint32)), states[T], loss)

    def total(xs):
        s = xs
        for t in range(T):
            nxt = np.zeros(N)
            for i in range(N - 2 * t):
                nxt[i] = s[i] * 0.5 + np.sin(s[i])
            s = nxt
        return np.sum(s ** 3)
    xd = xv.astype(np.float64)
    assert_close(loss.to_numpy(), total(xd), 1e-5, "loss")
    fd = finite_differences(lambda v, out: out.__setitem__((), total(v)), [xv, np.zeros(())], [1], [1.0], 0)
    assert_close(states[0].grad.to_numpy(), fd, 1e-4, "gradient of the time loop")


def test_forward_mode_program_with_a_count_from_a_kernel(rng):
    xv = rand(rng, N)
    x = sp.from_numpy(xv, needs_dual=True)
    n, y = sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, (N,), needs_dual=True)
    seed = rand(rng, N, 0.5, 1.5)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        count_positive(x, n)
        steps(n, x, y, 3)
    k, xd = int((xv > 0).sum()), xv.astype(np.float64)
    moved = []
    for h in (1e-6, -1e-6):
        out = np.zeros(N)
        steps_np(k, xd + h * seed, out, 3)
        moved.append(out)
    assert_close(y.dual.to_numpy(), (moved[0] - moved[1]) / 2e-6, 1e-4, "forward mode")

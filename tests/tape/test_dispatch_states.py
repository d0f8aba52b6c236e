"""A kernel's top-level loops are dispatches, launches in all but name: a later loop may overwrite what an
earlier loop wrote and a loop in between read (a scratch array cleared at the end, a state advanced in place
by several loops, atomic sums reset). The gradient recomputes those contents (autodiff/launch_states.py),
with k.grad and under a Tape. Against float64 references on random inputs, on Vulkan and the interpreter."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends
N = 7


def rand(rng, shape=N, lo=0.2, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


def fd(loss_of, args, k, eps=1e-6):
    """Central differences of the float64 function `loss_of(*args)` with respect to args[k]."""
    args = [a.astype(np.float64) for a in args]
    g = np.zeros(args[k].shape)
    for j in np.ndindex(args[k].shape):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[k][j] += eps
        lo[k][j] -= eps
        g[j] = (loss_of(*hi) - loss_of(*lo)) / (2 * eps)
    return g


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(want).max()))


@sp.kernel
def scratch_cleared(x: sp.Array, w: sp.Array, tmp: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        tmp[i] = sp.sin(x[i]) * w[i]          # a scratch array...
    for i in range(x.shape[0]):
        y[i] = tmp[i] * tmp[(i + 1) % x.shape[0]] + x[i]
    for i in range(x.shape[0]):
        tmp[i] = 0.0                          # ...cleared for the next user


def scratch_cleared_np(x, w):
    tmp = np.sin(x) * w
    return tmp * np.roll(tmp, -1) + x


@sp.kernel
def square_sum(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


def test_direct_grad_recomputes_a_cleared_scratch_array(rng):
    x0, w0 = rand(rng), rand(rng)
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    tmp, y = sp.ndarray(sp.f32, (N,), needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    scratch_cleared(x, w, tmp, y)
    seed = rand(rng)
    y.grad.from_numpy(seed)
    scratch_cleared.grad(x, w, tmp, y)   # tmp holds zeros now: the gradient recomputes what loop 2 read
    np.testing.assert_array_equal(tmp.to_numpy(), 0.0)

    def loss(xv, wv):
        return np.sum(seed * scratch_cleared_np(xv, wv))
    close(x.grad.to_numpy(), fd(loss, [x0, w0], 0))
    close(w.grad.to_numpy(), fd(loss, [x0, w0], 1))


@sp.kernel
def advanced_in_place(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        x[i] = sp.sin(x[i]) + c[None]         # state 1
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]                    # reads state 1
    for i in range(x.shape[0]):
        x[i] = x[i] * sp.cos(x[i])            # state 2, from state 1
    for i in range(x.shape[0]):
        y[i] += sp.tanh(x[(i + 2) % x.shape[0]])   # reads state 2


def advanced_in_place_np(x, c):
    s1 = np.sin(x) + c
    s2 = s1 * np.cos(s1)
    return s1 * s1 + np.tanh(np.roll(s2, -2)), s2


def test_tape_over_a_kernel_advancing_a_state_in_place_three_times(rng):
    """A whole program: the kernel launched in a time loop under a Tape, its state array reused."""
    x0, c0 = rand(rng), np.float32(0.3)
    x = sp.from_numpy(x0, needs_grad=True)
    c = sp.from_numpy(np.array(c0), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for _ in range(3):
            advanced_in_place(x, c, y)
            square_sum(y, loss)

    def program(xv, cv):
        total = 0.0
        for _ in range(3):
            yv, xv = advanced_in_place_np(xv, cv)
            total += np.sum(yv * yv)
        return total
    np.testing.assert_allclose(loss[None], program(x0.astype(np.float64), np.float64(c0)), rtol=1e-5)
    close(x.grad.to_numpy(), fd(program, [x0, np.array(c0)], 0))
    close(c.grad[None], fd(program, [x0, np.array(c0)], 1))


@sp.kernel
def binned(x: sp.Array, cell: sp.Array, acc: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        acc[cell[i]] += x[i] * x[i]           # atomic sums into a few bins
    for i in range(x.shape[0]):
        y[i] = sp.sqrt(acc[cell[i]]) * x[i]   # read back
    for c in range(acc.shape[0]):
        acc[c] = 0.0                          # and reset


def binned_np(x, cell, bins):
    acc = np.zeros(bins)
    np.add.at(acc, cell, x * x)
    return np.sqrt(acc[cell]) * x


@pytest.mark.parametrize("entry", ["grad", "tape"])
def test_atomic_sums_reset_at_the_end(entry, rng):
    bins = 3
    x0, cell0 = rand(rng), rng.integers(0, bins, N).astype(np.int32)
    x, cell = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(cell0)
    acc, y = sp.ndarray(sp.f32, (bins,), needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    seed = rand(rng)
    if entry == "grad":
        binned(x, cell, acc, y)
        y.grad.from_numpy(seed)
        binned.grad(x, cell, acc, y)   # acc holds zeros, as the launch found it: its first loop is recomputed
    else:
        w = sp.from_numpy(seed)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        with sp.Tape(loss):
            binned(x, cell, acc, y)
            weighted_sum(y, w, loss)
    close(x.grad.to_numpy(), fd(lambda xv: np.sum(seed * binned_np(xv, cell0, bins)), [x0], 0))


@sp.kernel
def weighted_sum(y: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += w[i] * y[i]


@sp.kernel
def rows_and_a_while(x: sp.Array, z: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(z.shape[0], z.shape[1]):
        z[i, j] = sp.abs(x[i]) * float(j + 1) + 0.5
    for i in range(z.shape[0]):
        v = x[i]
        k = 0
        while k < sp.i32(z[i, 1] * 2.0):      # trip counts read from z: a depth probe sizes the adstack
            v = v + 0.2 * sp.sin(v * z[i, 0])
            k += 1
        y[i] = v
    for i, j in sp.ndrange(z.shape[0], z.shape[1]):
        z[i, j] = -1.0


def rows_and_a_while_np(x):
    z0 = np.abs(x) * 1 + 0.5
    trips = (np.float32(np.abs(x) * 2 + 0.5) * 2).astype(int)
    out = []
    for i in range(len(x)):
        v = x[i]
        for _ in range(trips[i]):
            v = v + 0.2 * np.sin(v * z0[i])
        out.append(v)
    return np.array(out)


def test_a_depth_probe_reads_the_recomputed_contents(rng):
    x0 = rand(rng)
    x, z = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (N, 2), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    rows_and_a_while(x, z, y)
    np.testing.assert_allclose(y.to_numpy(), rows_and_a_while_np(x0.astype(np.float64)), rtol=1e-5)
    seed = rand(rng)
    y.grad.from_numpy(seed)
    rows_and_a_while.grad(x, z, y)   # z holds -1 (no trip at all): the probe must see the recomputed z
    close(x.grad.to_numpy(), fd(lambda xv: np.sum(seed * rows_and_a_while_np(xv)), [x0], 0))


@sp.kernel
def peak_then_scale(x: sp.Array, best: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        best[None] = -100.0
    for i in range(x.shape[0]):
        sp.atomic_max(best[None], sp.sin(x[i]))   # the winner gets the gradient
    for i in range(x.shape[0]):
        y[i] = x[i] * best[None]
    for i in range(x.shape[0]):
        best[None] = 0.0


def test_extremum_winners_between_loops(rng):
    x0 = rand(rng)
    x, best = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        peak_then_scale(x, best, y)
        square_sum(y, loss)
    close(x.grad.to_numpy(), fd(lambda xv: np.sum((xv * np.max(np.sin(xv))) ** 2), [x0], 0))


def test_forward_mode_agrees(rng):
    x0, w0 = rand(rng), rand(rng)
    x, w = sp.from_numpy(x0, needs_dual=True), sp.from_numpy(w0)
    tmp, y = sp.ndarray(sp.f32, (N,)), sp.ndarray(sp.f32, (N,), needs_dual=True)
    seed = rand(rng)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        scratch_cleared(x, w, tmp, y)
    xd = x0.astype(np.float64)
    want = (scratch_cleared_np(xd + 1e-6 * seed, w0) - scratch_cleared_np(xd - 1e-6 * seed, w0)) / 2e-6
    close(y.dual.to_numpy(), want)


def test_one_array_bound_twice_stays_refused(rng):
    """A copy per parameter could not stay one array: the error says what to do."""
    x = sp.from_numpy(rand(rng), needs_grad=True)
    tmp = sp.ndarray(sp.f32, (N,), needs_grad=True)
    scratch_cleared(x, x, tmp, tmp)
    tmp.grad.fill(1.0)
    with pytest.raises(sp.AutodiffRuleError, match="scratch_cleared.*middle of the launch.*bind distinct ndarrays"):
        scratch_cleared.grad(x, x, tmp, tmp)


def test_the_recomputation_stays_in_bounds(debug_on, rng):
    """Under debug=True (every access checked): the prologue's copies and recomputed loops, the depth probe
    and the gradients touch only elements of their arrays."""
    x0 = rand(rng)
    x, z = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (N, 2), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        rows_and_a_while(x, z, y)
        square_sum(y, loss)
    close(x.grad.to_numpy(), fd(lambda xv: np.sum(rows_and_a_while_np(xv) ** 2), [x0], 0))
    cell0 = rng.integers(0, 3, N).astype(np.int32)
    acc, y2 = sp.ndarray(sp.f32, (3,), needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)
    x.grad.fill(0.0)
    binned(x, sp.from_numpy(cell0), acc, y2)
    y2.grad.fill(1.0)
    binned.grad(x, sp.from_numpy(cell0), acc, y2)
    close(x.grad.to_numpy(), fd(lambda xv: np.sum(binned_np(xv, cell0, 3)), [x0], 0))

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


@sp.kernel
def through_the_grad(x: sp.Array, g: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        before = x.grad[i]
        g[i] = before + 1.0
        y[i] = x.grad[i] - before   # 1 when g is x.grad, else 0


def test_a_companion_bound_as_another_parameter_is_one_buffer(rng):
    x0, g0 = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.uniform(0.5, 1.5, 8).astype(np.float32)
    x, y = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (8,))
    x.grad.from_numpy(g0)
    through_the_grad(x, x.grad, y)
    np.testing.assert_allclose(y.to_numpy(), np.ones(8), rtol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), g0 + 1.0, rtol=1e-6)
    other = sp.ndarray(sp.f32, (8,))
    through_the_grad(x, other, y)
    np.testing.assert_allclose(y.to_numpy(), np.zeros(8))
    np.testing.assert_allclose(other.to_numpy(), g0 + 2.0, rtol=1e-6)   # x.grad holds g0 + 1 now


@sp.kernel
def splat(v: sp.Array, grid: sp.Array, mass: sp.Array, n: sp.i32):
    for p in range(n):
        for j in sp.static(range(3)):   # as MPM's p2g: v[p] read at every node, atomics in between
            grid[p + j] += v[p] * (j + 1.0)
            mass[p + j] += v[p]


def test_distinct_arrays_are_read_once_and_aliased_ones_again(rng):
    """The launches of distinct ndarrays run a build where an atomic on `grid` keeps what the thread read of
    `v` (one load, as hand-written code has it); binding v twice selects the build that reads it again."""
    v0 = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    v, grid, mass = sp.from_numpy(v0), sp.ndarray(sp.f32, (8,)), sp.ndarray(sp.f32, (8,))
    splat(v, grid, mass, 6)
    want, want_mass = np.zeros(8), np.zeros(8)
    for j in range(3):
        want[j:j + 6] += v0 * (j + 1.0)
        want_mass[j:j + 6] += v0
    np.testing.assert_allclose(grid.to_numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(mass.to_numpy(), want_mass, rtol=1e-6)
    assert splat.ir(v, grid, mass, 6).count("load f32 v[") == 1
    r0 = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    ring, mass = sp.from_numpy(r0), sp.ndarray(sp.f32, (4,))
    splat(ring, ring, mass, 1)   # one thread, v and grid one array: each node's add sees the previous one
    np.testing.assert_allclose(ring.to_numpy()[:3], [2 * r0[0], r0[1] + 4 * r0[0], r0[2] + 6 * r0[0]], rtol=1e-6)
    np.testing.assert_allclose(mass.to_numpy()[:3], [2 * r0[0], 2 * r0[0], 2 * r0[0]], rtol=1e-6)

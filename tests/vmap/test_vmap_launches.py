"""sp.vmap launches: B instances in one launch equal a loop over the instances (float64 numpy references built
`for b in range(B)`), batched scalars, shared arrays (read; atomic adds sum over the batch), shape reads, serial
tasks, and the arguments it refuses. On Vulkan and the interpreter."""
import numpy as np
import pytest

import spvad as sp
from tests.common_kernels import sin_steps

pytestmark = pytest.mark.backends
B, N = 5, 7


def rand(rng, *shape):
    return rng.uniform(0.2, 1.0, shape).astype(np.float32)


step = sp.kernel(sin_steps)


def step_np(x, dt, n):
    p = x.astype(np.float64)
    for _ in range(n):
        p = p + dt * np.sin(p)
    return p


@sp.kernel
def weighted(x: sp.Array, w: sp.Array, y: sp.Array, acc: sp.Array, s: sp.f32):
    for i in range(x.shape[0]):
        y[i] = s * x[i] * w[i] + sp.sin(w[i])
        acc[i % acc.shape[0]] += x[i] * x[i]


@sp.kernel
def shapes(x: sp.Array, out: sp.Array):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        out[i, j] = x[i, j] * x.shape[1] + i - j
    out[0, 0] += 100.0   # a serial task: one thread per instance


@sp.kernel
def overwrite(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i]


def test_forward_equals_the_loop(rng):
    x0 = rand(rng, B, N)
    xb, vb = sp.from_numpy(x0), sp.ndarray(sp.f32, (B, N))
    sp.vmap(step, in_axes=(0, 0, None, None))(xb, vb, 0.05, 6)
    want = np.stack([step_np(x0[b], 0.05, 6) for b in range(B)])
    np.testing.assert_allclose(vb.to_numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("as_ndarray", [False, True])
def test_batched_scalar_from_a_1d_array(rng, as_ndarray):
    x0, dts = rand(rng, B, N), rng.uniform(0.01, 0.1, B)
    steps = np.arange(1, B + 1, dtype=np.int32)
    xb, vb = sp.from_numpy(x0), sp.ndarray(sp.f32, (B, N))
    dt_arg = sp.from_numpy(dts.astype(np.float32)) if as_ndarray else dts
    sp.vmap(step, in_axes=(0, 0, 0, 0))(xb, vb, dt_arg, list(steps))
    want = np.stack([step_np(x0[b], np.float32(dts[b]), steps[b]) for b in range(B)])
    np.testing.assert_allclose(vb.to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_shared_arrays_read_and_atomics_sum_over_the_batch(rng):
    x0, w0 = rand(rng, B, N), rand(rng, N)
    xb, w, yb = sp.from_numpy(x0), sp.from_numpy(w0), sp.ndarray(sp.f32, (B, N))
    acc = sp.from_numpy(np.full(3, 0.5, np.float32))
    sp.vmap(weighted, in_axes=(0, None, 0, None, None))(xb, w, yb, acc, 1.5)
    want_y, want_acc = np.zeros((B, N)), np.full(3, 0.5)
    for b in range(B):
        xf, wf = x0[b].astype(np.float64), w0.astype(np.float64)
        want_y[b] = 1.5 * xf * wf + np.sin(wf)
        for i in range(N):
            want_acc[i % 3] += xf[i] * xf[i]
    np.testing.assert_allclose(yb.to_numpy(), want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acc.to_numpy(), want_acc, rtol=1e-5)


def test_shape_reads_are_per_instance_and_serial_tasks_run_per_instance(rng):
    x0 = rand(rng, B, 3, 4)
    xb, out = sp.from_numpy(x0), sp.ndarray(sp.f32, (B, 3, 4))
    sp.vmap(shapes)(xb, out)
    want = np.zeros((B, 3, 4))
    for b in range(B):
        i, j = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
        want[b] = x0[b].astype(np.float64) * 4 + i - j
        want[b, 0, 0] += 100.0
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_store_into_a_shared_array_is_refused(rng):
    xb, y = sp.from_numpy(rand(rng, B, N)), sp.ndarray(sp.f32, (N,))
    with pytest.raises(sp.ArgumentError, match="stores into 'y', which is shared"):
        sp.vmap(overwrite, in_axes=(0, None))(xb, y)


def bad_in_axes():
    return [((0, 0, None), "in_axes has 3 entries but the kernel takes 4"),
            ((0, 1, None, None), "only 0 .* or None"),
            ((None, None, None, None), "batches no parameter"),
            ("x", "in_axes must be 0 or a tuple")]


@pytest.mark.parametrize("in_axes, message", bad_in_axes())
def test_bad_in_axes(in_axes, message):
    with pytest.raises(sp.ArgumentError, match=message):
        sp.vmap(step, in_axes=in_axes)


def test_bad_batched_arguments(rng):
    xb, vb = sp.from_numpy(rand(rng, B, N)), sp.ndarray(sp.f32, (B, N))
    bstep = sp.vmap(step, in_axes=(0, 0, 0, None))
    with pytest.raises(sp.ArgumentError, match="batch sizes differ: 'x' has 5 instances .* 'y' has 4"):
        bstep(xb, sp.ndarray(sp.f32, (B - 1, N)), np.full(B, 0.1), 3)
    with pytest.raises(sp.ArgumentError, match="'s' has 3"):
        bstep(xb, vb, np.full(3, 0.1), 3)
    with pytest.raises(sp.ArgumentError, match="'s' has in_axes 0 but is a single number"):
        bstep(xb, vb, 0.1, 3)
    with pytest.raises(sp.ArgumentError, match="'s' has in_axes 0: it needs a 1-D array"):
        bstep(xb, vb, np.full((B, 2), 0.1), 3)
    with pytest.raises(sp.ArgumentError, match="'s' has in_axes 0 and an ndarray with a .grad"):
        bstep(xb, vb, sp.from_numpy(np.full(B, 0.1, np.float32), needs_grad=True), 3)
    with pytest.raises(sp.ArgumentError, match="'x' has in_axes 0 but is a 0-d ndarray"):
        bstep(sp.ndarray(sp.f32, ()), vb, np.full(B, 0.1), 3)
    with pytest.raises(sp.ArgumentError, match="'n' sets how many threads|needs a 1-D"):
        sp.vmap(bounded, in_axes=(0, 0))(xb, np.full(B, 3, np.int32))
    with pytest.raises(sp.ArgumentError, match="needs an @sp.kernel"):
        sp.vmap(step_np)
    with pytest.raises(sp.ArgumentError, match="already batched"):
        sp.vmap(bstep)


@sp.kernel
def bounded(x: sp.Array, n: sp.i32):
    for i in range(n):
        x[i] = 1.0


@sp.kernel
def counted(n: sp.Array, y: sp.Array):
    for i in range(n[None]):
        y[i] = 1.0


@sp.kernel
def offset(x: sp.Array, y: sp.Array, c: sp.vec2):
    for i in x:
        y[i] = x[i] * 2.0 + c


def test_vector_parameters_and_thread_counts_read_from_batched_arrays_are_refused(rng):
    y = sp.ndarray(sp.f32, (B, N))
    with pytest.raises(sp.ArgumentError, match="bounds read 'n', which is batched"):
        sp.vmap(counted)(sp.from_numpy(np.full(B, 3, np.int32)), y)
    sp.vmap(counted, in_axes=(None, 0))(sp.from_numpy(np.array(3, np.int32)), y)   # shared: fine
    np.testing.assert_array_equal(y.to_numpy(), np.tile([1.0] * 3 + [0.0] * (N - 3), (B, 1)))
    x, out = sp.ndarray(sp.vec2, (B, N)), sp.ndarray(sp.vec2, (B, N))
    with pytest.raises(sp.ArgumentError, match="'c' has in_axes 0 but is a vector or matrix parameter"):
        sp.vmap(offset)(x, out, np.ones((B, 2)))
    x0 = rand(rng, B, N, 2)
    x.from_numpy(x0)
    sp.vmap(offset, in_axes=(0, 0, None))(x, out, (1.0, 2.0))   # ndarrays of vectors batch as any other
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x0.astype(np.float64) + [1.0, 2.0], rtol=1e-6)

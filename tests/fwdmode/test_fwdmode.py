"""`sp.FwdMode` and `kernel.fwd`: seeding, argument errors, zeroed duals, chains of kernels, and the
forward-mode launch computing primal outputs too. References are float64 numpy formulas."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

N = 12


def rand(rng, shape, lo=0.2, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


@sp.kernel
def scale_sin(a: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.sin(a[None] * x[i]) * x[i]


@sp.kernel
def sin_times(x: sp.Array, z: sp.Array):
    for i in range(x.shape[0]):
        z[i] = sp.sin(x[i]) * x[i]


@sp.kernel
def square_plus(z: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = z[i] * z[i] + sp.exp(x[i] * 0.5)


@sp.kernel
def times_other(x: sp.Array, o: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * o[i] + o[i]


@sp.kernel
def sum_cubes(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i] * x[i]


def test_scalar_param_seed_defaults_to_one(rng):
    a0, x0 = 0.7, rand(rng, N)
    a = sp.from_numpy(np.array(a0, np.float32), needs_dual=True)
    x = sp.from_numpy(x0)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    with sp.FwdMode(loss=y, param=a):
        scale_sin(a, x, y)
    xf = x0.astype(np.float64)
    np.testing.assert_allclose(y.dual.to_numpy(), np.cos(a0 * xf) * xf * xf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.to_numpy(), np.sin(a0 * xf) * xf, rtol=1e-5, atol=1e-6)   # primal too
    np.testing.assert_array_equal(a.dual.to_numpy(), 0.0)   # the seed is cleared on exit


def test_vector_param_needs_a_seed(rng):
    x = sp.from_numpy(rand(rng, N), needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    with pytest.raises(sp.SpvadError, match="seed"):
        sp.FwdMode(loss=y, param=x)


@pytest.mark.parametrize("length", [N - 1, N + 1, 1])
def test_seed_of_wrong_length_raises(length, rng):
    x = sp.from_numpy(rand(rng, N), needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    with pytest.raises(sp.SpvadError, match=f"seed has {length} entries"):
        sp.FwdMode(loss=y, param=x, seed=np.ones(length))


@pytest.mark.parametrize("missing", ["loss", "param"])
def test_missing_needs_dual_raises(missing, rng):
    x = sp.from_numpy(rand(rng, N), needs_dual=missing != "param", needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=missing != "loss", needs_grad=True)
    with pytest.raises(sp.SpvadError, match=f"{missing} ndarray needs needs_dual=True"):
        sp.FwdMode(loss=y, param=x, seed=np.ones(N))


def test_non_ndarray_raises():
    with pytest.raises(sp.SpvadError, match="needs an sp.ndarray"):
        sp.FwdMode(loss=np.zeros(3), param=np.zeros(3), seed=[1.0, 1.0, 1.0])


def test_duals_of_other_arrays_start_at_zero(rng):
    """Only the param carries the seed: stale duals of the other inputs and of the output are cleared."""
    x0, o0 = rand(rng, N), rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    o = sp.from_numpy(o0, needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    o.dual.fill(5.0)
    y.dual.fill(-3.0)
    seed = rand(rng, N, 0.5, 1.5)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        times_other(x, o, y)
    np.testing.assert_allclose(y.dual.to_numpy(), o0.astype(np.float64) * seed, rtol=1e-6)
    np.testing.assert_array_equal(o.dual.to_numpy(), 0.0)
    # and the other way round: o as the param, x's dual (holding the old seed) starts at zero
    with sp.FwdMode(loss=y, param=o, seed=seed):
        times_other(x, o, y)
    np.testing.assert_allclose(y.dual.to_numpy(), (x0.astype(np.float64) + 1.0) * seed, rtol=1e-6)


def test_accumulated_loss_dual_starts_at_zero(rng):
    """`loss[None] += ...` adds into the dual too: it must start from zero, not from a previous run."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_dual=True)
    seed = rand(rng, N, 0.5, 1.5)
    for _ in range(2):
        with sp.FwdMode(loss=loss, param=x, seed=seed):
            sum_cubes(x, loss)
        want = float(np.sum(3 * x0.astype(np.float64) ** 2 * seed))
        np.testing.assert_allclose(loss.dual[None], want, rtol=1e-5)


def test_two_kernel_chain_propagates_duals(rng):
    """x -> z = sin(x) x -> y = z^2 + exp(x/2): z.dual written by the first launch feeds the second."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    z = sp.ndarray(sp.f32, (N,), needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    z.dual.fill(9.0)   # stale: zeroed when first seen
    seed = rand(rng, N, 0.5, 1.5)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        sin_times(x, z)
        square_plus(z, x, y)
    xf = x0.astype(np.float64)
    zf = np.sin(xf) * xf
    dz = (np.cos(xf) * xf + np.sin(xf)) * seed
    np.testing.assert_allclose(z.dual.to_numpy(), dz, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.dual.to_numpy(), 2 * zf * dz + 0.5 * np.exp(0.5 * xf) * seed, rtol=1e-5)
    np.testing.assert_allclose(y.to_numpy(), zf * zf + np.exp(0.5 * xf), rtol=1e-5)


def test_kernel_fwd_uses_the_dual_arrays_as_they_are(rng):
    """`k.fwd` outside FwdMode: one forward-mode launch from whatever the .dual arrays hold."""
    x0, o0 = rand(rng, N), rand(rng, N)
    dx, do = rand(rng, N, 0.5, 1.5), rand(rng, N, 0.5, 1.5)
    x = sp.from_numpy(x0, needs_dual=True)
    o = sp.from_numpy(o0, needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    x.dual.from_numpy(dx)
    o.dual.from_numpy(do)
    times_other.fwd(x, o, y)
    want = dx.astype(np.float64) * o0 + (x0.astype(np.float64) + 1.0) * do
    np.testing.assert_allclose(y.dual.to_numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(y.to_numpy(), x0.astype(np.float64) * o0 + o0, rtol=1e-6)


def test_arrays_without_dual_are_constants(rng):
    """An input without needs_dual contributes no derivative (and the launch still computes y)."""
    x0, o0 = rand(rng, N), rand(rng, N)
    x = sp.from_numpy(x0)
    o = sp.from_numpy(o0, needs_dual=True)
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    seed = rand(rng, N, 0.5, 1.5)
    with sp.FwdMode(loss=y, param=o, seed=seed):
        times_other(x, o, y)
    np.testing.assert_allclose(y.dual.to_numpy(), (x0.astype(np.float64) + 1.0) * seed, rtol=1e-6)


def test_f64_param(rng):
    if not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")
    x0 = rand(rng, N).astype(np.float64)
    x = sp.from_numpy(x0, needs_dual=True)
    z = sp.ndarray(sp.f64, (N,), needs_dual=True)
    seed = rand(rng, N, 0.5, 1.5).astype(np.float64)
    with sp.FwdMode(loss=z, param=x, seed=seed):
        sin_times(x, z)
    np.testing.assert_allclose(z.dual.to_numpy(), (np.cos(x0) * x0 + np.sin(x0)) * seed, rtol=1e-5)


@sp.kernel
def sin_step_in_place(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = sp.sin(x[i]) * 1.5


def test_in_place_updates_with_loss_equal_to_param(rng):
    """Forward mode has no recomputation, so in-place updates are fine: loss=param=x follows x's dual
    through two steps (the seed must survive the loss's zeroing)."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True)
    seed = rand(rng, N, 0.5, 1.5)
    with sp.FwdMode(loss=x, param=x, seed=seed):
        sin_step_in_place(x)
        sin_step_in_place(x)
    xf = x0.astype(np.float64)
    x1 = np.sin(xf) * 1.5
    np.testing.assert_allclose(x.dual.to_numpy(), np.cos(x1) * 1.5 * np.cos(xf) * 1.5 * seed, rtol=1e-5)
    # two float32 sines of absolute error up to ~2**-21 on a GPU (Vulkan sets no precision for sin), x 1.5
    np.testing.assert_allclose(x.to_numpy(), np.sin(x1) * 1.5, rtol=1e-6, atol=2e-6)


# ---- found by probing: a host write inside FwdMode makes the written values constants ----------------------
@sp.kernel
def _square_into(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]


@sp.kernel
def _total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


@pytest.mark.parametrize("write", ["fill", "from_numpy", "setitem", "none"])
def test_host_writes_inside_fwdmode_zero_the_dual(write, rng):
    x0 = rng.uniform(0.5, 1.5, 3)
    x = sp.from_numpy(x0.astype(np.float32), needs_dual=True)
    y = sp.ndarray(sp.f32, (3,), needs_dual=True)
    loss = sp.ndarray(sp.f32, (), needs_dual=True)
    y.dual.fill(7.0)   # stale duals from before the block must not leak into it

    def host(yv):
        if write == "fill":
            yv[:] = 0.5
        elif write == "from_numpy":
            yv[:] = [0.5, 0.25, 2.0]
        elif write == "setitem":
            yv[1] = 0.5
        return yv

    with sp.FwdMode(loss=loss, param=x, seed=[1.0, 1.0, 1.0]):
        _square_into(x, y)
        if write == "fill":
            y.fill(0.5)
        elif write == "from_numpy":
            y.from_numpy(np.array([0.5, 0.25, 2.0], np.float32))
        elif write == "setitem":
            y[1] = 0.5
        _total(y, loss)

    def loss_of(xv):
        return np.sum(host(xv * xv) ** 2)

    eps = 1e-6
    want = (loss_of(x0 + eps) - loss_of(x0 - eps)) / (2 * eps)   # along the all-ones seed
    np.testing.assert_allclose(float(loss.dual.to_numpy()), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("outer", ["tape", "fwdmode"])
def test_tape_and_fwdmode_nested_are_refused(outer, rng):
    """Nested, the launches would run in forward mode only and the Tape would record nothing: its gradients
    would silently stay zero. Refused by name before anything is zeroed or seeded; both work one after the
    other, each right (float64 closed forms)."""
    x0 = rand(rng, N)
    x = sp.from_numpy(x0, needs_dual=True, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_dual=True, needs_grad=True)
    tape, fwd = sp.Tape(loss), sp.FwdMode(loss=loss, param=x, seed=np.eye(N)[0])
    first, second = (tape, fwd) if outer == "tape" else (fwd, tape)
    with pytest.raises(sp.ArgumentError, match="inside an sp"):
        with first:
            with second:
                sum_cubes(x, loss)
    with sp.Tape(loss):
        sum_cubes(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 3 * x0.astype(np.float64) ** 2, rtol=1e-5)
    with sp.FwdMode(loss=loss, param=x, seed=np.eye(N)[0]):
        sum_cubes(x, loss)
    np.testing.assert_allclose(loss.dual[None], 3 * float(x0[0]) ** 2, rtol=1e-5)

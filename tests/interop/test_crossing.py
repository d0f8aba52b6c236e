"""Values crossing between spvad and torch / JAX: from_numpy's dtype rules, shapes (vectors: storage shape),
non-contiguous tensors, copies that never alias, and a pending launch finished before anything leaves."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import spvad as sp

# torch dtype -> (spvad dtype, torch dtype of to_torch); integers of other widths become i32
TORCH_DTYPES = [(torch.float32, sp.f32, torch.float32), (torch.float64, sp.f64, torch.float64),
                (torch.int32, sp.i32, torch.int32), (torch.int64, sp.i32, torch.int32),
                (torch.int16, sp.i32, torch.int32), (torch.uint8, sp.i32, torch.int32),
                (torch.uint32, sp.u32, torch.uint32), (torch.bool, sp.u1, torch.bool)]


@sp.kernel
def add_scaled(x: sp.Array, s: sp.f32):
    for i in range(x.shape[0]):
        x[i] = x[i] * s + 1.0


def random_tensor(rng, dtype, shape):
    if dtype == torch.bool:
        return torch.from_numpy(np.asarray(rng.random(shape) < 0.5))
    if dtype.is_floating_point:
        return torch.from_numpy(rng.uniform(-3, 3, shape)).to(dtype)
    lo = 0 if dtype in (torch.uint8, torch.uint32) else -100
    return torch.from_numpy(rng.integers(lo, 100, shape)).to(dtype)


@pytest.mark.parametrize("shape", [(), (7,), (2, 3), (2, 1, 3, 2)])
@pytest.mark.parametrize("dtype, spvad_dtype, back", TORCH_DTYPES, ids=lambda v: str(v))
def test_torch_values_cross_both_ways(rng, dtype, spvad_dtype, back, shape):
    t = random_tensor(rng, dtype, shape)
    a = sp.from_torch(t)
    assert a.dtype == spvad_dtype and a.shape == shape and a.grad is None
    np.testing.assert_array_equal(a.to_numpy(), t.numpy())
    out = a.to_torch()
    assert out.dtype == back and out.shape == t.shape and out.device.type == "cpu"
    assert torch.equal(out, t.to(back))


def test_non_contiguous_tensors_are_copied_with_their_strides(rng):
    t = torch.from_numpy(rng.uniform(-1, 1, (6, 8)))
    for view in (t.T, t[::2, 1::3], t[:, 2], t.conj(), -t[1:]):
        np.testing.assert_array_equal(sp.from_torch(view).to_numpy(), view.resolve_neg().numpy())


def test_needs_grad_follows_requires_grad_unless_given(rng):
    t = torch.from_numpy(rng.uniform(-1, 1, 4)).requires_grad_()
    assert sp.from_torch(t).needs_grad and not sp.from_torch(t, needs_grad=False).needs_grad
    assert sp.from_torch(t.detach(), needs_grad=True).needs_grad
    assert not sp.from_torch(t.detach()).needs_grad


def test_vector_arrays_leave_with_their_storage_shape(rng):
    data = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    a = sp.from_numpy(data, dtype=sp.vec3)
    assert a.to_torch().shape == (5, 3) and np.array_equal(a.to_torch().numpy(), data)
    assert a.to_jax().shape == (5, 3) and np.array_equal(np.asarray(a.to_jax()), data)


def test_a_pending_launch_is_finished_before_values_leave(rng):
    data = rng.uniform(-1, 1, 64).astype(np.float32)
    for leave in (lambda a: a.to_torch().numpy(), lambda a: np.asarray(a.to_jax()),
                  lambda a: torch.from_dlpack(a).numpy().copy(), lambda a: np.from_dlpack(a).copy()):
        a = sp.from_numpy(data)
        add_scaled(a, 2.0)   # queued, not yet run
        np.testing.assert_allclose(leave(a), data * 2 + 1, rtol=1e-6)


def test_to_torch_and_from_torch_copy(rng):
    """A tensor made by to_torch never changes under a later launch, nor an ndarray under the tensor."""
    data = rng.uniform(-1, 1, 16).astype(np.float32)
    a = sp.from_numpy(data)
    out = a.to_torch()
    add_scaled(a, 3.0)
    sp.sync()
    np.testing.assert_array_equal(out.numpy(), data)
    t = torch.from_numpy(data.copy())
    b = sp.from_torch(t)
    t += 5
    np.testing.assert_array_equal(b.to_numpy(), data)


@pytest.mark.parametrize("np_dtype, spvad_dtype", [(np.float32, sp.f32), (np.int32, sp.i32), (np.uint32, sp.u32),
                                                   (np.bool_, sp.u1)])
def test_jax_values_cross_both_ways(rng, np_dtype, spvad_dtype):
    data = rng.uniform(-3, 3, (3, 4)).astype(np_dtype) if np_dtype != np.bool_ else rng.random((3, 4)) < 0.5
    x = jnp.asarray(data)
    a = sp.from_jax(x)
    assert a.dtype == spvad_dtype and a.shape == (3, 4)
    np.testing.assert_array_equal(a.to_numpy(), data)
    back = a.to_jax()
    assert isinstance(back, jax.Array) and back.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(back), data)


def test_float64_crosses_to_jax_only_in_64_bit_mode(rng, x64):
    data = rng.uniform(-1, 1, 5)
    a = sp.from_jax(jnp.asarray(data), needs_grad=True)
    assert a.dtype == sp.f64 and a.needs_grad
    assert a.to_jax().dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(a.to_jax()), data)
    a64 = sp.from_jax(jnp.asarray(data.astype(np.int64)))
    assert a64.dtype == sp.i32
    jax.config.update("jax_enable_x64", False)
    with pytest.raises(sp.ArgumentError, match="64-bit mode"):
        a.to_jax()   # never narrowed to float32 silently


def test_from_jax_refuses_a_traced_value():
    with pytest.raises(sp.ArgumentError, match="traced jax value.*sp.jax_function"):
        jax.jit(lambda x: sp.from_jax(x) and x)(jnp.ones(3))

"""jax.vmap of an @sp.jax_function: the function's launches run batched by sp.vmap (the number of launches does
not grow with the batch), forward and gradient equal to float64 numpy closed forms per element; host writes
of arrays the function makes are replayed for every element; a launch sequence with no batched form (a store
into a shared scratch array) runs element by element and is still right. On Vulkan and the interpreter."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spvad as sp
from spvad.kernel import Kernel

pytestmark = pytest.mark.backends


@sp.kernel
def scaled_cube(x: sp.Array, w: sp.Array, y: sp.Array, s: sp.f32):
    for i in range(x.shape[0]):
        y[i] = s * w[i] * x[i] * x[i] * x[i]


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i]


@sp.jax_function
def cubed(x):
    w = sp.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))   # made here: a host write to replay
    w[1] = 5.0
    y = sp.ndarray(x.dtype, x.shape)
    scaled_cube(x, w, y, 0.5)
    loss = sp.ndarray(x.dtype, ())
    total(y, loss)
    return y, loss


W = np.array([1.0, 5.0, 3.0])


def launches(monkeypatch):
    """Counts kernel calls (plain and batched) from now on."""
    count = {"calls": 0}
    original = Kernel.__call__

    def counting(self, *args, **kwargs):
        count["calls"] += 1
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Kernel, "__call__", counting)
    return count


@pytest.mark.parametrize("jit", [False, True])
def test_vmap_values_and_gradients(rng, jit):
    xs = jnp.asarray(rng.uniform(0.5, 1.5, (4, 3)).astype(np.float32))
    ys, losses = (jax.jit(jax.vmap(cubed)) if jit else jax.vmap(cubed))(xs)
    xf = np.asarray(xs, np.float64)
    np.testing.assert_allclose(ys, 0.5 * W * xf ** 3, rtol=1e-6)
    np.testing.assert_allclose(losses, np.sum(0.5 * W * xf ** 3, axis=1), rtol=1e-6)
    grad = jax.vmap(jax.grad(lambda x: cubed(x)[1]))
    np.testing.assert_allclose((jax.jit(grad) if jit else grad)(xs), 1.5 * W * xf ** 2, rtol=1e-6)
    nested = jax.vmap(jax.vmap(jax.grad(lambda x: jnp.sum(cubed(x)[0] ** 2))))(xs.reshape(2, 2, 3))
    np.testing.assert_allclose(nested.reshape(4, 3), 2 * (0.5 * W * xf ** 3) * 1.5 * W * xf ** 2, rtol=1e-5)


def test_launches_do_not_grow_with_the_batch(rng, monkeypatch):
    count = launches(monkeypatch)
    calls = []
    for size in (2, 6):
        xs = jnp.asarray(rng.uniform(0.5, 1.5, (size, 3)).astype(np.float32))
        count["calls"] = 0
        jax.block_until_ready(jax.vmap(jax.grad(lambda x: cubed(x)[1]))(xs))
        calls.append(count["calls"])
    assert calls[0] == calls[1], calls


scratch = None


@sp.kernel
def into(x: sp.Array, tmp: sp.Array):
    for i in range(x.shape[0]):
        tmp[i] = x[i] * x[i]


@sp.kernel
def out_of(tmp: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = tmp[i] + 1.0


@sp.jax_function
def through_scratch(x):
    y = sp.ndarray(x.dtype, x.shape)
    into(x, scratch)    # a shared array the launches store into: no batched form
    out_of(scratch, y)
    return y


def test_a_sequence_without_a_batched_form_runs_element_by_element(rng, monkeypatch):
    global scratch
    scratch = sp.ndarray(sp.f32, (3,), needs_grad=True)
    xs = jnp.asarray(rng.uniform(0.5, 1.5, (5, 3)).astype(np.float32))
    np.testing.assert_allclose(jax.vmap(through_scratch)(xs), np.asarray(xs, np.float64) ** 2 + 1.0, rtol=1e-6)
    grads = jax.vmap(jax.grad(lambda x: jnp.sum(through_scratch(x))))(xs)
    np.testing.assert_allclose(grads, 2.0 * np.asarray(xs, np.float64), rtol=1e-6)

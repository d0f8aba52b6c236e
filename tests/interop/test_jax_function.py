"""@sp.jax_function under jax.grad, jax.value_and_grad, jax.jit and jax.vmap, against the same program written
in jax.numpy (JAX's own autodiff, float64) and JAX's finite-difference checker."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads

import spvad as sp

from interop_programs import DT, rollout, rollout_reference

pytestmark = pytest.mark.backends

STEPS = 5


@sp.jax_function
def simulate(p, x0, v0, target, steps, scale=1.0):
    return rollout(p, x0, v0, target, steps, scale)


def reference(p, x0, v0, target, steps, scale=1.0):
    x, v = x0, v0
    for _ in range(steps):
        v = v + DT * (-p[0] * x - p[1] * v * jnp.abs(v))
        x = x + DT * v
    return scale * jnp.sum((x - target) ** 2), x


def problem(rng, n=12, dtype=np.float64):
    sign = lambda: np.where(rng.random(n) < 0.5, -1.0, 1.0)   # noqa: E731
    p = 0.5 + rng.random(2)
    x0, v0, target = (sign() * rng.uniform(0.2, 1.0, n) for _ in range(3))
    return tuple(jnp.asarray(a.astype(dtype)) for a in (p, x0, v0, target))


def loss_of(fn):
    """A scalar of both outputs, so that both cotangents matter."""
    def loss(p, x0, v0, target, w):
        value, x = fn(p, x0, v0, target, STEPS, 0.5)
        return 3.0 * value + jnp.sum(w * x)
    return loss


def test_grad_and_value_and_grad_match_jax(rng, x64):
    args = problem(rng) + (jnp.asarray(rng.uniform(0.5, 1.5, 12)),)
    grads = jax.grad(loss_of(simulate), argnums=(0, 1, 2))(*args)
    value, grads2 = jax.value_and_grad(loss_of(simulate), argnums=(0, 1, 2))(*args)
    ref_value, ref = jax.value_and_grad(loss_of(reference), argnums=(0, 1, 2))(*args)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for g, g2, r in zip(grads, grads2, ref):
        assert g.dtype == jnp.float64 and np.abs(r).min() > 1e-6
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g2, r, rtol=1e-10, atol=1e-12)


def test_under_jit(rng, x64):
    args = problem(rng) + (jnp.ones(12),)
    fn = jax.jit(jax.value_and_grad(loss_of(simulate)))
    for _ in range(2):   # the second call runs the compiled callbacks again
        value, grad = fn(*args)
        ref_value, ref = jax.value_and_grad(loss_of(reference))(*args)
        np.testing.assert_allclose(value, ref_value, rtol=1e-12)
        np.testing.assert_allclose(grad, ref, rtol=1e-10, atol=1e-12)
        args = (args[0] * 1.1,) + args[1:]


def test_vmap_of_a_jax_function(rng, x64):
    """jax.vmap of the gradient and of the values (one batched launch sequence: tests/vmap/test_vmap_jax.py)."""
    p, x0, v0, target = problem(rng)
    batch = jnp.stack([x0, -x0, 0.5 * x0])
    batched = jax.vmap(jax.grad(lambda x: simulate(p, x, v0, target, STEPS)[0]))(batch)
    ref = jax.vmap(jax.grad(lambda x: reference(p, x, v0, target, STEPS)[0]))(batch)
    np.testing.assert_allclose(batched, ref, rtol=1e-10, atol=1e-12)
    values = jax.jit(jax.vmap(lambda x: simulate(p, x, v0, target, STEPS)[1]))(batch)
    np.testing.assert_allclose(values, jax.vmap(lambda x: reference(p, x, v0, target, STEPS)[1])(batch), rtol=1e-12)


def test_finite_differences(rng, x64):
    p, x0, v0, target = problem(rng, n=4)
    check_grads(lambda p, x0: simulate(p, x0, v0, target, 3)[0], (p, x0), order=1, modes=["rev"])


def test_float32_without_64_bit_mode(rng):
    p, x0, v0, target = problem(rng, dtype=np.float32)
    grad = jax.grad(lambda p: simulate(p, x0, v0, target, STEPS)[0])(p)
    assert grad.dtype == jnp.float32
    p64 = torch.tensor(np.asarray(p), dtype=torch.float64, requires_grad=True)
    rest = (torch.tensor(np.asarray(a), dtype=torch.float64) for a in (x0, v0, target))
    rollout_reference(p64, *rest, STEPS)[0].backward()   # float64 in torch: JAX has no float64 here
    np.testing.assert_allclose(grad, p64.grad.numpy(), rtol=2e-4, atol=1e-5)


@sp.kernel
def gather_scaled(x: sp.Array, index: sp.Array, y: sp.Array):
    for i in range(index.shape[0]):
        y[i] = x[index[i]] * x[index[i]]


@sp.jax_function
def gathered(x, index):
    y = sp.ndarray(x.dtype, index.shape)
    gather_scaled(x, index, y)
    return y


def test_an_integer_array_argument_gets_no_gradient(rng):
    x = jnp.asarray(rng.uniform(0.5, 1.5, 6).astype(np.float32))
    index = jnp.asarray([5, 0, 5, 2], dtype=jnp.int32)
    grad = jax.jit(jax.grad(lambda x: gathered(x, index).sum()))(x)
    expected = np.zeros(6)
    for k in [5, 0, 5, 2]:
        expected[k] += 2 * float(x[k])
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


@sp.jax_function
def first_n(x, n):
    y = sp.ndarray(x.dtype, (n,))
    gather_scaled(x, sp.from_numpy(np.arange(n, dtype=np.int32)), y)
    return y


def test_output_shapes_follow_integer_arguments(rng):
    x = jnp.asarray(rng.uniform(0.5, 1.5, 6).astype(np.float32))
    assert first_n(x, 2).shape == (2,) and jax.jit(first_n, static_argnums=1)(x, 4).shape == (4,)

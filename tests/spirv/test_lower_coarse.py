"""Elementwise tasks run four elements per thread with vec4 loads and stores (spirv/lower_coarse.py): which
tasks qualify, and values and gradients against float64 numpy for every tail length (n % 4), aliased
arguments, integers."""
import numpy as np
import pytest

import spvad as sp
from spvad.pipeline import REVERSE
from spvad.spirv import tools


@sp.kernel
def scaled_tanh(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.tanh(1.5 * x[i] + 0.2)


@sp.kernel
def two_inputs(a: sp.Array, b: sp.Array, y: sp.Array, s: sp.f32):
    for i in range(a.shape[0]):
        y[i] = a[i] * sp.sin(b[i]) + s


@sp.kernel
def int_step(a: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = a[i] * 3 - 7


@sp.kernel
def shifted(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0] - 1):
        y[i] = x[i + 1]                 # another index: one element per thread


@sp.kernel
def uses_index(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * float(i)          # the index as a value: one element per thread


@sp.kernel
def looped(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v * 0.5
        y[i] = v


def per_thread(k, *args, mode="primal"):
    specs = k._bind(args)[0]
    return [t.lowered.per_thread for t in k._compiled(specs, mode).tasks]


def f32(rng, n):
    return sp.from_numpy(rng.uniform(-1, 1, n).astype(np.float32), needs_grad=True)


def test_which_tasks_qualify(rng):
    x, y = f32(rng, 8), sp.ndarray(sp.f32, (8,), needs_grad=True)
    assert per_thread(scaled_tanh, x, y) == [4] and per_thread(scaled_tanh, x, y, mode=REVERSE) == [4]
    low = scaled_tanh._compiled(scaled_tanh._bind((x, y))[0]).tasks[0].lowered
    assert low.tail.rest and low.tail.per_thread == 4
    tools.validate(low.tail.spirv)   # the module of the last n % 4 elements is valid SPIR-V too
    assert per_thread(two_inputs, x, f32(rng, 8), y, 0.5) == [4]
    assert per_thread(shifted, x, y) == [1] and per_thread(uses_index, x, y) == [1]
    assert per_thread(looped, x, y, 3) == [1]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 6, 7, 8, 13, 1027])
def test_values_and_gradients_for_every_tail(n, rng):
    a0, b0 = rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
    a, b = sp.from_numpy(a0, needs_grad=True), sp.from_numpy(b0, needs_grad=True)
    y = sp.ndarray(sp.f32, (n,), needs_grad=True)
    two_inputs(a, b, y, 0.25)
    a64, b64 = a0.astype(np.float64), b0.astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), a64 * np.sin(b64) + 0.25, rtol=1e-5, atol=1e-6)
    g = rng.uniform(0.5, 1.5, n).astype(np.float32)
    y.grad.from_numpy(g)
    two_inputs.grad(a, b, y, 0.25)
    np.testing.assert_allclose(a.grad.to_numpy(), g * np.sin(b64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.to_numpy(), g * a64 * np.cos(b64), rtol=1e-5, atol=1e-6)
    assert not y.grad.to_numpy().any()   # consumed


@pytest.mark.parametrize("n", [5, 12])
def test_in_place_and_aliased(n, rng):
    x0 = rng.uniform(-1, 1, n).astype(np.float32)
    x = sp.from_numpy(x0)
    scaled_tanh(x, x)
    np.testing.assert_allclose(x.to_numpy(), np.tanh(1.5 * x0.astype(np.float64) + 0.2), rtol=1e-5, atol=1e-6)


def test_integers(rng):
    a0 = rng.integers(-1000, 1000, 11).astype(np.int32)
    a, y = sp.from_numpy(a0), sp.ndarray(sp.i32, (11,))
    int_step(a, y)
    np.testing.assert_array_equal(y.to_numpy(), a0 * 3 - 7)


def test_debug_builds_check_scalars(debug, rng):
    x, y = f32(rng, 8), sp.ndarray(sp.f32, (8,), needs_grad=True)
    assert per_thread(scaled_tanh, x, y) == [1]


def test_repeated_launches_replay_both_dispatches(rng):
    """A replay (same arrays, a new scalar) repeats the whole quads and the last n % 4 elements."""
    a0, b0 = rng.uniform(-1, 1, 10).astype(np.float32), rng.uniform(-1, 1, 10).astype(np.float32)
    a, b, y = sp.from_numpy(a0), sp.from_numpy(b0), sp.ndarray(sp.f32, (10,))
    for s in (0.25, 0.25, -1.5, 3.0):
        y.fill(0.0)
        two_inputs(a, b, y, s)
        np.testing.assert_allclose(y.to_numpy(), a0.astype(np.float64) * np.sin(b0) + s, rtol=1e-5, atol=1e-6)

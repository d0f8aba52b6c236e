"""Dataclass kernel arguments (Warp's structs): `s.x[i]`, `s.dt`, nested dataclasses, vector fields, annotated
or untyped parameters; values against float64 numpy, gradients through their ndarrays (sp.Tape, k.grad)
against float64 closed forms, on Vulkan and on the interpreter; fields that cannot be bound are named."""
import dataclasses

import numpy as np
import pytest

import spvad as sp
from adcheck import assert_close, rand

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


@dataclasses.dataclass
class Params:
    stiffness: float
    gravity: sp.vec2


@dataclasses.dataclass
class State:
    x: sp.ndarray
    v: sp.ndarray
    dt: float
    params: Params


@sp.func
def force(s, i):
    return -s.params.stiffness * s.x[i] + s.params.gravity


@sp.kernel
def advance(s: State, out: sp.Array):
    for i in s.x:
        out[i] = s.x[i] + s.dt * (s.v[i] + s.dt * force(s, i))


@sp.kernel
def energy(s, loss: sp.Array):   # untyped: a dataclass argument all the same
    for i in s.v:
        loss[None] += 0.5 * sp.dot(s.v[i], s.v[i]) + 0.5 * s.params.stiffness * sp.dot(s.x[i], s.x[i])


def advance_ref(x, v, dt, k, g):
    return x + dt * (v + dt * (-k * x + g))


def make_state(rng, n, dt, k, g, needs_grad=False):
    x, v = rand(rng, (n, 2)), rand(rng, (n, 2))
    s = State(sp.from_numpy(x, needs_grad=needs_grad), sp.from_numpy(v, needs_grad=needs_grad), dt,
              Params(k, g))
    s.x = sp.ndarray(sp.vec2, (n,), needs_grad=needs_grad)
    s.x.from_numpy(x)
    s.v = sp.ndarray(sp.vec2, (n,), needs_grad=needs_grad)
    s.v.from_numpy(v)
    return s, x.astype(np.float64), v.astype(np.float64)


def test_fields_nested_dataclasses_and_vector_fields(rng):
    s, x, v = make_state(rng, 6, 0.1, 2.0, (0.5, -1.0))
    out = sp.ndarray(sp.vec2, (6,))
    advance(s, out)
    assert_close(out.to_numpy(), advance_ref(x, v, 0.1, 2.0, np.array([0.5, -1.0])), 1e-5, "out")


def test_numbers_are_runtime_values_and_arrays_are_bound_per_launch(rng):
    s, x, v = make_state(rng, 4, 0.1, 2.0, (0.0, 0.0))
    out = sp.ndarray(sp.vec2, (4,))
    advance(s, out)
    compiled = len(advance._cache)
    t, x2, v2 = make_state(rng, 4, 0.05, -1.0, (1.0, 2.0))   # another instance, other numbers
    advance(t, out)
    assert len(advance._cache) == compiled                    # the same compiled kernel
    assert_close(out.to_numpy(), advance_ref(x2, v2, 0.05, -1.0, np.array([1.0, 2.0])), 1e-5, "out")
    s.dt = 0.3                                                # a field changed in place
    advance(s, out)
    assert_close(out.to_numpy(), advance_ref(x, v, 0.3, 2.0, np.zeros(2)), 1e-5, "out")


def test_tape_gradients_flow_to_the_dataclass_arrays(rng):
    s, x, v = make_state(rng, 5, 0.1, 1.5, (0.0, 0.0), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        energy(s, loss)
    assert_close(loss.to_numpy(), 0.5 * np.sum(v * v) + 0.75 * np.sum(x * x), 1e-5, "loss")
    assert_close(s.v.grad.to_numpy(), v, 1e-5, "v.grad")
    assert_close(s.x.grad.to_numpy(), 1.5 * x, 1e-5, "x.grad")


def test_kernel_grad_with_a_dataclass_argument(rng):
    s, x, v = make_state(rng, 3, 0.2, 0.5, (0.25, 0.0), needs_grad=True)
    out = sp.ndarray(sp.vec2, (3,), needs_grad=True)
    advance(s, out)
    seed = rand(rng, (3, 2))
    out.grad.from_numpy(seed)
    advance.grad(s, out)
    assert_close(s.x.grad.to_numpy(), seed * (1 - 0.2 * 0.2 * 0.5), 1e-5, "x.grad")
    assert_close(s.v.grad.to_numpy(), seed * 0.2, 1e-5, "v.grad")


@dataclasses.dataclass
class Pair:
    src: sp.ndarray
    mid: sp.ndarray   # an intermediate without needs_grad: the Tape gives it a temporary .grad


@sp.kernel
def through(p: Pair, loss: sp.Array):
    for i in p.src:
        p.mid[i] = sp.sin(p.src[i])
    for i in p.mid:
        loss[None] += p.mid[i] * p.src[i]


def test_the_tape_differentiates_through_a_field_without_grad(rng):
    x = rand(rng, 5)
    p = Pair(sp.from_numpy(x, needs_grad=True), sp.ndarray(sp.f32, (5,)))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        through(p, loss)
    x = x.astype(np.float64)
    assert_close(p.src.grad.to_numpy(), np.cos(x) * x + np.sin(x), 1e-5, "src.grad")


@dataclasses.dataclass
class Labels:
    x: sp.ndarray
    names: list


def test_a_field_that_cannot_be_bound_is_named(rng):
    with pytest.raises(sp.ArgumentError, match=r"argument 's' \(Labels\): field 'names' holds a list"):
        energy(Labels(sp.from_numpy(rand(rng, 3)), ["a", "b"]), sp.ndarray(sp.f32, ()))


def test_an_argument_of_another_type_than_annotated_is_refused(rng):
    out = sp.ndarray(sp.vec2, (3,))
    with pytest.raises(sp.ArgumentError, match=r"argument 's' is annotated .*State.* but got Labels"):
        advance(Labels(sp.from_numpy(rand(rng, 3)), []), out)


def test_an_unknown_field_is_named(rng):
    @sp.kernel
    def reads_missing(s: State, out: sp.Array):
        for i in out:
            out[i] = s.mass
    s, _, _ = make_state(rng, 2, 0.1, 1.0, (0.0, 0.0))
    with pytest.raises(sp.CompileError, match=r"'s' has no field 'mass'"):
        reads_missing(s, sp.ndarray(sp.f32, (2,)))

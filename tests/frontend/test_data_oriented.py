"""`@sp.data_oriented` classes (Taichi's `@ti.data_oriented`): kernel and func methods reading `self`'s ndarrays
(and `.grad`), numbers (compile-time constants, specialised on their values), nested objects and sp.template()
arguments; several instances; sp.Tape, `obj.step.grad()`; errors. Values against float64 numpy, gradients
against float64 closed forms, on Vulkan and on the interpreter."""
import copy

import numpy as np
import pytest

import spvad as sp
from adcheck import assert_close, rand

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


class Weights:   # a plain nested object (not decorated): its arrays and numbers are read through `self.w`
    def __init__(self, w, bias):
        self.w, self.bias = w, bias


@sp.data_oriented
class Model:
    def __init__(self, x, w, k, bias):
        self.n, self.k = len(x), k
        self.x = sp.from_numpy(x, needs_grad=True)
        self.y = sp.ndarray(sp.f32, (self.n,), needs_grad=True)
        self.loss = sp.ndarray(sp.f32, (), needs_grad=True)
        self.weights = Weights(sp.from_numpy(w, needs_grad=True), bias)

    @sp.func
    def feature(self, v, i):
        return sp.sin(self.k * v) + self.weights.w[i] * v + self.weights.bias

    @sp.kernel
    def forward(self):
        for i in range(self.n):
            self.y[i] = self.feature(self.x[i], i)

    @sp.kernel
    def total(self):
        for i in self.y:
            self.loss[None] += self.y[i] ** 2

    def run(self):
        self.forward()
        self.total()


def forward_ref(x, w, k, bias):
    return np.sin(k * x) + w * x + bias


def make(rng, n, k, bias):
    x, w = rand(rng, n), rand(rng, n)
    return Model(x, w, k, bias), x.astype(np.float64), w.astype(np.float64)


def test_methods_read_arrays_numbers_and_nested_objects(rng):
    m, x, w = make(rng, 7, 1.5, 0.25)
    m.forward()
    assert_close(m.y.to_numpy(), forward_ref(x, w, 1.5, 0.25), 1e-5, "y")


def test_several_instances_keep_their_own_arrays_and_numbers(rng):
    a, xa, wa = make(rng, 5, 2.0, 0.5)
    b, xb, wb = make(rng, 9, -1.0, 0.0)
    for _ in range(2):   # alternately: neither instance's compiled kernel serves the other
        a.forward()
        b.forward()
    assert_close(a.y.to_numpy(), forward_ref(xa, wa, 2.0, 0.5), 1e-5, "a.y")
    assert_close(b.y.to_numpy(), forward_ref(xb, wb, -1.0, 0.0), 1e-5, "b.y")


def test_a_changed_number_compiles_again_with_the_new_value(rng):
    m, x, w = make(rng, 6, 1.0, 0.0)
    m.forward()
    m.k, m.weights.bias = 3.0, -0.5   # (Taichi would keep the values of the first compile)
    m.forward()
    assert_close(m.y.to_numpy(), forward_ref(x, w, 3.0, -0.5), 1e-5, "y")


def test_a_copy_of_an_instance_binds_its_kernels_to_the_copy(rng):
    m, x, w = make(rng, 4, 1.0, 0.0)
    m.forward()
    c = copy.copy(m)   # (its dict is copied: the kernels bound to m must not serve it)
    c.y, c.k = sp.ndarray(sp.f32, (4,)), 2.0
    c.forward()
    assert_close(c.y.to_numpy(), forward_ref(x, w, 2.0, 0.0), 1e-5, "c.y")
    assert_close(m.y.to_numpy(), forward_ref(x, w, 1.0, 0.0), 1e-5, "m.y")


def test_an_array_attribute_rebound_is_seen_by_the_next_launch(rng):
    m, x, w = make(rng, 4, 1.0, 0.0)
    m.forward()
    x2 = rand(rng, 4)
    m.x = sp.from_numpy(x2, needs_grad=True)
    m.forward()
    assert_close(m.y.to_numpy(), forward_ref(x2.astype(np.float64), w, 1.0, 0.0), 1e-5, "y")


def test_tape_gradients_flow_to_self_arrays(rng):
    m, x, w = make(rng, 8, 1.25, 0.1)
    with sp.Tape(m.loss):
        m.run()
    y = forward_ref(x, w, 1.25, 0.1)
    assert_close(m.loss.to_numpy(), np.sum(y ** 2), 1e-5, "loss")
    assert_close(m.x.grad.to_numpy(), 2 * y * (1.25 * np.cos(1.25 * x) + w), 1e-4, "x.grad")
    assert_close(m.weights.w.grad.to_numpy(), 2 * y * x, 1e-4, "w.grad")


def test_grad_of_a_bound_method(rng):
    m, x, w = make(rng, 6, 0.75, 0.0)
    m.forward()
    dy = rand(rng, 6)
    m.y.grad.from_numpy(dy)
    m.x.grad.fill(0.0)
    m.weights.w.grad.fill(0.0)
    m.forward.grad()
    assert_close(m.x.grad.to_numpy(), dy * (0.75 * np.cos(0.75 * x) + w), 1e-4, "x.grad")
    assert_close(m.weights.w.grad.to_numpy(), dy * x, 1e-4, "w.grad")


@sp.data_oriented
class Optimizer:
    """Reads `self.model.x.grad` (a nested object's gradient) and takes sp.template() arguments."""

    def __init__(self, model, rate):
        self.model, self.rate = model, rate

    @sp.kernel
    def descend(self):
        for i in self.model.x:
            self.model.x[i] -= self.rate * self.model.x.grad[i]

    @sp.kernel
    def scaled_copy(self, dst: sp.template(), scale: sp.template()):
        for i in dst:
            dst[i] = self.model.x[i] * scale


def test_nested_gradients_and_template_arguments(rng):
    m, x, w = make(rng, 5, 1.0, 0.0)
    opt = Optimizer(m, 0.1)
    with sp.Tape(m.loss):
        m.run()
    opt.descend()
    y = forward_ref(x, w, 1.0, 0.0)
    x1 = x - 0.1 * 2 * y * (np.cos(x) + w)
    assert_close(m.x.to_numpy(), x1, 1e-5, "x after a step")
    dst = sp.ndarray(sp.f32, (5,))
    opt.scaled_copy(dst, -2.0)
    assert_close(dst.to_numpy(), -2.0 * x1, 1e-5, "dst")


@sp.data_oriented
class Counter:
    def __init__(self, values, offset):
        self.values = sp.from_numpy(values)
        self.offset = offset


counter = Counter(np.zeros(3, np.float32), 10.0)   # a module-level instance, read by a plain kernel


@sp.kernel
def shifted(out: sp.Array):
    for i in out:
        out[i] = counter.values[i] + counter.offset


def test_a_module_level_instance_is_read_as_globals_are(rng):
    counter.values = sp.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))   # (this backend's runtime)
    out = sp.ndarray(sp.f32, (3,))
    shifted(out)
    assert_close(out.to_numpy(), [11.0, 12.0, 13.0], 0, "out")
    counter.values = sp.from_numpy(rand(rng, 3))   # re-bound: the next launch reads the new array
    shifted(out)
    assert_close(out.to_numpy(), counter.values.to_numpy() + 10.0, 1e-6, "out")


def test_func_methods_called_from_python():
    m = Model(np.ones(2, np.float32), np.ones(2, np.float32), 2.0, 0.0)
    assert Model.feature.fn is not None and m.feature.func.__name__ == "feature"


def test_forward_mode_through_a_bound_method(rng):
    m, x, w = make(rng, 5, 0.5, 0.0)
    m.x, m.y = sp.ndarray(sp.f32, (5,), needs_dual=True), sp.ndarray(sp.f32, (5,), needs_dual=True)
    m.x.from_numpy(x.astype(np.float32))
    seed = rand(rng, 5)
    with sp.FwdMode(loss=m.y, param=m.x, seed=list(seed)):
        m.forward()
    assert_close(m.y.dual.to_numpy(), seed * (0.5 * np.cos(0.5 * x) + w), 1e-4, "y.dual")


@sp.data_oriented
class Scaler:
    def __init__(self, values):
        self.values = sp.from_numpy(values)

    @staticmethod
    @sp.func
    def twice(v):   # a @staticmethod func: called without self
        return 2.0 * v

    @sp.kernel
    def scale(self, out: sp.Array, offset: float):
        for i in out:
            out[i] = self.twice(self.values[i]) + offset


def test_static_funcs_keywords_and_calls_through_the_class(rng):
    values = rand(rng, 4)
    s, out = Scaler(values), sp.ndarray(sp.f32, (4,))
    s.scale(out=out, offset=0.5)
    assert_close(out.to_numpy(), 2.0 * values.astype(np.float64) + 0.5, 1e-6, "out")
    Scaler.scale(s, out, -1.0)   # the class's kernel, `self` passed as Python passes it
    assert_close(out.to_numpy(), 2.0 * values.astype(np.float64) - 1.0, 1e-6, "out")


# ---- errors ---------------------------------------------------------------------------------------------
@sp.data_oriented
class Broken:
    def __init__(self):
        self.x = sp.ndarray(sp.f32, (3,))
        self.k = 2.0
        self.names = ["a", "b"]

    @sp.kernel
    def missing(self):
        for i in self.x:
            self.x[i] = self.nothing

    @sp.kernel
    def reads_strings(self):
        for i in self.x:
            self.x[i] = self.names[0]

    @sp.kernel
    def launches(self):
        for i in self.x:
            self.missing()


def test_an_unknown_attribute_is_named():
    with pytest.raises(sp.CompileError, match=r"'self' \(Broken\) has no attribute 'nothing'"):
        Broken().missing()


def test_an_attribute_of_strings_is_named():
    with pytest.raises(sp.CompileError, match=r"'self.names' holds a list of strings"):
        Broken().reads_strings()


def test_a_kernel_method_called_in_a_kernel_is_refused():
    with pytest.raises(sp.CompileError, match=r"'self.missing' is a kernel"):
        Broken().launches()


def test_the_tape_differentiates_the_launches_as_they_ran(rng):
    m, x, w = make(rng, 4, 1.0, 0.0)
    with sp.Tape(m.loss):
        m.run()
        m.k = 2.0   # after the launches: their gradient still uses the value they read
    y = forward_ref(x, w, 1.0, 0.0)
    assert_close(m.x.grad.to_numpy(), 2 * y * (np.cos(x) + w), 1e-4, "x.grad")


def test_data_oriented_takes_a_class():
    with pytest.raises(sp.ArgumentError, match="decorates a class"):
        sp.data_oriented(lambda: None)

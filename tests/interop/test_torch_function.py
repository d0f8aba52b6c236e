"""@sp.torch_function: gradients through whole spvad programs (several kernels, double buffering, a host
write, several outputs, non-tensor arguments) against the same program written in plain torch float64,
torch.autograd.gradcheck (central differences, float64), torch.optim, nn.Module with torch layers."""
import gc

import numpy as np
import pytest
import torch

import spvad as sp
from spvad import recording, runtime

from interop_programs import random_problem, rollout, rollout_reference

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

STEPS = 6


@sp.torch_function
def simulate(p, x0, v0, target, steps, scale=1.0):
    return rollout(p, x0, v0, target, steps, scale)


@pytest.fixture
def torch_rng():
    return torch.Generator().manual_seed(1234)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def test_gradients_of_a_program_with_two_outputs_match_torch(torch_rng):
    p, x0, v0, target = random_problem(torch_rng)
    w = torch.rand(x0.shape, generator=torch_rng, dtype=torch.float64) + 0.5   # weighs the 2nd output
    a = leaves(p, x0, v0)
    loss, x = simulate(a[0], a[1], a[2], target, STEPS, scale=0.5)
    assert loss.dtype == torch.float64 and loss.shape == () and x.shape == x0.shape
    (3.0 * loss + (w * x).sum()).backward()
    b = leaves(p, x0, v0)
    ref_loss, ref_x = rollout_reference(b[0], b[1], b[2], target, STEPS, scale=0.5)
    (3.0 * ref_loss + (w * ref_x).sum()).backward()
    assert torch.allclose(loss, ref_loss.detach(), rtol=1e-12) and torch.allclose(x, ref_x.detach(), rtol=1e-12)
    for mine, ref in zip(a, b):
        assert ref.grad.abs().min() > 1e-6   # a test on vanishing gradients could not fail
        torch.testing.assert_close(mine.grad, ref.grad, rtol=1e-10, atol=1e-12)


def test_gradcheck_in_float64(torch_rng):
    p, x0, v0, target = random_problem(torch_rng, n=5)
    assert torch.autograd.gradcheck(lambda p, x0, v0: simulate(p, x0, v0, target, 3), leaves(p, x0, v0))


def test_float32_tensors_give_float32_gradients(torch_rng):
    p, x0, v0, target = random_problem(torch_rng, dtype=torch.float32)
    a = leaves(p, x0, v0)
    simulate(*a, target, STEPS)[0].backward()
    b = leaves(*(t.double() for t in (p, x0, v0)))
    rollout_reference(*b, target.double(), STEPS)[0].backward()
    for mine, ref in zip(a, b):
        assert mine.grad.dtype == torch.float32
        torch.testing.assert_close(mine.grad.double(), ref.grad, rtol=2e-4, atol=1e-5)


def test_backward_runs_as_often_as_torch_asks(torch_rng):
    """retain_graph: the recording is kept for a second backward (gradcheck relies on this too)."""
    p, x0, v0, target = random_problem(torch_rng)
    a = leaves(p)
    loss, _ = simulate(a[0], x0, v0, target, STEPS)
    loss.backward(retain_graph=True)
    first = a[0].grad.clone()
    loss.backward()
    torch.testing.assert_close(a[0].grad, 2 * first, rtol=1e-12, atol=0)


def test_calls_before_backward_keep_their_own_recordings(torch_rng):
    """Two calls, then one backward through both: each call's arrays are its own."""
    p, x0, v0, target = random_problem(torch_rng)
    a = leaves(p)
    total = simulate(a[0], x0, v0, target, STEPS)[0] + simulate(a[0], v0, x0, target, STEPS + 1)[0]
    total.backward()
    b = leaves(p)
    (rollout_reference(b[0], x0, v0, target, STEPS)[0] +
     rollout_reference(b[0], v0, x0, target, STEPS + 1)[0]).backward()
    torch.testing.assert_close(a[0].grad, b[0].grad, rtol=1e-10, atol=1e-12)


def test_an_ndarray_argument_is_passed_as_it_is(torch_rng):
    """A non-tensor ndarray argument is used as is (here the parameters): it gets no torch gradient."""
    p, x0, v0, target = random_problem(torch_rng)
    p_nd = sp.from_torch(p)
    a = leaves(x0)
    loss, _ = simulate(p_nd, a[0], v0, target, STEPS)
    loss.backward()
    b = leaves(x0)
    rollout_reference(p, b[0], v0, target, STEPS)[0].backward()
    torch.testing.assert_close(a[0].grad, b[0].grad, rtol=1e-10, atol=1e-12)


def test_training_with_torch_optim_recovers_the_parameters(torch_rng):
    true_p, x0, v0, _ = random_problem(torch_rng, n=32)
    target = rollout_reference(true_p, x0, v0, torch.zeros_like(x0), 12)[1]
    p = torch.nn.Parameter(torch.tensor([1.2, 0.2], dtype=torch.float64))
    opt = torch.optim.Adam([p], lr=0.05)
    for _ in range(150):
        opt.zero_grad()
        loss, _ = simulate(p, x0, v0, target, 12)
        loss.backward()
        opt.step()
    assert loss.item() < 1e-6
    torch.testing.assert_close(p.detach(), true_p, rtol=2e-2, atol=2e-2)


class Controller(torch.nn.Module):
    """network -> spvad simulation -> loss: a linear layer maps features to the spring parameters."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 2, dtype=torch.float64)

    def params(self, features):
        return torch.nn.functional.softplus(self.layer(features))

    def forward(self, features, x0, v0, target):
        return simulate(self.params(features), x0, v0, target, STEPS)[0]


def test_inside_an_nn_module_next_to_torch_layers(torch_rng):
    _, x0, v0, target = random_problem(torch_rng)
    features = torch.rand(3, generator=torch_rng, dtype=torch.float64)
    model = Controller()
    model(features, x0, v0, target).backward()
    grads = [q.grad.clone() for q in model.parameters()]
    model.zero_grad()
    rollout_reference(model.params(features), x0, v0, target, STEPS)[0].backward()
    for mine, q in zip(grads, model.parameters()):
        torch.testing.assert_close(mine, q.grad, rtol=1e-10, atol=1e-12)


@sp.torch_function
def scaled_and_count(x, factor):
    y = sp.ndarray(x.dtype, x.shape)
    scale(x, y, factor)
    n = sp.from_numpy(np.array([x.shape[0]], dtype=np.int32))
    return y, x, n   # a new array, an input as it is, an integer output


@sp.kernel
def scale(x: sp.Array, y: sp.Array, factor: sp.f32):
    for i in range(x.shape[0]):
        y[i] = factor * x[i] * x[i]


def test_an_input_returned_and_an_integer_output(torch_rng):
    x = torch.rand(5, generator=torch_rng, dtype=torch.float64).requires_grad_()
    y, same, n = scaled_and_count(x, factor=1.5)
    assert not n.requires_grad and n.dtype == torch.int32 and n.item() == 5
    (y.sum() + (2 * same).sum()).backward()
    torch.testing.assert_close(x.grad, 3.0 * x.detach() + 2.0, rtol=1e-12, atol=0)


def test_no_recording_when_no_gradient_is_needed(torch_rng):
    p, x0, v0, target = random_problem(torch_rng)
    with torch.no_grad():
        loss, _ = simulate(p.requires_grad_(), x0, v0, target, STEPS)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, rollout_reference(p.detach(), x0, v0, target, STEPS)[0], rtol=1e-12, atol=0)


def test_an_undifferentiated_call_frees_what_its_tape_kept(torch_rng):
    """The double-buffered rollout makes its Tape keep copies; a call never differentiated gives them back (to
    the runtime's pool of spare buffers, which frees what passes its limit)."""
    p, x0, v0, target = random_problem(torch_rng)
    spare = runtime.get().spare_buffers
    outputs = simulate(leaves(p)[0], x0, v0, target, STEPS)
    tape = outputs[0].grad_fn.call.recorded.tape   # the grad_fn is the autograd ctx
    assert tape.checkpoint_bytes > 0
    kept = [copy.buffer for parts in tape.checkpoints.kept.values() for copy, _ in parts]
    assert kept
    del outputs, tape
    gc.collect()
    pooled = {id(b) for bufs in spare.free.values() for b in bufs}
    assert all(id(b) in pooled or b.released for b in kept)


@sp.torch_function
def returns_a_number(x):
    return 3.0


@sp.torch_function
def returns_a_tensor(x):
    return torch.ones(2)


def test_a_wrong_return_value_names_the_function():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(sp.SpvadError, match="returns_a_number must return an sp.ndarray.*got float"):
        returns_a_number(x)
    with pytest.raises(sp.SpvadError, match="returns_a_tensor must return an sp.ndarray.*got Tensor"):
        returns_a_tensor(x)
    assert recording.current() is None


def test_second_derivatives_are_refused_not_dropped(torch_rng):
    """create_graph=True (a gradient penalty) would give a gradient without its own derivative, so a penalty
    built from it would silently lose spvad's part: refused by name. The plain gradient stays right."""
    x = torch.rand(5, generator=torch_rng, dtype=torch.float64).requires_grad_()
    y, _, _ = scaled_and_count(x, factor=1.5)
    with pytest.raises(sp.AutodiffRuleError, match="scaled_and_count: second derivatives"):
        torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(sp.AutodiffRuleError, match="second derivatives"):
        torch.autograd.gradgradcheck(lambda t: scaled_and_count(t, factor=1.5)[0], (x,))
    g, = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, 3.0 * x.detach(), rtol=1e-12, atol=0)


def test_a_call_inside_an_sp_tape_is_refused(torch_rng):
    p, x0, v0, target = random_problem(torch_rng)
    loss = sp.ndarray(sp.f64, (), needs_grad=True)
    with pytest.raises(sp.ArgumentError, match="called inside an sp.Tape"):
        with sp.Tape(loss):
            simulate(p, x0, v0, target, STEPS)


def test_a_bad_tensor_is_refused_before_anything_is_allocated(torch_rng, no_ndarray_made):
    """The second tensor is complex: refused before any ndarray is made or any kernel launched."""
    p, x0, v0, target = random_problem(torch_rng)
    with pytest.raises(sp.ArgumentError, match="argument 'x0'.*complex128"):
        simulate(p, x0.to(torch.complex128), v0, target, STEPS)


@sp.kernel
def square_in_place(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i] + 1.0


@sp.kernel
def weighted_total(x: sp.Array, w: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[None] += x[i] * w[i]


@sp.torch_function
def squared_twice(x, w):
    square_in_place(x)
    square_in_place(x)
    out = sp.ndarray(x.dtype, ())
    weighted_total(x, w, out)
    return out, x   # x as the launches left it


def test_an_input_updated_in_place_and_returned(torch_rng):
    x = (torch.rand(5, generator=torch_rng, dtype=torch.float64) - 0.5).requires_grad_()
    w = torch.rand(5, generator=torch_rng, dtype=torch.float64)
    out, y = squared_twice(x, w)
    (out + 2 * y.sum()).backward()
    a = x.detach()
    b = a * a + 1
    torch.testing.assert_close(y, b * b + 1, rtol=1e-12, atol=0)
    torch.testing.assert_close(x.grad, (w + 2) * 2 * b * 2 * a, rtol=1e-12, atol=0)


WEIGHTS = None   # a module-level array the kernel reads (made by the test, in the test's runtime)


@sp.kernel
def times_weights(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[None] += x[i] * x[i] * WEIGHTS[i]


@sp.torch_function
def weighted_squares(x):
    out = sp.ndarray(x.dtype, ())
    times_weights(x, out)
    return out


def test_a_global_array_changed_before_backward_is_an_error():
    """The gradient reads WEIGHTS as the call saw them; a later write outside the call is named, never used."""
    global WEIGHTS
    WEIGHTS = sp.from_numpy(np.array([0.5, -1.5, 2.0]))
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    loss = weighted_squares(x)
    WEIGHTS.from_numpy(np.array([9.0, 9.0, 9.0]))
    try:
        with pytest.raises(sp.AutodiffRuleError, match="WEIGHTS"):
            loss.backward()
    finally:
        WEIGHTS.from_numpy(np.array([0.5, -1.5, 2.0]))
    weighted_squares(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach() * torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64))

"""A Tape that follows its plan to the end runs its backward pass as the plan's batch (planned_backward.py):
recorded after the first followed pass, run by later ones while every launch repeats it exactly; anything
else runs launch by launch. Every iteration's gradients against float64 central differences."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.tape.planned_backward import DROPS_KEPT
from spvad.launch.device_task import DeviceTask
from test_tape_plans import central

pytestmark = pytest.mark.backends

N, T = 8, 12


@sp.kernel
def advance(x: sp.Array, y: sp.Array, w: sp.Array, s: sp.f32, t: sp.i32):
    for i in range(x.shape[1]):
        y[t + 1, i] = x[t, i] + s * sp.sin(w[i] * x[t, i])


@sp.kernel
def inverse_sum(x: sp.Array, loss: sp.Array, s: sp.f32, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i] / s


def model(x0, w, scales, last):
    """float64: x += s sin(w x) per step, then sum(x^2) / last."""
    x = x0.astype(np.float64)
    for s in scales:
        x = x + s * np.sin(w * x)
    return np.sum(x * x) / last


@pytest.fixture
def reports(monkeypatch):
    """How many launches had their error flags (debug: out-of-bounds accesses) looked at after the sync."""
    seen = [0]
    after_launch = DeviceTask.after_launch

    def spy(self, spec):
        seen[0] += self.reports
        return after_launch(self, spec)
    monkeypatch.setattr(DeviceTask, "after_launch", spy)
    return seen


@pytest.fixture
def batches(monkeypatch):
    """What each Tape's backward did: True (the batch ran), False (a stale batch), None (launch by launch)."""
    dev = runtime.get().device
    seen = []
    run_batch = type(dev).run_batch

    def spy(self, batch):
        seen.append(run_batch(self, batch))
        return seen[-1]
    monkeypatch.setattr(type(dev), "run_batch", spy)
    return seen


class Alternating:
    """The steps' rows in two arrays used in turn by one kernel (step t reads one, writes row t + 1 of the
    other), a scalar per step: the kernel's gradient binds other arrays at every other launch."""

    def __init__(self, rng):
        self.x0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.w_np = rng.uniform(0.5, 1.5, N).astype(np.float32)
        self.a, self.b = (sp.ndarray(sp.f32, (T + 1, N), needs_grad=True) for _ in range(2))
        self.w = sp.from_numpy(self.w_np, needs_grad=True)
        self.loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def run(self, scales, last=2.0, accumulated=1):
        """One Tape; checks the loss and the gradients of x0 and w against float64 (`accumulated` Tapes' worth
        of them: the Tapes after the first clear no gradient)."""
        first = np.zeros((T + 1, N), np.float32)
        first[0] = self.x0
        self.a.from_numpy(first)
        with sp.Tape(self.loss, clear_gradients=accumulated == 1):
            for t, s in enumerate(scales):
                advance(*((self.a, self.b) if t % 2 == 0 else (self.b, self.a)), self.w, s, t)
            inverse_sum(self.a if len(scales) % 2 == 0 else self.b, self.loss, last, len(scales))
        np.testing.assert_allclose(self.loss[None], model(self.x0, self.w_np, scales, last), rtol=1e-4)
        dx = central(lambda p: model(p, self.w_np, scales, last), self.x0)
        dw = central(lambda p: model(self.x0, p, scales, last), self.w_np)
        dx, dw = accumulated * dx, accumulated * dw
        np.testing.assert_allclose(self.a.grad.to_numpy()[0], dx, rtol=2e-3, atol=1e-4 * np.abs(dx).max())
        np.testing.assert_allclose(self.w.grad.to_numpy(), dw, rtol=2e-3, atol=1e-4 * np.abs(dw).max())


def test_repeated_tapes_run_the_plans_batch(rng, batches, reports, request):
    """A training loop (w updated by the host between Tapes): the 2nd Tape follows the plan launch by launch
    and records the batch, the 3rd and later run it, with every launch's error flags looked at as before (on
    the debug runtime: out-of-bounds checks); every gradient right."""
    backend = request.node.callspec.params["backend"]
    p = Alternating(rng)
    scales = [float(s) for s in rng.uniform(0.05, 0.2, T)]
    flagged = []
    for it in range(5):
        before, reports[0] = len(batches), 0
        p.run(scales)
        assert batches[before:] == ([True] if it >= 2 and backend != "interp" else []), it
        flagged.append(reports[0])
        p.w_np = (p.w_np - 0.1 * p.w.grad.to_numpy()).astype(np.float32)
        p.w.from_numpy(p.w_np)
    assert len(set(flagged)) == 1 and (flagged[0] > 0) == (backend == "debug"), flagged


def test_a_new_grad_companion_is_another_launch(rng, batches, request):
    """w.grad replaced by another ndarray between Tapes: the batch (bound to the old one) is not run, and the
    gradient lands in the new one."""
    backend = request.node.callspec.params["backend"]
    p = Alternating(rng)
    scales = [float(s) for s in rng.uniform(0.05, 0.2, T)]
    for it in range(5):
        if it == 3:
            p.w.grad = sp.ndarray(sp.f32, (N,))
        before = len(batches)
        p.run(scales)
        if backend != "interp":   # the 4th drops the batch bound to the old one and records another
            assert batches[before:] == ([True] if it in (2, 4) else []), it


def test_gradients_kept_or_another_loss_start_another_batch(rng, batches, request):
    """The batch starts with the gradient clears and the loss's seed: a Tape with clear_gradients=False (the
    gradients add up) or with another loss array does not run the one recorded before it."""
    backend = request.node.callspec.params["backend"]
    p = Alternating(rng)
    scales = [float(s) for s in rng.uniform(0.05, 0.2, T)]
    for it, accumulated in enumerate((1, 1, 1, 2, 3, 4)):
        before = len(batches)
        p.run(scales, accumulated=accumulated)
        if backend != "interp":   # the 4th's starts differ from the batch's: it records another, run after
            assert batches[before:] == ([True] if it in (2, 4, 5) else []), it
    p.loss, other = sp.ndarray(sp.f32, (), needs_grad=True), p.loss
    for it in range(3):
        p.run(scales)
    p.loss = other
    p.run(scales)


def test_a_signed_zero_scalar_is_another_launch(rng, batches, request):
    """-0.0 == 0.0 for the plan, but the push constants differ: the batch recorded with 1/+0 is not run for
    1/-0 (the gradient's sign would flip silently), and the pass runs launch by launch."""
    backend = request.node.callspec.params["backend"]
    x = sp.from_numpy(rng.uniform(0.5, 1.5, N).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    @sp.kernel
    def over(x: sp.Array, y: sp.Array, s: sp.f32):
        for i in range(x.shape[0]):
            y[i] = x[i] * (1.0 / s)

    @sp.kernel
    def total(y: sp.Array, loss: sp.Array):
        for i in range(y.shape[0]):
            loss[None] += y[i]

    for s, sign in ((0.0, 1), (0.0, 1), (0.0, 1), (-0.0, -1), (0.0, 1)):
        with sp.Tape(loss):
            over(x, y, s)
            total(y, loss)
        assert np.all(x.grad.to_numpy() == sign * np.inf), (s, x.grad.to_numpy())
    if backend != "interp":   # the 3rd ran the batch; the 4th found it wrong for itself, the 5th likewise
        assert batches == [True], batches


def test_a_plan_whose_batches_keep_changing_stops_recording(rng, batches, monkeypatch, request):
    """Two losses in turn over one program: every pass drops the batch the one before recorded; after
    DROPS_KEPT of them the plan records none (each recording costs about a pass). Gradients right throughout."""
    backend = request.node.callspec.params["backend"]
    records = []
    record_batch = type(runtime.get().device).record_batch
    monkeypatch.setattr(type(runtime.get().device), "record_batch",
                        lambda self, *a: records.append(1) or record_batch(self, *a))
    p = Alternating(rng)
    scales = [float(s) for s in rng.uniform(0.05, 0.2, T)]
    for it in range(8):
        p.run(scales, accumulated=2 if it and it % 2 == 0 else 1)   # clear_gradients=False every other
    if backend != "interp":
        assert batches == [] and len(records) == DROPS_KEPT, (batches, records)


def test_a_batch_whose_buffer_was_freed_is_not_run(rng, request):
    """Device level: a batch runs as often as asked, and not once a buffer it binds is freed."""
    backend = request.node.callspec.params["backend"]
    if backend != "vulkan":
        pytest.skip("a Vulkan device's batches")
    x = sp.from_numpy(rng.uniform(-1.0, 1.0, (2, N)).astype(np.float32))
    y = sp.ndarray(sp.f32, (2, N))
    w = sp.from_numpy(rng.uniform(0.5, 1.5, N).astype(np.float32))
    advance(x, y, w, 0.5, 0)
    sp.sync()
    rt = runtime.get()
    (record,) = advance._replay.live
    pipeline, buffers, push, groups = record.recorded
    batch = rt.device.record_batch([(pipeline, buffers, push, groups), (pipeline, buffers, push, groups)])
    y.fill(0.0)
    assert rt.device.run_batch(batch)
    sp.sync()
    x0 = x.to_numpy()[0]
    np.testing.assert_allclose(y.to_numpy()[1], x0 + 0.5 * np.sin(w.to_numpy() * x0), rtol=1e-6)
    del y
    assert not rt.device.run_batch(batch)
    batch.release()
    sp.sync()

"""A Python signal handler that calls spvad while the main thread is inside spvad (a launch, a sync, a Tape's
backward) gets sp.ReentryError and changes nothing; between spvad's calls it works. A storm of such handlers
during Tapes never corrupts a gradient."""
import signal

import numpy as np
import pytest

import spvad as sp
from spvad import runtime

N, STEPS, DT = 128, 16, 0.05


@sp.kernel
def step(x: sp.Array, v: sp.Array, y: sp.Array, dt: float):
    for i in range(x.shape[0]):
        y[i] = x[i] + dt * v[i] * sp.sin(x[i])


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * y[i]


def reference(xs, vs):
    """d loss / d x0 and d loss / d v of the rollout, by forward differentiation in float64."""
    x, v = xs.astype(np.float64), vs.astype(np.float64)
    dx, dv = np.ones_like(x), np.zeros_like(x)
    for _ in range(STEPS):
        dv = dv + DT * (np.sin(x) + v * np.cos(x) * dv)
        dx = dx * (1 + DT * v * np.cos(x))
        x = x + DT * v * np.sin(x)
    return 2 * x * dx, 2 * x * dv


@pytest.fixture
def alarm():
    """Installs a SIGALRM handler for the test; the timer and the old handler are back afterwards."""
    old = signal.getsignal(signal.SIGALRM)
    yield lambda handler: signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    signal.signal(signal.SIGALRM, old)


def test_a_signal_storm_during_tapes_never_corrupts_a_gradient(rng, alarm):
    probe = sp.from_numpy(np.arange(4, dtype=np.float32))
    seen = {"read": 0, "refused": 0, "wrong": []}

    def handler(signum, frame):
        try:
            values = probe.to_numpy()
            seen["read"] += 1
            if not np.array_equal(values, np.arange(4)):
                seen["wrong"].append(values)
        except sp.ReentryError:
            seen["refused"] += 1

    alarm(handler)
    signal.setitimer(signal.ITIMER_REAL, 0.003, 0.003)
    for _ in range(60):
        xs, vs = rng.uniform(-1, 1, N).astype(np.float32), rng.uniform(-1, 1, N).astype(np.float32)
        xa = [sp.from_numpy(xs, needs_grad=True)] + [sp.ndarray(sp.f32, (N,), needs_grad=True)
                                                     for _ in range(STEPS)]
        v, loss = sp.from_numpy(vs, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
        with sp.Tape(loss=loss):
            for s in range(STEPS):
                step(xa[s], v, xa[s + 1], DT)
            total(xa[STEPS], loss)
        want_x, want_v = reference(xs, vs)
        np.testing.assert_allclose(xa[0].grad.to_numpy(), want_x, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(v.grad.to_numpy(), want_v, rtol=1e-3, atol=1e-4)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    assert not seen["wrong"]
    assert seen["read"] + seen["refused"] > 20, seen   # the storm did reach the handler
    np.testing.assert_array_equal(probe.to_numpy(), np.arange(4))   # the runtime works on


def test_a_handler_inside_spvad_is_refused_and_outside_it_works(alarm):
    """The handler is made to run while spvad holds its lock (as a signal arriving mid-launch would)."""
    probe = sp.from_numpy(np.arange(3, dtype=np.float32))
    got = []

    def handler(signum, frame):
        try:
            got.append(probe.to_numpy())
        except sp.ReentryError as e:
            got.append(e)

    alarm(handler)
    with runtime.LOCK:   # inside spvad: a launch holds this lock
        signal.raise_signal(signal.SIGALRM)   # (the handler runs at once, in this thread)
    signal.raise_signal(signal.SIGALRM)       # between spvad's calls
    assert isinstance(got[0], sp.ReentryError) and "signal handler" in str(got[0])
    np.testing.assert_array_equal(got[1], np.arange(3))


def test_nested_calls_that_are_not_handlers_still_nest(rng):
    """A Tape's backward launches and a custom gradient's user code run inside the lock: not refused."""
    x = sp.from_numpy(rng.uniform(-1, 1, N).astype(np.float32), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    @sp.grad_replaced
    def squared_sum(a, out):
        total(a, out)

    @sp.grad_for(squared_sum)
    def squared_sum_grad(a, out):
        a.grad.from_numpy(2.0 * out.grad.to_numpy() * a.to_numpy())   # host access inside the backward

    with runtime.LOCK:
        with sp.Tape(loss=loss):
            squared_sum(x, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x.to_numpy().astype(np.float64), rtol=1e-6)

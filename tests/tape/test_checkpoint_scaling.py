"""Recording a launch costs the same at the 10,000th launch of a Tape as at the 10th (checkpoints.py indexes
what gradients read by row). A time loop of three kernels per step touches what made recording grow with the
Tape's length: rows of a (T + 1, n) state read by every step's gradient and never overwritten, a column per
step of an (n, T) array, a read-only table read a row at a time, and an array rewritten in place every step
(a copy of one row per step). Work is compared two ways: Python lines executed per launch (exact, unaffected by load) and
this thread's CPU time per launch (with a generous margin). Then the gradients against float64 differences."""
import sys
import time

import numpy as np

import spvad as sp
from tests.conftest import rand

N, DT = 8, 0.05
LAUNCHES, BLOCK = 10_000, 1_000   # launches recorded; the first and last BLOCK are compared


@sp.kernel
def step(x: sp.Array, h: sp.Array, goal: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        a = sp.tanh(x[t, i] * w[i] + goal[t])
        h[i, t] = a                            # time on the second axis
        x[t + 1, i] = x[t, i] + DT * a


@sp.kernel
def relax(x: sp.Array, h: sp.Array, s: sp.Array, t: sp.i32):
    for i in range(s.shape[1]):
        s[0, i] = sp.sin(s[0, i]) + x[t + 1, i] * h[i, t]   # in place: every step keeps row 0 of s


@sp.kernel
def accumulate(s: sp.Array, loss: sp.Array):
    for i in range(s.shape[1]):
        loss[None] += s[0, i] * s[0, i]


def record(steps, inputs, on_launch=None):
    """Record `steps` steps (3 launches each) and run the gradients; on_launch(k) before launch number k."""
    x0 = np.zeros((steps + 1, N), np.float32)
    x0[0] = inputs["x"]
    x = sp.from_numpy(x0, needs_grad=True)
    h = sp.ndarray(sp.f32, (N, steps), needs_grad=True)
    goal = sp.from_numpy(inputs["goal"][:steps])
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    s = sp.from_numpy(np.stack([inputs["s"], inputs["w"]]), needs_grad=True)   # row 1: never written
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    hook = on_launch or (lambda k: None)
    with sp.Tape(loss) as tape:
        for t in range(steps):
            hook(3 * t)
            step(x, h, goal, w, t)
            hook(3 * t + 1)
            relax(x, h, s, t)
            hook(3 * t + 2)
            accumulate(s, loss)
        hook(3 * steps)
    return tape, loss[None], {"x": x.grad.to_numpy()[0], "w": w.grad.to_numpy(), "s": s.grad.to_numpy()[0]}


def loss_np(p, steps):
    x, s, total = p["x"], p["s"], 0.0
    for t in range(steps):
        a = np.tanh(x * p["w"] + p["goal"][t])
        x = x + DT * a
        s = np.sin(s) + x * a
        total += np.sum(s * s)
    return total


class LineCounter:
    """Python lines executed (sys.settrace 'line' events) while on; counts per block of launches."""

    def __init__(self, blocks):
        self.blocks, self.lines, self.on = blocks, {}, None

    def trace(self, frame, event, arg):
        if event == "line":
            self.lines[self.on] += 1
        return self.trace

    def __call__(self, k):
        block = next((b for b, (lo, hi) in self.blocks.items() if lo <= k < hi), None)
        if block != self.on:
            sys.settrace(None)
            self.on = block
            if block is not None:
                self.lines.setdefault(block, 0)
                sys.settrace(self.trace)


class CpuTimer:
    """This thread's CPU time per block of launches (the device's threads and other processes not counted)."""

    def __init__(self, blocks):
        self.blocks, self.seconds, self.started = blocks, {}, {}

    def __call__(self, k):
        now = time.thread_time()
        for b, (lo, hi) in self.blocks.items():
            if k == lo:
                self.started[b] = now
            elif k == hi:
                self.seconds[b] = now - self.started[b]


def test_recording_cost_stays_flat_along_a_long_tape(rng):
    steps = LAUNCHES // 3 + 1
    inputs = {"x": rand(rng, N), "w": rand(rng, N), "s": rand(rng, N), "goal": rand(rng, steps, hi=0.5)}
    record(20, inputs)   # compiles every kernel and gradient
    blocks = {"first": (10, 10 + BLOCK), "last": (3 * steps - BLOCK, 3 * steps)}
    lines, cpu = LineCounter(blocks), CpuTimer(blocks)
    try:
        tape, loss, grads = record(steps, inputs, on_launch=lambda k: (lines(k), cpu(k)))
    finally:
        sys.settrace(None)
    assert lines.lines["last"] <= 1.1 * lines.lines["first"], lines.lines
    assert cpu.seconds["last"] <= 3 * cpu.seconds["first"], cpu.seconds

    # what the Tape kept: the row of s each relax reads and overwrites itself; loss and gradients in float64
    assert tape.checkpoint_bytes == steps * N * 4
    p = {k: v.astype(np.float64) for k, v in inputs.items()}
    np.testing.assert_allclose(loss, loss_np(p, steps), rtol=1e-4)
    eps = 1e-6
    for name in ("x", "w", "s"):   # central differences along a random direction
        d = rng.standard_normal(N)
        plus, minus = dict(p), dict(p)
        plus[name], minus[name] = p[name] + eps * d, p[name] - eps * d
        want = (loss_np(plus, steps) - loss_np(minus, steps)) / (2 * eps)
        np.testing.assert_allclose(grads[name] @ d, want, rtol=2e-3, err_msg=name)

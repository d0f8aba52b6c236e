"""A Tape repeating the launches of the thread's last Tape follows its plan (tape_plan.py); any difference
(other arrays, another scalar, a host write, a kernel defined again, fewer or more launches, a write the Tape
did not see) makes it record in full from there, with the gradients of the program as written. Every
iteration's gradients against float64 central differences, on Vulkan and the interpreter."""
import gc
import threading
import weakref

import numpy as np
import pytest

import spvad as sp
from spvad.tape.plan import PlannedEntry

pytestmark = pytest.mark.backends

N, T, DT = 6, 24, 0.1


def make_step(coef):
    """A time step of a damped oscillator chain driven through tanh (a kernel defined anew per call)."""
    @sp.kernel
    def step(x: sp.Array, v: sp.Array, w: sp.Array, damp: sp.f32, t: sp.i32):
        for i in range(x.shape[1]):
            vn = v[t, i] * damp + coef * sp.tanh(w[i] * x[t, i])
            v[t + 1, i] = vn
            x[t + 1, i] = x[t, i] + DT * vn
    return step


step = make_step(0.05)


@sp.kernel
def misfit(x: sp.Array, target: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        d = x[t, i] - target[i]
        loss[None] += d * d


@sp.kernel
def scale_row(x: sp.Array, r: sp.i32, s: sp.f32):
    for i in range(x.shape[1]):
        x[r, i] = x[r, i] * s


def simulate(x0, w, target, damps, coefs=None, w_from=None):
    """The float64 loss: len(damps) steps from x0 (v0 = 0); `w_from` = (step, w2): w2 from that step on."""
    x, v = x0.astype(np.float64), np.zeros(N)
    for t, damp in enumerate(damps):
        if w_from is not None and t == w_from[0]:
            w = w_from[1]
        v = v * damp + (0.05 if coefs is None else coefs[t]) * np.tanh(w * x)
        x = x + DT * v
    return np.sum((x - target) ** 2)


def central(f, p, h=1e-6):
    out = np.zeros(p.size)
    for k in range(p.size):
        hi, lo = p.astype(np.float64), p.astype(np.float64)
        hi.flat[k] += h
        lo.flat[k] -= h
        out[k] = (f(hi) - f(lo)) / (2 * h)
    return out


class Program:
    """The arrays of one simulation and its Tape; `run(...)` records one iteration and checks it."""

    def __init__(self, rng, rows=T + 1):
        self.x0 = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.target = rng.uniform(-1.0, 1.0, N).astype(np.float32)
        self.w_np = rng.uniform(0.5, 1.5, N).astype(np.float32)
        self.x = sp.ndarray(sp.f32, (rows, N), needs_grad=True)
        self.v = sp.ndarray(sp.f32, (rows, N), needs_grad=True)
        self.w = sp.from_numpy(self.w_np, needs_grad=True)
        self.tgt = sp.from_numpy(self.target)
        self.loss = sp.ndarray(sp.f32, (), needs_grad=True)
        self.rows = rows

    def reset(self):
        first = np.zeros((self.rows, N), np.float32)
        first[0] = self.x0
        self.x.from_numpy(first)
        self.v.fill(0.0)

    def tape(self, forward):
        self.reset()
        with sp.Tape(self.loss) as tape:
            forward(self)
        return tape

    def check(self, damps, coefs=None, w_from=None):
        """loss, w.grad (of the w the first steps read, when a host write replaced it later: the written
        values are constants) and x0's gradient."""
        w_first = self.w_np if w_from is None else w_from[2]
        w_last = self.w_np if w_from is None else w_from[1]
        other = None if w_from is None else (w_from[0], w_last)
        loss = simulate(self.x0, w_first, self.target, damps, coefs, other)
        np.testing.assert_allclose(self.loss[None], loss, rtol=1e-4)
        if w_from is None:
            dw = central(lambda p: simulate(self.x0, p, self.target, damps, coefs), self.w_np)
        else:
            dw = central(lambda p: simulate(self.x0, p, self.target, damps, coefs, other), w_first)
        dx = central(lambda p: simulate(p, w_first, self.target, damps, coefs, other), self.x0)
        np.testing.assert_allclose(self.w.grad.to_numpy(), dw, rtol=2e-3, atol=1e-4 * np.abs(dw).max())
        np.testing.assert_allclose(self.x.grad.to_numpy()[0], dx, rtol=2e-3, atol=1e-4 * np.abs(dx).max())


def plain(p, steps=T, damp=0.9, loss=misfit):
    for t in range(steps):
        step(p.x, p.v, p.w, damp, t)
    loss(p.x, p.tgt, p.loss, steps)


def followed(tape):
    return all(isinstance(e, PlannedEntry) for e in tape.entries)


def in_full(tape):
    return not any(isinstance(e, PlannedEntry) for e in tape.entries)


def test_repeated_tapes_follow_the_plan_with_new_contents(rng):
    """A training loop: the same launches every iteration, w updated between them (a host write outside the
    Tape): the second and later Tapes follow the first's plan, each with the gradients of its own w."""
    p = Program(rng)
    for it in range(4):
        tape = p.tape(plain)
        assert followed(tape) == (it > 0)
        p.check([0.9] * T)
        p.w_np = (p.w_np - 0.1 * p.w.grad.to_numpy()).astype(np.float32)
        p.w.from_numpy(p.w_np)


def _other_damp(p):
    for t in range(T):
        step(p.x, p.v, p.w, 0.9 if t != T // 2 else 0.7, t)
    misfit(p.x, p.tgt, p.loss, T)


def _other_target(p):
    tgt, p.tgt = p.tgt, sp.from_numpy(p.target)   # the same values in another array
    plain(p)
    p.tgt = tgt


def _redefined(p):
    other = make_step(0.08)   # (a notebook running the kernel's cell again, with another constant)
    for t in range(T):
        (other if t >= T // 2 else step)(p.x, p.v, p.w, 0.9, t)
    misfit(p.x, p.tgt, p.loss, T)


def _host_write_of_w(p):
    for t in range(T):
        if t == T // 3:
            p.w.from_numpy(p.w_later)   # the gradient of the steps before reads the w they saw (a copy)
        step(p.x, p.v, p.w, 0.9, t)
    misfit(p.x, p.tgt, p.loss, T)


def _in_place_after(p):
    plain(p)
    scale_row(p.x, 0, 2.0)   # after the plan's launches: row 0, which step 0's gradient reads, needs a copy


def _scaled_scratch(p):
    plain(p)
    scale_row(p.scratch, 0, 2.0)


def _scaled_x_instead(p):
    plain(p)
    scale_row(p.x, 0, 2.0)   # the plan's launch, on another array: row 0 of x needs a copy


def _host_write_after(p):
    plain(p)
    p.x[0, 1] = 5.0   # likewise, by the host


CHANGES = {   # name: (forward, damps, coefs)
    "another scalar": (_other_damp, [0.9 if t != T // 2 else 0.7 for t in range(T)], None),
    "another array": (_other_target, [0.9] * T, None),
    "a kernel defined again": (_redefined, [0.9] * T, [0.05 if t < T // 2 else 0.08 for t in range(T)]),
    "fewer launches": (lambda p: plain(p, T - 5), [0.9] * (T - 5), None),
    "a host write of an input": (_host_write_of_w, [0.9] * T, None),
    "an in-place write after": (_in_place_after, [0.9] * T, None),
    "a host write after": (_host_write_after, [0.9] * T, None),
    "the same launch on another array after": (_scaled_x_instead, [0.9] * T, None),
}
PLAIN = {"the same launch on another array after": _scaled_scratch}   # the Tapes before, when not plain()


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_tape_records_in_full_and_stays_right(rng, change):
    """Two Tapes make and follow a plan; a third differs (at its middle, or after all the plan's launches):
    it records in full from the start (what it followed is worked out again) with the right gradients, and
    the plain Tapes after it are right too, whichever plan they find."""
    p = Program(rng)
    p.w_later = rng.uniform(0.5, 1.5, N).astype(np.float32)
    p.scratch = sp.from_numpy(rng.uniform(0.5, 1.5, (2, N)).astype(np.float32))
    forward, damps, coefs = CHANGES[change]
    for it in range(2):
        assert followed(p.tape(PLAIN.get(change, plain))) == (it > 0)
        p.check([0.9] * T)
    tape = p.tape(forward)
    assert in_full(tape)
    if change == "a host write of an input":
        p.check(damps, coefs, w_from=(T // 3, p.w_later, p.w_np))
        p.w.from_numpy(p.w_np)
    else:
        p.check(damps, coefs)
    if change.endswith("after"):
        assert tape.checkpoint_bytes == N * 4   # row 0 of x, and only that
    for _ in range(3):
        p.tape(plain)
        p.check([0.9] * T)


def test_more_launches_than_the_plan(rng):
    """A Tape that goes on after the plan's last launch."""
    p = Program(rng, rows=T + 6)
    p.tape(lambda q: plain(q, T))
    tape = p.tape(lambda q: plain(q, T + 5))
    assert in_full(tape)
    p.check([0.9] * (T + 5))


def test_other_companions_are_other_launches(rng):
    """An input created without .grad in one iteration and with it in the next: its gradient appears."""
    p = Program(rng)
    w_plain = sp.from_numpy(p.w_np)
    for w, expect in ((w_plain, False), (w_plain, False), (p.w, True), (p.w, True)):
        with_w = w

        def forward(q):
            for t in range(T):
                step(q.x, q.v, with_w, 0.9, t)
            misfit(q.x, q.tgt, q.loss, T)
        p.tape(forward)
        assert (w.grad is not None) == expect
    p.check([0.9] * T)


def with_a_plan(rng):
    """A Program whose plain Tape ran twice: the thread's plan is its."""
    p = Program(rng)
    p.tape(plain)
    p.tape(plain)
    return p


def test_a_write_the_tape_did_not_see_is_an_error_while_following(rng):
    """Another thread rewrites row 0 in the middle of a Tape that follows its plan: the versions differ from
    the plan's, so the Tape records in full and refuses, as without a plan."""
    p = with_a_plan(rng)

    def forward(q):
        for t in range(T):
            step(q.x, q.v, q.w, 0.9, t)
            if t == 3:
                other = threading.Thread(target=lambda: scale_row(q.x, 0, 2.0))   # not recorded
                other.start()
                other.join()
        misfit(q.x, q.tgt, q.loss, T)
    with pytest.raises(sp.AutodiffRuleError, match="did not record"):
        p.tape(forward)
    p.tape(plain)
    p.check([0.9] * T)


@sp.kernel
def spring(x: sp.Array, f: sp.Array, k: sp.Array, t: sp.i32):
    for i in range(x.shape[1] - 1):
        d = x[t, i + 1] - x[t, i] - 1.0
        f[t, i] += k[i] * d
        f[t, i + 1] -= k[i] * d


@sp.kernel
def integrate(x: sp.Array, v: sp.Array, f: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        v[t + 1, i] = 0.98 * v[t, i] + 0.01 * f[t, i]
        x[t + 1, i] = x[t, i] + 0.01 * v[t + 1, i]


@sp.kernel
def spread(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i] * (i + 1)


def chain_np(x0, k, steps):
    x, v = x0.astype(np.float64), np.zeros_like(x0, np.float64)
    for _ in range(steps):
        d = x[1:] - x[:-1] - 1.0
        f = np.zeros_like(x)
        f[:-1] += k * d
        f[1:] -= k * d
        v = 0.98 * v + 0.01 * f
        x = x + 0.01 * v
    return np.sum(x * x * np.arange(1, x.size + 1))


def test_a_long_program_of_several_kernels_repeated(rng, request):
    """DiffTaichi's shape: a mass-spring chain, two kernels a step and forces accumulated into a per-step
    array (zeroed by the host before each Tape), many steps; three Tapes, the last two following the plan."""
    steps, n = (600 if request.node.callspec.params["backend"] == "vulkan" else 60), 5
    x0 = (np.arange(n) * 1.1 + rng.uniform(-0.05, 0.05, n)).astype(np.float32)
    k_np = rng.uniform(0.5, 1.5, n - 1).astype(np.float32)
    x = sp.ndarray(sp.f32, (steps + 1, n), needs_grad=True)
    v = sp.ndarray(sp.f32, (steps + 1, n), needs_grad=True)
    f = sp.ndarray(sp.f32, (steps, n), needs_grad=True)
    k = sp.from_numpy(k_np, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    start = np.zeros((steps + 1, n), np.float32)
    start[0] = x0
    for it in range(3):
        x.from_numpy(start)
        v.fill(0.0)
        f.fill(0.0)
        with sp.Tape(loss) as tape:
            for t in range(steps):
                spring(x, f, k, t)
                integrate(x, v, f, t)
            spread(x, loss, steps)
        assert followed(tape) == (it > 0)
        np.testing.assert_allclose(loss[None], chain_np(x0, k_np, steps), rtol=1e-4)
        dk = central(lambda p: chain_np(x0, p, steps), k_np, 1e-5)
        dx = central(lambda p: chain_np(p, k_np, steps), x0, 1e-5)
        np.testing.assert_allclose(k.grad.to_numpy(), dk, rtol=2e-3, atol=1e-3 * np.abs(dk).max())
        np.testing.assert_allclose(x.grad.to_numpy()[0], dx, rtol=2e-3, atol=1e-3 * np.abs(dx).max())


def test_a_plan_keeps_no_array_or_kernel_alive(rng):
    """The plan of the last Tape holds its arrays and kernels weakly: dropping them frees them (and their
    device memory) as without a plan."""
    p = Program(rng)
    local = make_step(0.05)

    def forward(q):
        for t in range(T):
            local(q.x, q.v, q.w, 0.9, t)
        misfit(q.x, q.tgt, q.loss, T)
    p.tape(forward)
    p.tape(forward)
    refs = [weakref.ref(o) for o in (p.x, p.v, local)]
    del p, local, forward
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


@sp.grad_replaced
def replaced_misfit(x, target, loss, t):
    misfit(x, target, loss, t)


@sp.grad_for(replaced_misfit)
def replaced_misfit_grad(x, target, loss, t):
    misfit.grad(x, target, loss, t)   # (the generated gradient, supplied by hand: the same numbers)


def test_a_custom_gradient_ends_following(rng):
    """The plan's launches, then a @grad_replaced call instead of the loss launch: the Tape records in full
    from there and runs the supplied gradient."""
    p = with_a_plan(rng)
    tape = p.tape(lambda q: (plain(q, T, loss=replaced_misfit)))
    assert in_full(tape)
    p.check([0.9] * T)


def test_a_validating_tape_follows_no_plan(rng):
    p = with_a_plan(rng)
    p.reset()
    with sp.Tape(p.loss, validation=True) as tape:
        plain(p)
    assert in_full(tape)
    p.check([0.9] * T)

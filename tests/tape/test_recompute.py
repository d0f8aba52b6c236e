"""`sp.Tape(loss, checkpoint_budget=N)` past its budget: it keeps snapshots of the state and recomputes the
forward between them during the backward (tape/recompute.py). The gradients must equal those of the Tape
that keeps everything (bit for bit where no float atomics add in another order) and those of a float64 numpy
re-implementation (central finite differences) on random inputs; the bytes kept stay within the budget and
`tape.recomputed_launches` counts the launches run again. Programs: a double-buffered mass-spring-like step,
and an electric-like loop with a scratch array, an in-place update, random numbers and host writes."""
import importlib.util
import os

import numpy as np
import pytest

import spvad as sp
from spvad import runtime

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

N, H, DT = 6, 8, 0.05


def rand(rng, shape, lo=0.2, hi=1.0):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


# ---- a double-buffered mass-spring-like step: each mass on a nonlinear spring of stiffness k[i] -------------
@sp.kernel
def spring_step(x: sp.Array, v: sp.Array, x_new: sp.Array, v_new: sp.Array, k: sp.Array, dt: sp.f32):
    for i in range(x.shape[0]):
        v_new[i] = v[i] - dt * (k[i] * sp.sin(x[i]) + 0.5 * sp.tanh(v[i]))   # (its gradient reads x and v)
        x_new[i] = x[i] + dt * v_new[i]


@sp.kernel
def energy(x: sp.Array, v: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i] + 0.5 * v[i] * v[i]


def springs_np(x, v, k, steps, dt):
    for _ in range(steps):
        v = v - dt * (k * np.sin(x) + 0.5 * np.tanh(v))
        x = x + dt * v
    return np.sum(x * x + 0.5 * v * v)


def run_springs(x0, v0, k0, steps, budget, dt=DT):
    x = [sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)]
    v = [sp.from_numpy(v0, needs_grad=True), sp.ndarray(sp.f32, (N,), needs_grad=True)]
    k = sp.from_numpy(k0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, checkpoint_budget=budget) as tape:
        for s in range(steps):
            spring_step(x[s % 2], v[s % 2], x[1 - s % 2], v[1 - s % 2], k, dt)
        energy(x[steps % 2], v[steps % 2], loss)
    out = {"k": k.grad.to_numpy(), "x0": x[0].grad.to_numpy(), "v0": v[0].grad.to_numpy(),
           "loss": loss.to_numpy(), "x_end": x[steps % 2].to_numpy(), "v_end": v[steps % 2].to_numpy()}
    return tape, out


def central_differences(f, args, directions, eps=1e-6):
    """d f / d args along each direction (a tuple of arrays like args), in float64."""
    args = [a.astype(np.float64) for a in args]
    return np.array([(f(*[a + eps * d for a, d in zip(args, ds)]) - f(*[a - eps * d for a, d in zip(args, ds)]))
                     / (2 * eps) for ds in directions])


def along(grads, directions):
    return np.array([sum(float(np.sum(g.astype(np.float64) * d)) for g, d in zip(grads, ds)) for ds in directions])


@pytest.mark.parametrize("steps,fraction,dt", [(120, 10, DT), (2000, 100, 0.004)])
def test_double_buffered_springs(rng, steps, fraction, dt):
    """Budgets of 1/10 and 1/100 of what the Tape keeps unbounded. A launch keeps at most the state it
    overwrites, and recomputing holds the state as the Tape found it and a few snapshots of it: 1/100 needs
    about 2,000 double-buffered steps (the interpreter, at ~20 ms a launch, runs the 1/10 case only)."""
    if runtime.get().backend == "interp" and fraction == 100:
        pytest.skip("2,000 steps and their replays take minutes on the interpreter; 1/10 runs there")
    x0, v0, k0 = rand(rng, N), rand(rng, N), rand(rng, N, 0.5, 2.0)
    full, ref = run_springs(x0, v0, k0, steps, None, dt)
    assert full.recomputed_launches == 0
    budget = full.checkpoint_bytes // fraction
    tape, got = run_springs(x0, v0, k0, steps, budget, dt)
    assert tape.recomputed_launches > 0
    assert 0 < tape.checkpoint_bytes <= budget
    for name in ref:   # no float atomic adds into one gradient: the same bits
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    directions = [tuple(rng.standard_normal(N) for _ in range(3)) for _ in range(3)]
    fd = central_differences(lambda x, v, k: springs_np(x, v, k, steps, dt), (x0, v0, k0), directions)
    np.testing.assert_allclose(along((got["x0"], got["v0"], got["k"]), directions), fd, rtol=2e-3,
                               atol=1e-4 * np.abs(fd).max())


def test_a_budget_without_room_for_one_snapshot_names_the_bytes(rng):
    x0, v0, k0 = rand(rng, N), rand(rng, N), rand(rng, N, 0.5, 2.0)
    with pytest.raises(sp.AutodiffRuleError, match=r"checkpoint_budget=92 bytes .*at least 96 bytes"):
        run_springs(x0, v0, k0, 30, 92)   # x, v (twice) as the Tape found them: 96 bytes (not the loss, which
        #                                   the Tape zeroes: a replay zeroes it again)
    full, ref = run_springs(x0, v0, k0, 30, None)   # the runtime is still usable
    np.testing.assert_array_equal(run_springs(x0, v0, k0, 30, full.checkpoint_bytes // 2)[1]["k"], ref["k"])


def test_a_budget_that_holds_everything_recomputes_nothing(rng):
    x0, v0, k0 = rand(rng, N), rand(rng, N), rand(rng, N, 0.5, 2.0)
    full, ref = run_springs(x0, v0, k0, 20, None)
    tape, got = run_springs(x0, v0, k0, 20, 4 * full.checkpoint_bytes)
    assert tape.recomputed_launches == 0 and tape.checkpoint_bytes <= 4 * full.checkpoint_bytes
    np.testing.assert_array_equal(got["k"], ref["k"])


def test_a_copy_past_the_budget_is_refused(rng):
    """A copy (a.copy_from(b)) is not run again: past the budget the Tape says so instead of a wrong number."""
    x0, v0, k0 = rand(rng, N), rand(rng, N), rand(rng, N, 0.5, 2.0)
    full, _ = run_springs(x0, v0, k0, 30, None)
    x = [sp.from_numpy(x0, needs_grad=True) for _ in range(2)]
    v = [sp.from_numpy(v0, needs_grad=True) for _ in range(2)]
    k, loss = sp.from_numpy(k0, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match=r"checkpoint_budget=.*a copy \(a.copy_from\(b\)"):
        with sp.Tape(loss, checkpoint_budget=full.checkpoint_bytes // 2):
            for s in range(30):
                spring_step(x[s % 2], v[s % 2], x[1 - s % 2], v[1 - s % 2], k, DT)
                if s == 3:
                    v[0].copy_from(v[1])
            energy(x[0], v[0], loss)


# ---- electric-like: a network sets forces (a scratch array reused), x updated in place with random kicks,
# host writes inside the Tape (a goal moved with from_numpy, x[0] reset with setitem, the scratch filled) ----------
@sp.kernel
def hidden_layer(x: sp.Array, w1: sp.Array, h: sp.Array):
    for j in range(h.shape[0]):
        a = 0.0
        for i in sp.static(range(N)):
            a += w1[j, i] * x[i]
        h[j] = sp.tanh(a)


@sp.kernel
def advance(x: sp.Array, h: sp.Array, w2: sp.Array, goal: sp.Array, loss: sp.Array, dt: sp.f32):
    for i in range(x.shape[0]):
        f = 0.0
        for j in sp.static(range(H)):
            f += w2[i, j] * h[j]
        x[i] = x[i] + dt * sp.tanh(f) + 0.1 * (sp.random() - 0.5)
        loss[None] += (x[i] - goal[i]) * (x[i] - goal[i])


@sp.kernel
def kicks(eps: sp.Array):   # the numbers advance draws: the same key, thread and call
    for i in range(eps.shape[0]):
        eps[i] = 0.1 * (sp.random() - 0.5)


def host_writes(steps):
    """When the goal moves and when x[0] is reset: four times each in a Tape (each host write's contents are
    kept, within the budget)."""
    return steps // 4 + 1, steps // 4


def electric_np(x, w1, w2, goals, resets, noise, steps):
    (goal_every, reset_every), loss, goal = host_writes(steps), 0.0, goals[0]
    for t in range(steps):
        if t % goal_every == 0:
            goal = goals[t // goal_every]
        if t % reset_every == reset_every - 1:
            x = np.concatenate([[resets[t // reset_every]], x[1:]])
        h = np.tanh(w1 @ x)
        x = x + DT * np.tanh(w2 @ h) + noise[t]
        loss += np.sum((x - goal) ** 2)
    return loss


def run_electric(x0, w10, w20, goals, resets, steps, budget, first_key):
    runtime.get().random_launches = first_key   # (both Tapes draw the same random numbers)
    x = sp.from_numpy(x0, needs_grad=True)
    h = sp.ndarray(sp.f32, (H,))   # scratch without .grad: the Tape gives it a temporary one
    w1, w2 = sp.from_numpy(w10, needs_grad=True), sp.from_numpy(w20, needs_grad=True)
    goal, loss = sp.ndarray(sp.f32, (N,)), sp.ndarray(sp.f32, (), needs_grad=True)
    goal_every, reset_every = host_writes(steps)
    with sp.Tape(loss, checkpoint_budget=budget) as tape:
        h.fill(0.5)   # (overwritten next: it changes nothing but what the Tape sees)
        for t in range(steps):
            if t % goal_every == 0:
                goal.from_numpy(goals[t // goal_every])
            if t % reset_every == reset_every - 1:
                x[0] = float(resets[t // reset_every])
            hidden_layer(x, w1, h)
            advance(x, h, w2, goal, loss, DT)
    return tape, {"w1": w1.grad.to_numpy(), "w2": w2.grad.to_numpy(), "x0": x.grad.to_numpy(),
                  "loss": loss.to_numpy(), "x_end": x.to_numpy()}


def noise_of(steps, first_key):
    """The random kicks of the Tapes' launches: a kernel drawing as advance does, from the same counter."""
    runtime.get().random_launches = first_key
    eps, out = sp.ndarray(sp.f32, (N,)), []
    for _ in range(steps):
        kicks(eps)
        out.append(eps.to_numpy().astype(np.float64))
    return np.array(out)


@pytest.mark.parametrize("steps,fraction", [(100, 10), (1500, 100)])
def test_electric_like_with_random_numbers_and_host_writes(rng, steps, fraction):
    if runtime.get().backend == "interp" and fraction == 100:
        pytest.skip("1,500 steps and their replays take minutes on the interpreter; 1/10 runs there")
    x0, w10, w20 = rand(rng, N), rand(rng, (H, N), 0.1, 0.6), rand(rng, (N, H), 0.1, 0.6)
    goals, resets = rand(rng, (5, N)), rand(rng, 5)
    first_key = runtime.get().random_launches + 1000
    full, ref = run_electric(x0, w10, w20, goals, resets, steps, None, first_key)
    budget = full.checkpoint_bytes // fraction
    tape, got = run_electric(x0, w10, w20, goals, resets, steps, budget, first_key)
    assert tape.recomputed_launches > 0
    assert 0 < tape.checkpoint_bytes <= budget
    for name in ref:   # (w1.grad, w2.grad and the loss take float atomic adds from every thread)
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-6, err_msg=name)
    noise = noise_of(steps, first_key)
    directions = [tuple(rng.standard_normal(s) for s in ((N,), (H, N), (N, H))) for _ in range(2)]
    fd = central_differences(lambda x, w1, w2: electric_np(x, w1, w2, goals, resets, noise, steps),
                             (x0, w10, w20), directions)
    np.testing.assert_allclose(along((got["x0"], got["w1"], got["w2"]), directions), fd, rtol=2e-3,
                               atol=1e-4 * np.abs(fd).max())


# ---- DiffTaichi's electric layout: x and the network's outputs time-indexed (x[t], act[:, t] written once, so
# a replay needs none of them as the Tape found them), a scratch hidden layer overwritten every step ----------

@sp.kernel
def layer(t: sp.i32, x: sp.Array, goal: sp.Array, w1: sp.Array, hid: sp.Array):
    for i in range(hid.shape[0]):
        hid[i] = sp.tanh(w1[0, i] * x[t - 1] + w1[1, i] * goal[t])


@sp.kernel
def outputs(t: sp.i32, hid: sp.Array, w2: sp.Array, act: sp.Array):
    for i in range(hid.shape[0]):
        act[i, t] = hid[i] * w2[i]   # (its gradient reads hid, which the next layer(t) overwrites)


@sp.kernel
def move(t: sp.i32, x: sp.Array, act: sp.Array, goal: sp.Array, loss: sp.Array):
    for _ in range(1):
        f = 0.0
        for i in sp.static(range(H)):
            f += act[i, t]
        x[t] = x[t - 1] + DT * sp.tanh(f)
        loss[None] += (x[t] - goal[t]) * (x[t] - goal[t])


def time_indexed_np(x0, w1, w2, goal):
    x, loss = x0, 0.0
    for t in range(1, len(goal)):
        hid = np.tanh(w1[0] * x + w1[1] * goal[t])
        x = x + DT * np.tanh(np.sum(hid * w2))
        loss += (x - goal[t]) ** 2
    return loss


def run_time_indexed(x0, w10, w20, goal0, budget):
    steps = len(goal0)
    x = sp.from_numpy(np.concatenate([[x0], np.zeros(steps - 1)]).astype(np.float32), needs_grad=True)
    w1, w2 = sp.from_numpy(w10, needs_grad=True), sp.from_numpy(w20, needs_grad=True)
    hid, act = sp.ndarray(sp.f32, (H,), needs_grad=True), sp.ndarray(sp.f32, (H, steps), needs_grad=True)
    goal, loss = sp.from_numpy(goal0), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, checkpoint_budget=budget) as tape:
        for t in range(1, steps):
            layer(t, x, goal, w1, hid)
            outputs(t, hid, w2, act)
            move(t, x, act, goal, loss)
    return tape, {"w1": w1.grad.to_numpy(), "w2": w2.grad.to_numpy(), "x": x.grad.to_numpy(),
                  "loss": loss.to_numpy(), "x_end": x.to_numpy()}


@pytest.mark.parametrize("steps,fraction", [(40, 10), (2000, 100)])
def test_time_indexed_arrays_need_no_copy_as_found(rng, steps, fraction):
    """The state a replay starts from is the rows launches read before the Tape's writes replace them (the
    scratch hidden layer and the loss: 36 bytes), not the arrays they write as the Tape found them (x and act,
    more than the budget); a snapshot holds the rows a replay from it reads that earlier launches wrote (hid,
    x[t - 1], the loss: 40 bytes), not every array written so far."""
    if runtime.get().backend == "interp" and fraction == 100:
        pytest.skip("2,000 steps and their replays take minutes on the interpreter; 1/10 runs there")
    x0, w10, w20, goal0 = rand(rng, 1)[0], rand(rng, (2, H)), rand(rng, H), rand(rng, steps)
    full, ref = run_time_indexed(x0, w10, w20, goal0, None)
    budget = full.checkpoint_bytes // fraction
    assert budget < 4 * steps   # (x as the Tape found it would not fit, let alone act)
    tape, got = run_time_indexed(x0, w10, w20, goal0, budget)
    assert tape.recomputed_launches > 0
    assert 0 < tape.checkpoint_bytes <= budget
    for name in ref:   # (no float atomics but the loss's, from one thread)
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    directions = [tuple(rng.standard_normal(s) for s in ((), (2, H), (H,))) for _ in range(3)]
    fd = central_differences(lambda x, w1, w2: time_indexed_np(x, w1, w2, goal0.astype(np.float64)),
                             (np.float64(x0), w10, w20), directions)
    np.testing.assert_allclose(along((got["x"][0], got["w1"], got["w2"]), directions), fd, rtol=2e-3,
                               atol=1e-4 * np.abs(fd).max())


# ---- a rollout whose every element is written once: its Tape keeps nothing, so a budget of 0 bytes holds it ----
@sp.kernel
def roll(t: sp.i32, x: sp.Array, w: sp.Array, loss: sp.Array):
    for _ in range(1):
        x[t] = x[t - 1] + DT * sp.tanh(w[0] * x[t - 1] + w[1])
        loss[None] += x[t] * x[t]


def roll_np(x0, w, steps):
    x, loss = x0, 0.0
    for _ in range(1, steps):
        x = x + DT * np.tanh(w[0] * x + w[1])
        loss += x * x
    return loss


def run_roll(x0, w0, steps, budget):
    x = sp.from_numpy(np.concatenate([[x0], np.zeros(steps - 1)]).astype(np.float32), needs_grad=True)
    w, loss = sp.from_numpy(w0, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss, checkpoint_budget=budget) as tape:
        x.grad.fill(0.0)   # (a host write of zeros: a replay would repeat it, nothing is copied)
        for t in range(1, steps):
            roll(t, x, w, loss)
    return tape, {"x": x.grad.to_numpy(), "w": w.grad.to_numpy(), "loss": loss.to_numpy()}


def test_a_budget_of_zero_bytes_holds_a_tape_that_keeps_nothing(rng):
    """Every element written once and the loss zeroed (by the Tape: a host write of zeros, which a replay
    repeats on the device instead of keeping its contents): the unbounded Tape keeps 0 bytes, and so does a Tape
    with checkpoint_budget=0, with the same gradients and nothing recomputed."""
    steps, x0, w0 = 30, rand(rng, 1)[0], rand(rng, 2)
    full, ref = run_roll(x0, w0, steps, None)
    tape, got = run_roll(x0, w0, steps, 0)
    assert full.checkpoint_bytes == tape.checkpoint_bytes == 0 and tape.recomputed_launches == 0
    for name in ref:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    directions = [tuple(rng.standard_normal(s) for s in ((), (2,))) for _ in range(3)]
    fd = central_differences(lambda x, w: roll_np(x, w, steps), (np.float64(x0), w0.astype(np.float64)), directions)
    np.testing.assert_allclose(along((got["x"][0], got["w"]), directions), fd, rtol=2e-3, atol=1e-4 * np.abs(fd).max())


# ---- DiffTaichi's electric itself (examples/electric.py): its unbounded Tape keeps only x[t] and v[t] as the
# previous rollout left them (nn1(t) reads them before advance(t) overwrites them), which no replay computes ----
def electric_example(steps):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "electric.py")
    spec = importlib.util.spec_from_file_location("electric_recompute", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    m.steps, m.seg_size = steps, steps // 2
    m.allocate_fields()
    return m


@pytest.mark.parametrize("fraction", [10, 100])
def test_electric_below_what_no_replay_computes_raises(rng, fraction):
    steps = 24
    m = electric_example(steps)
    m.init_weights(rng)
    m.initialize(rng)
    with sp.Tape(m.loss) as full:
        m.forward()
    assert full.checkpoint_bytes == 16 * (steps - 1)   # x[t] and v[t], t = 1 .. steps - 1: nothing else
    m.initialize(rng)
    with pytest.raises(sp.AutodiffRuleError, match=rf"checkpoint_budget={full.checkpoint_bytes // fraction} "
                                                   r"bytes is too small .*rows of its arrays that launches read"):
        with sp.Tape(m.loss, checkpoint_budget=full.checkpoint_bytes // fraction):
            m.forward()

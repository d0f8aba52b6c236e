"""The long-tape workload of benchmarks/long_tape.py: DiffTaichi's electric (examples/electric.py), 4 kernels per
step (nn1, nn2, advance, compute_loss) over thousands of steps, for spvad, Taichi and Quadrants. A charged
particle is steered by eight electrodes whose charges a two-layer tanh network sets every step; the network
writes one column per step of hidden (64, T) and gravitation (8, T): time on the second axis.

Two forms. "prev" (every system): nn1(t) reads the state step t - 1 left, each element is written once, so
Taichi's global data access rule holds and every system differentiates the same program. "difftaichi"
(spvad only): as DiffTaichi writes it, nn1(t) reads x[t] and v[t] before advance(t) overwrites them; spvad's
Tape keeps those rows, Taichi's replays the overwritten values (another gradient). spvad runs the example's
own kernels (nn1 of the "prev" form is the one added here). Reference: the same rollout in float64 numpy; the
weights' gradients by central differences along random directions."""
import importlib.util
import math
import os

import numpy as np

import spvad as sp
from .common import all_close, close_to, init_peer, init_spvad

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "electric.py")


def example(steps):
    """A fresh copy of examples/electric.py for `steps` steps (its module-level ndarrays are its own)."""
    spec = importlib.util.spec_from_file_location("electric_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.steps = steps
    return module


_EXAMPLE = example(1)
N_GRAV, N_HIDDEN, DT, DAMPING, K = (_EXAMPLE.n_gravitation, _EXAMPLE.n_hidden, _EXAMPLE.dt, _EXAMPLE.damping,
                                    _EXAMPLE.K)
POSITIONS = _EXAMPLE.gravitation_position
DECAY = math.exp(-DT * DAMPING)
PARAMS = ("weight1", "bias1", "weight2", "bias2")
KERNELS_PER_STEP = 4


def launches(steps):
    return KERNELS_PER_STEP * (steps - 1)


# ---- the float64 reference --------------------------------------------------------------------------------
def rollout(params, goal, goal_v, start, form):
    """The loss of one rollout from x[0] = start, v = 0 (every later step zero before it runs)."""
    w1, b1, w2, b2 = params
    steps = len(goal)
    x, v = np.zeros((steps, 2)), np.zeros((steps, 2))
    x[0] = start
    positions, loss = np.array(POSITIONS), 0.0
    for t in range(1, steps):
        s = t - 1 if form == "prev" else t
        features = np.concatenate([x[s] - 0.5, v[s], goal[t] - 0.5, goal_v[t] - 0.5])
        charge = np.tanh(np.tanh(features @ w1 + b1) @ w2 + b2)
        r = x[t - 1] - positions
        length = np.maximum(np.linalg.norm(r, axis=1), 0.1)
        v[t] = v[t - 1] * DECAY + DT * ((K * charge / length ** 3) @ r)
        x[t] = x[t - 1] + DT * v[t]
        loss += DT * np.sum((x[t] - goal[t]) ** 2)
    return loss


def reference(steps, form):
    rng = np.random.default_rng(5)
    goal, goal_v, start = example(steps).goal_path(rng)
    params = [(rng.random((8, N_HIDDEN)) - 0.5) * 0.3, np.zeros(N_HIDDEN),
              (rng.random((N_HIDDEN, N_GRAV)) - 0.5) * 0.3, np.zeros(N_GRAV)]
    params = [p.astype(np.float32) for p in params]
    p64 = [p.astype(np.float64) for p in params]
    directions, slopes, eps = [], [], 1e-6
    for _ in range(2):
        d = [rng.standard_normal(p.shape) for p in params]
        plus = rollout([p + eps * q for p, q in zip(p64, d)], goal, goal_v, start, form)
        minus = rollout([p - eps * q for p, q in zip(p64, d)], goal, goal_v, start, form)
        directions.append(d)
        slopes.append((plus - minus) / (2 * eps))
    return {"steps": steps, "form": form, "goal": goal.astype(np.float32), "goal_v": goal_v.astype(np.float32),
            "start": start.astype(np.float32), "params": params,
            "loss": rollout(p64, goal, goal_v, start, form), "directions": directions, "slopes": np.array(slopes)}


def check(loss, grads, ref):
    """(ok, detail): the loss and the gradients along the reference's directions."""
    got = np.array([sum(float(np.sum(g * q)) for g, q in zip(grads, d)) for d in ref["directions"]])
    return all_close([("loss", close_to([loss], [ref["loss"]], rtol=1e-3)),
                      ("d loss / d weights", close_to(got, ref["slopes"], rtol=1e-2,
                                                      atol=1e-3 * np.abs(ref["slopes"]).max()))])


def initial_state(ref):
    x0 = np.zeros((ref["steps"], 2), np.float32)
    x0[0] = ref["start"]
    return x0


class Program:
    """One system's arrays and functions: forward(mark), reset() (untimed), sync(), grads(), loss(), kept()."""

    def __init__(self, sync, reset, forward, tape, loss, grads, kept=lambda: None):
        self.sync, self.reset, self.forward, self.tape = sync, reset, forward, tape
        self.loss, self.grads, self.kept = loss, grads, kept


# ---- spvad: examples/electric.py's module-level ndarrays and kernels ----------------------------------------
x = v = hidden = goal = goal_v = weight1 = bias1 = None   # the example's, for nn1_prev


@sp.kernel
def nn1_prev(t: sp.i32):   # the example's nn1, reading the state step t - 1 left
    for i in range(N_HIDDEN):
        act = 0.0
        act += (x[t - 1][0] - 0.5) * weight1[0, i]
        act += (x[t - 1][1] - 0.5) * weight1[1, i]
        act += v[t - 1][0] * weight1[2, i]
        act += v[t - 1][1] * weight1[3, i]
        act += (goal[t][0] - 0.5) * weight1[4, i]
        act += (goal[t][1] - 0.5) * weight1[5, i]
        act += (goal_v[t][0] - 0.5) * weight1[6, i]
        act += (goal_v[t][1] - 0.5) * weight1[7, i]
        act += bias1[i]
        hidden[i, t] = sp.tanh(act)


def prepare_spvad(ref):
    global x, v, hidden, goal, goal_v, weight1, bias1
    init_spvad()
    steps, m = ref["steps"], example(ref["steps"])
    m.allocate_fields()
    x, v, hidden, goal, goal_v, weight1, bias1 = m.x, m.v, m.hidden, m.goal, m.goal_v, m.weight1, m.bias1
    m.goal.from_numpy(ref["goal"])
    m.goal_v.from_numpy(ref["goal_v"])
    for name, p in zip(PARAMS, ref["params"]):
        getattr(m, name).from_numpy(p)
    nn1 = nn1_prev if ref["form"] == "prev" else m.nn1
    x0, kept = initial_state(ref), [None]

    def forward(mark=None):
        for t in range(1, steps):
            if mark:
                mark(t)
            nn1(t)
            m.nn2(t)
            m.advance(t)
            m.compute_loss(t)

    def tape(mark=None, budget=None):
        with sp.Tape(m.loss, checkpoint_budget=budget) as recording:
            forward(mark)
            if mark:
                mark(steps)
        kept[0] = recording.checkpoint_bytes
        return recording

    def reset():
        m.x.from_numpy(x0)
        m.v.fill(0.0)
        m.loss.fill(0.0)

    return Program(sp.sync, reset, forward, tape, lambda: float(m.loss[None]),
                   lambda: [getattr(m, p).grad.to_numpy() for p in PARAMS], lambda: kept[0])


# ---- Taichi and Quadrants: fields, as DiffTaichi's electric.py ---------------------------------------------
def _prepare_taichi_like(system, ref):
    ti = init_peer(system, unrolling_limit=0)   # (nn2 unrolls 64 terms, as DiffTaichi's: no warning about it)
    steps = ref["steps"]
    xs, vs = ti.Vector.field(2, ti.f32, steps, needs_grad=True), ti.Vector.field(2, ti.f32, steps, needs_grad=True)
    hid = ti.field(ti.f32, (N_HIDDEN, steps), needs_grad=True)
    grav = ti.field(ti.f32, (N_GRAV, steps), needs_grad=True)
    gl, glv = ti.Vector.field(2, ti.f32, steps), ti.Vector.field(2, ti.f32, steps)
    w1, w2 = ti.field(ti.f32, (8, N_HIDDEN), needs_grad=True), ti.field(ti.f32, (N_HIDDEN, N_GRAV), needs_grad=True)
    b1, b2 = ti.field(ti.f32, N_HIDDEN, needs_grad=True), ti.field(ti.f32, N_GRAV, needs_grad=True)
    total = ti.field(ti.f32, (), needs_grad=True)

    @ti.kernel
    def nn1_peer(t: ti.i32):
        for i in range(N_HIDDEN):
            s = t - 1
            act = (xs[s][0] - 0.5) * w1[0, i] + (xs[s][1] - 0.5) * w1[1, i] + vs[s][0] * w1[2, i] + \
                vs[s][1] * w1[3, i] + (gl[t][0] - 0.5) * w1[4, i] + (gl[t][1] - 0.5) * w1[5, i] + \
                (glv[t][0] - 0.5) * w1[6, i] + (glv[t][1] - 0.5) * w1[7, i] + b1[i]
            hid[i, t] = ti.tanh(act)

    @ti.kernel
    def nn2_peer(t: ti.i32):
        for i in range(N_GRAV):
            act = 0.0
            for j in ti.static(range(N_HIDDEN)):
                act += hid[j, t] * w2[j, i]
            grav[i, t] = ti.tanh(act + b2[i])

    @ti.kernel
    def advance_peer(t: ti.i32):
        for _ in range(1):
            force = ti.Vector([0.0, 0.0])
            for i in ti.static(range(N_GRAV)):
                r = xs[t - 1] - ti.Vector(POSITIONS[i])
                len_r = ti.max(r.norm(), 1e-1)
                force += K * grav[i, t] / (len_r * len_r * len_r) * r
            vs[t] = vs[t - 1] * DECAY + DT * force
            xs[t] = xs[t - 1] + DT * vs[t]

    @ti.kernel
    def loss_peer(t: ti.i32):
        ti.atomic_add(total[None], DT * (xs[t] - gl[t]).norm_sqr())

    gl.from_numpy(ref["goal"])
    glv.from_numpy(ref["goal_v"])
    for field, p in zip((w1, b1, w2, b2), ref["params"]):
        field.from_numpy(p)
    x0, zeros = initial_state(ref), np.zeros((steps, 2), np.float32)

    def forward(mark=None):
        for t in range(1, steps):
            if mark:
                mark(t)
            nn1_peer(t)
            nn2_peer(t)
            advance_peer(t)
            loss_peer(t)

    def tape(mark=None):
        with ti.ad.Tape(loss=total):
            forward(mark)
            if mark:
                mark(steps)

    def reset():
        xs.from_numpy(x0)
        vs.from_numpy(zeros)
        total.fill(0.0)

    return Program(ti.sync, reset, forward, tape, lambda: float(total[None]),
                   lambda: [f.grad.to_numpy() for f in (w1, b1, w2, b2)])


def prepare_taichi(ref):
    return _prepare_taichi_like("taichi", ref)


def prepare_quadrants(ref):
    return _prepare_taichi_like("quadrants", ref)

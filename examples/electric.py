"""DiffTaichi's electric.py ported to spvad as a Taichi user would port it: a charged particle is steered along a
moving goal by eight electrodes whose charges a small neural network (two layers, tanh) sets every step from
the particle's and the goal's positions and velocities; gradient descent on the network's weights through the
whole rollout (sp.Tape over 4 kernels per step) lowers the distance to the goal.

The port renames `ti.` to `sp.`, fields to module-level ndarrays (allocate_fields), `ti.root.lazy_grad()` to
`needs_grad=True`, and keeps Taichi's idioms: `math.exp(-dt * damping)` in a kernel, the module-level list
`gravitation_position` indexed in a kernel (`sp.Vector(gravitation_position[i])`), `sp.static(range(...))`,
`x[t][0]` on an ndarray of vectors, `sp.atomic_add(loss[None], ...)`, `.norm()`, `.norm_sqr()`. As in the
original, nn1(t) reads x[t] and v[t] before advance(t) overwrites them, so the network sees the previous
rollout's state at step t (zeros in the first); sp.Tape keeps those overwritten contents, so the gradient is
the one of the program as written. The same algorithm in float64 numpy checks loss and gradients
(tests/examples/test_electric.py).

    python examples/electric.py [--steps T] [--iters K] [--rate R] [--picture electric.png]

The picture needs Pillow (`pip install pillow`); without it the example says so and skips it."""
import argparse
import math

import numpy as np

import spvad as sp

real = sp.f32
steps = 512            # time steps of a rollout (a compile-time constant of the kernels, as in Taichi)
seg_size = 256         # steps per segment of the goal's piecewise linear path

damping = 0.2
n_gravitation = 8
n_hidden = 64
pad = 0.1
gravitation_position = [[pad, pad], [pad, 1 - pad], [1 - pad, 1 - pad], [1 - pad, pad], [0.5, 1 - pad],
                        [0.5, pad], [pad, 0.5], [1 - pad, 0.5]]
dt = 0.03
learning_rate = 2e-2
K = 1e-3


def allocate_fields():
    """Taichi: `ti.root.dense(ti.l, max_steps).place(x, v)` ... `ti.root.lazy_grad()`."""
    global x, v, hidden, gravitation, goal, goal_v, weight1, bias1, weight2, bias2, loss
    x = sp.ndarray(sp.vec2, (steps,), needs_grad=True)
    v = sp.ndarray(sp.vec2, (steps,), needs_grad=True)
    hidden = sp.ndarray(real, (n_hidden, steps), needs_grad=True)
    gravitation = sp.ndarray(real, (n_gravitation, steps), needs_grad=True)
    goal = sp.ndarray(sp.vec2, (steps,))
    goal_v = sp.ndarray(sp.vec2, (steps,))
    weight1 = sp.ndarray(real, (8, n_hidden), needs_grad=True)
    bias1 = sp.ndarray(real, (n_hidden,), needs_grad=True)
    weight2 = sp.ndarray(real, (n_hidden, n_gravitation), needs_grad=True)
    bias2 = sp.ndarray(real, (n_gravitation,), needs_grad=True)
    loss = sp.ndarray(real, (), needs_grad=True)


@sp.kernel
def nn1(t: sp.i32):
    for i in range(n_hidden):
        act = 0.0
        act += (x[t][0] - 0.5) * weight1[0, i]
        act += (x[t][1] - 0.5) * weight1[1, i]
        act += v[t][0] * weight1[2, i]
        act += v[t][1] * weight1[3, i]
        act += (goal[t][0] - 0.5) * weight1[4, i]
        act += (goal[t][1] - 0.5) * weight1[5, i]
        act += (goal_v[t][0] - 0.5) * weight1[6, i]
        act += (goal_v[t][1] - 0.5) * weight1[7, i]
        act += bias1[i]
        hidden[i, t] = sp.tanh(act)


@sp.kernel
def nn2(t: sp.i32):
    for i in range(n_gravitation):
        act = 0.0
        for j in sp.static(range(n_hidden)):
            act += hidden[j, t] * weight2[j, i]
        act += bias2[i]
        gravitation[i, t] = sp.tanh(act)


@sp.kernel
def advance(t: sp.i32):
    for _ in range(1):  # parallelize this loop
        gravitational_force = sp.Vector([0.0, 0.0])
        for i in sp.static(range(n_gravitation)):  # instead of this one
            r = x[t - 1] - sp.Vector(gravitation_position[i])
            len_r = sp.max(r.norm(), 1e-1)
            gravitational_force += K * gravitation[i, t] / (len_r * len_r * len_r) * r
        v[t] = v[t - 1] * math.exp(-dt * damping) + dt * gravitational_force
        x[t] = x[t - 1] + dt * v[t]


@sp.kernel
def compute_loss(t: sp.i32):
    sp.atomic_add(loss[None], dt * (x[t] - goal[t]).norm_sqr())


def forward():
    for t in range(1, steps):
        nn1(t)
        nn2(t)
        advance(t)
        compute_loss(t)


def lerp(x, a, b):
    return (1 - x) * a + x * b


def goal_path(rng):
    """The goal moves along straight segments between random points (positions and velocities per step)."""
    segments = max(1, steps // seg_size)
    points = 0.2 + rng.random((segments + 1, 2)) * 0.6
    per = steps // segments
    k = np.arange(segments * per)
    i, j = k // per, k % per
    pos = np.zeros((steps, 2))
    vel = np.zeros((steps, 2))
    pos[k] = lerp((j / seg_size)[:, None], points[i], points[i + 1])
    vel[k] = points[i + 1] - points[i]
    pos[segments * per:], vel[segments * per:] = points[-1], 0.0
    return pos, vel, points[0]


def initialize(rng):
    pos, vel, start = goal_path(rng)
    goal.from_numpy(pos)
    goal_v.from_numpy(vel)
    x[0] = start


def init_weights(rng):
    weight1.from_numpy((rng.random((8, n_hidden)) - 0.5) * 0.3)
    weight2.from_numpy((rng.random((n_hidden, n_gravitation)) - 0.5) * 0.3)
    bias1.fill(0.0)
    bias2.fill(0.0)


def step(rng, rate=None):
    """One optimisation iteration: a rollout under sp.Tape, then a gradient step (Taichi: host loops)."""
    initialize(rng)
    loss.fill(0.0)   # loss[None] += ... accumulates: each rollout starts from 0
    with sp.Tape(loss):
        forward()
    for p in (weight1, bias1, weight2, bias2):
        p.from_numpy(p.to_numpy() - (rate or learning_rate) * p.grad.to_numpy())
    return float(loss.to_numpy())


def picture(path):
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        print("(no picture: pip install pillow)")
        return
    size = 400
    img = Image.new("RGB", (size, size), (60, 115, 63))
    draw = ImageDraw.Draw(img)

    def at(p):
        return p[0] * size, (1 - p[1]) * size
    strength = gravitation.to_numpy()[:, steps - 1]
    for (px, py), s in zip(gravitation_position, strength):
        u, w = at((px, py))
        r = 4 + 10 * abs(s)
        draw.ellipse((u - r, w - r, u + r, w + r), fill=(230, 170, 70) if s > 0 else (120, 160, 230))
    draw.line([at(p) for p in goal.to_numpy()], fill=(51, 68, 204), width=2)
    draw.line([at(p) for p in x.to_numpy()], fill=(242, 5, 48), width=2)
    img.save(path)
    print(f"picture: {path} (red: the particle's path; blue: the goal's; circles: the electrodes at the last "
          "step, orange positive, blue negative, larger stronger)")


def main():
    global steps
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--iters", type=int, default=30, help="rollouts (the original runs 200,000)")
    ap.add_argument("--rate", type=float, default=learning_rate)
    ap.add_argument("--picture", default="electric.png")
    a = ap.parse_args()
    steps = a.steps
    allocate_fields()
    init_weights(np.random.default_rng(0))
    print(f"device: {sp.device_info()['name']}; {steps} steps, {n_hidden} hidden units")
    losses = []
    for it in range(a.iters):
        losses.append(step(np.random.default_rng(it % 10), a.rate))   # ten goal paths, visited in turn
        if len(losses) == 10 or it == a.iters - 1:
            print(f"iter {it:4d}: mean loss of the last {len(losses)} rollouts {np.mean(losses):.6f}")
            losses.clear()
    picture(a.picture)


if __name__ == "__main__":
    main()

"""Workload 3, a differentiable mass-spring simulation: a hanging cloth, a G x G grid of particles joined by
structural and shear springs, its top row pinned, stretches under gravity for T steps of symplectic Euler; each
step is two kernels (spring forces with atomic adds, then integration); the loss is the mean squared distance
of the final positions to targets.
Timed: the forward simulation, and forward + reverse under a Tape. Reference: the same simulation in float64
numpy, its gradients w.r.t. a few spring stiffnesses and initial coordinates by central finite differences."""
import numpy as np

import spvad as sp
from . import limit
from .common import Op, Unavailable, all_close, close_to, init_peer, init_spvad

NAME = "mass_spring"
OPS = ("forward", "tape fwd+bwd")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")
DT, DAMPING, GRAVITY, SPACING = 0.004, 0.998, -9.8, 0.1   # stiffness k in [1000, 2000)


def config(quick):
    return {"grid": 8 if quick else 16, "steps": 32 if quick else 128}


def title(cfg):
    g = cfg["grid"]
    return f"mass-spring, {g * g} particles, {len(_springs(g)[0])} springs, {cfg['steps']} steps x 2 kernels"


def _springs(g):
    idx = np.arange(g * g).reshape(g, g)
    pairs = [(idx[:, :-1], idx[:, 1:]), (idx[:-1, :], idx[1:, :]),        # structural
             (idx[:-1, :-1], idx[1:, 1:]), (idx[:-1, 1:], idx[1:, :-1])]  # shear
    a = np.concatenate([p.ravel() for p, _ in pairs]).astype(np.int32)
    b = np.concatenate([q.ravel() for _, q in pairs]).astype(np.int32)
    return a, b


def simulate(p0, k, a, b, rest, free, target, steps):
    """The float64 reference: the loss after `steps` steps from initial positions p0 (n, 2); free[i] is 0 for
    a pinned particle, else 1."""
    x, v = p0.copy(), np.zeros_like(p0)
    for _ in range(steps):
        d = x[b] - x[a]
        length = np.sqrt(np.sum(d * d, axis=1))
        fs = (k * (length - rest) / length)[:, None] * d
        f = np.zeros_like(x)
        np.add.at(f, a, fs)
        np.add.at(f, b, -fs)
        v = free[:, None] * (v * DAMPING + DT * (f + np.array([0.0, GRAVITY])))
        x = x + DT * v
    return np.mean(np.sum((x - target) ** 2, axis=1)), x


def reference(cfg):
    g, steps = cfg["grid"], cfg["steps"]
    rng = np.random.default_rng(2)
    a, b = _springs(g)
    grid = np.stack(np.meshgrid(np.arange(g), np.arange(g)), axis=-1).reshape(-1, 2)[:, ::-1] * SPACING
    rest = np.sqrt(np.sum((grid[b] - grid[a]) ** 2, axis=1)).astype(np.float32)
    free = (grid[:, 1] < grid[:, 1].max() - 1e-9).astype(np.float32)        # the top row is pinned
    p0 = (grid + rng.uniform(-0.01, 0.01, grid.shape)).astype(np.float32)
    k = rng.uniform(1000.0, 2000.0, len(a)).astype(np.float32)
    target = (grid + np.array([0.0, -0.1])).astype(np.float32)
    f64 = dict(k=k.astype(np.float64), a=a, b=b, rest=rest.astype(np.float64), free=free.astype(np.float64),
               target=target.astype(np.float64), steps=steps)
    loss, _ = simulate(p0.astype(np.float64), **f64)
    # central differences on a few entries (float64: the truncation and rounding errors are ~1e-9 relative)
    springs = rng.choice(len(a), 6, replace=False)
    coords = [(int(i), int(c)) for i, c in zip(rng.choice(g * g, 6, replace=False), rng.integers(0, 2, 6))]
    dk, dp = [], []
    for s in springs:
        h = 1e-4 * f64["k"][s]
        kp, km = f64["k"].copy(), f64["k"].copy()
        kp[s] += h
        km[s] -= h
        dk.append((simulate(p0.astype(np.float64), **{**f64, "k": kp})[0] -
                   simulate(p0.astype(np.float64), **{**f64, "k": km})[0]) / (2 * h))
    for i, c in coords:
        h = 1e-6
        pp, pm = p0.astype(np.float64), p0.astype(np.float64)
        pp[i, c] += h
        pm[i, c] -= h
        dp.append((simulate(pp, **f64)[0] - simulate(pm, **f64)[0]) / (2 * h))
    return {"a": a, "b": b, "rest": rest, "free": free, "p0": p0, "k": k, "target": target, "loss": loss,
            "springs": springs, "dk": np.array(dk), "coords": coords, "dp": np.array(dp)}


def _check_forward(loss, ref):
    return close_to(np.array([loss]), np.array([ref["loss"]]), rtol=1e-4)


def _check_gradient(gk, gp0, ref):
    """gk: d loss/d k (all springs), gp0: d loss/d p0 (n, 2); compared on the entries differenced."""
    gp = np.array([gp0[i, c] for i, c in ref["coords"]])
    return all_close([("k.grad", close_to(gk[ref["springs"]], ref["dk"], rtol=1e-3,
                                          atol=1e-3 * np.abs(ref["dk"]).max())),
                      ("x0.grad", close_to(gp, ref["dp"], rtol=1e-3, atol=1e-3 * np.abs(ref["dp"]).max()))])


# ---- spvad: positions/velocities/forces as (T+1, n, 2) float32 arrays -------------------------------------
@sp.kernel
def spring_forces(x: sp.Array, f: sp.Array, a: sp.Array, b: sp.Array, k: sp.Array, rest: sp.Array, t: sp.i32):
    for s in range(a.shape[0]):
        i = a[s]
        j = b[s]
        dx = x[t, j, 0] - x[t, i, 0]
        dy = x[t, j, 1] - x[t, i, 1]
        length = sp.sqrt(dx * dx + dy * dy)
        c = k[s] * (length - rest[s]) / length
        f[t, i, 0] += c * dx
        f[t, i, 1] += c * dy
        f[t, j, 0] += -c * dx
        f[t, j, 1] += -c * dy


@sp.kernel
def advance(x: sp.Array, v: sp.Array, f: sp.Array, free: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        vx = free[i] * (v[t, i, 0] * DAMPING + DT * f[t, i, 0])
        vy = free[i] * (v[t, i, 1] * DAMPING + DT * (f[t, i, 1] + GRAVITY))
        v[t + 1, i, 0] = vx
        v[t + 1, i, 1] = vy
        x[t + 1, i, 0] = x[t, i, 0] + DT * vx
        x[t + 1, i, 1] = x[t, i, 1] + DT * vy


@sp.kernel
def final_loss(x: sp.Array, target: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        dx = x[t, i, 0] - target[i, 0]
        dy = x[t, i, 1] - target[i, 1]
        loss[None] += (dx * dx + dy * dy) / x.shape[1]


def prepare_spvad(cfg, ref):
    init_spvad()
    steps, n = cfg["steps"], cfg["grid"] ** 2
    x = sp.ndarray(sp.f32, (steps + 1, n, 2), needs_grad=True)
    v = sp.ndarray(sp.f32, (steps + 1, n, 2), needs_grad=True)
    f = sp.ndarray(sp.f32, (steps, n, 2), needs_grad=True)
    a, b = sp.from_numpy(ref["a"]), sp.from_numpy(ref["b"])
    k = sp.from_numpy(ref["k"], needs_grad=True)
    rest, free, target = sp.from_numpy(ref["rest"]), sp.from_numpy(ref["free"]), sp.from_numpy(ref["target"])
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    x0 = np.zeros((steps + 1, n, 2), np.float32)
    x0[0] = ref["p0"]
    x.from_numpy(x0)

    def simulate_kernels():
        for t in range(steps):
            spring_forces(x, f, a, b, k, rest, t)
            advance(x, v, f, free, t)
        final_loss(x, target, loss, steps)

    def reset():              # forces accumulate and the loss is a sum: both start from zero
        f.fill(0.0)
        loss.fill(0.0)

    def tape():
        with sp.Tape(loss=loss):
            simulate_kernels()

    return [Op("forward", simulate_kernels, sp.sync, setup=reset, check=lambda: _check_forward(loss[None], ref)),
            Op("tape fwd+bwd", tape, sp.sync, setup=reset,
               check=lambda: _check_gradient(k.grad.to_numpy(), x.grad.to_numpy()[0], ref))]


# ---- the limit: hand-written GLSL (benchmarks/limit/mass_spring_*.comp) through spvad's RHI. The same two
# kernels per step and the loss; the reverse is hand-derived (see the shaders) and runs the steps backwards.
# Only the positions of every step are kept (the reverse of the force kernel needs them); v, f and their
# gradients are single (n, 2) arrays updated in place, so the reverse needs no zeroing but k.grad's. -----------
def prepare_limit(cfg, ref):
    dev = limit.device()
    if not dev.info["features"].get("atomic_float32_add"):
        raise Unavailable("the hand-written kernels need 32-bit float atomic add (VK_EXT_shader_atomic_float)")
    steps, n, ns = cfg["steps"], cfg["grid"] ** 2, len(ref["a"])
    xs0 = np.zeros((steps + 1, n, 2), np.float32)
    xs0[0] = ref["p0"]
    xs = limit.upload(dev, xs0)
    a, b, k, rest, free, target = (limit.upload(dev, ref[key]) for key in ("a", "b", "k", "rest", "free", "target"))
    v, f, gx, gv, gf = (limit.buffer(dev, 8 * n) for _ in range(5))
    loss, gk = limit.buffer(dev, 4), limit.buffer(dev, 4 * ns)

    def shader(name, num_buffers, push_format):   # a few hundred threads: 64-wide groups, as spvad's small launches
        return limit.Shader(dev, f"mass_spring_{name}", num_buffers, push_format, local_size=64,
                            defines={"DT": DT, "DAMPING": DAMPING, "GRAVITY": GRAVITY})

    forces, advance, final_loss = shader("forces", 6, "III"), shader("advance", 4, "II"), shader("loss", 3, "II")
    loss_grad, advance_grad = shader("loss_grad", 5, "III"), shader("advance_grad", 4, "I")
    forces_grad = shader("forces_grad", 8, "III")
    forward_launches = [launch for t in range(steps) for launch in (
        forces.launcher([xs, f, a, b, k, rest], ns, ns, n, t), advance.launcher([xs, v, f, free], n, n, t))]
    forward_launches.append(final_loss.launcher([xs, target, loss], n, n, steps))
    reverse_launches = [loss_grad.launcher([xs, target, gx, gv, gk], max(n, ns), n, ns, steps)]
    reverse_launches += [launch for t in reversed(range(steps)) for launch in (
        advance_grad.launcher([gx, gv, gf, free], n, n),
        forces_grad.launcher([xs, gf, gx, gk, a, b, k, rest], ns, ns, n, t))]
    tape_launches = forward_launches + reverse_launches

    def reset():              # v starts at rest, f and the loss (a sum) at zero
        for buf in (v, f, loss):
            buf.view(np.float32)[:] = 0.0

    def run(launches):
        for launch in launches:
            launch()

    return [Op("forward", lambda: run(forward_launches), dev.sync, setup=reset,
               check=lambda: _check_forward(limit.read(loss, np.float32, 1)[0], ref)),
            Op("tape fwd+bwd", lambda: run(tape_launches), dev.sync, setup=reset,
               check=lambda: _check_gradient(limit.read(gk, np.float32, ns),
                                             limit.read(gx, np.float32, 2 * n).reshape(n, 2), ref))]


# ---- Taichi and Quadrants: the DiffTaichi-style formulation with 2-vector fields over (T+1, n) ---------------
def _prepare_taichi_like(system, cfg, ref):
    ti = init_peer(system)
    steps, n, ns = cfg["steps"], cfg["grid"] ** 2, len(ref["a"])
    x = ti.Vector.field(2, ti.f32, (steps + 1, n), needs_grad=True)
    v = ti.Vector.field(2, ti.f32, (steps + 1, n), needs_grad=True)
    f = ti.Vector.field(2, ti.f32, (steps, n), needs_grad=True)
    a, b = ti.field(ti.i32, ns), ti.field(ti.i32, ns)
    k = ti.field(ti.f32, ns, needs_grad=True)
    rest = ti.field(ti.f32, ns)
    free = ti.field(ti.f32, n)
    target = ti.Vector.field(2, ti.f32, n)
    loss = ti.field(ti.f32, (), needs_grad=True)

    @ti.kernel
    def spring_forces_peer(t: ti.i32):
        for s in range(ns):
            i, j = a[s], b[s]
            d = x[t, j] - x[t, i]
            length = d.norm()
            fs = k[s] * (length - rest[s]) / length * d
            f[t, i] += fs
            f[t, j] += -fs

    @ti.kernel
    def advance_peer(t: ti.i32):
        for i in range(n):
            vn = free[i] * (v[t, i] * DAMPING + DT * (f[t, i] + ti.Vector([0.0, GRAVITY])))
            v[t + 1, i] = vn
            x[t + 1, i] = x[t, i] + DT * vn

    @ti.kernel
    def final_loss_peer(t: ti.i32):
        for i in range(n):
            loss[None] += (x[t, i] - target[i]).norm_sqr() / n

    a.from_numpy(ref["a"])
    b.from_numpy(ref["b"])
    k.from_numpy(ref["k"])
    rest.from_numpy(ref["rest"])
    free.from_numpy(ref["free"])
    target.from_numpy(ref["target"])
    x0 = np.zeros((steps + 1, n, 2), np.float32)
    x0[0] = ref["p0"]
    x.from_numpy(x0)

    def simulate_kernels():
        for t in range(steps):
            spring_forces_peer(t)
            advance_peer(t)
        final_loss_peer(steps)

    def reset():
        f.fill(0.0)
        loss.fill(0.0)

    def tape():
        with ti.ad.Tape(loss=loss):
            simulate_kernels()

    return [Op("forward", simulate_kernels, ti.sync, setup=reset, check=lambda: _check_forward(loss[None], ref)),
            Op("tape fwd+bwd", tape, ti.sync, setup=reset,
               check=lambda: _check_gradient(k.grad.to_numpy(), x.grad.to_numpy()[0], ref))]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)

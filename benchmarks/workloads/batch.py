"""The batch workload, many simulations at once (sp.vmap): B hanging cloths (the mass_spring workload's G x G grid of
particles and springs, each cloth with its own jittered start), the spring stiffnesses shared by all of them,
T steps of symplectic Euler under a Tape, forward + reverse; the loss sums each cloth's mean squared distance
to the targets, so k's gradient sums over the batch.
Timed, all under a Tape: `tape fwd+bwd`, the per-cloth kernels batched with sp.vmap (one launch per kernel and
step); `tape fwd+bwd loop`, the same kernels launched once per cloth in a Python loop; and the "limit": here
not hand-written GLSL but the same spvad kernels with the batch axis written by hand (a parallel loop over
(cloth, spring) and a leading index), the code sp.vmap should match. Reference: the same simulation in float64
numpy, batched over the cloths; gradients w.r.t. a few stiffnesses and initial coordinates by central finite
differences."""
import numpy as np

import spvad as sp
from spvad import runtime
from . import mass_spring
from .common import Op, all_close, close_to, init_spvad
from .mass_spring import DAMPING, DT, GRAVITY, advance, final_loss, spring_forces

NAME = "batch"
OPS = ("tape fwd+bwd", "tape fwd+bwd loop")
SYSTEMS = ("spvad", "limit")


def config(quick):
    return {"batch": 32 if quick else 1024, "grid": 8 if quick else 16, "steps": 16 if quick else 128}


def title(cfg):
    g = cfg["grid"]
    return (f"{cfg['batch']:,} mass-spring simulations at once, {g * g} particles and "
            f"{len(mass_spring._springs(g)[0])} springs each, {cfg['steps']} steps x 2 kernels, Tape fwd+bwd")


def simulate(p0, k, a, b, rest, free, target, steps):
    """The float64 reference, batched: the summed loss after `steps` steps from initial positions p0 (B, n, 2)."""
    x, v = p0.copy(), np.zeros_like(p0)
    for _ in range(steps):
        d = x[:, b] - x[:, a]
        length = np.sqrt(np.sum(d * d, axis=2))
        fs = (k * (length - rest) / length)[:, :, None] * d
        f = np.zeros_like(x)
        np.add.at(f, (slice(None), a), fs)
        np.add.at(f, (slice(None), b), -fs)
        v = free[:, None] * (v * DAMPING + DT * (f + np.array([0.0, GRAVITY])))
        x = x + DT * v
    return np.sum(np.mean(np.sum((x - target) ** 2, axis=2), axis=1))


def reference(cfg):
    one = mass_spring.reference({"grid": cfg["grid"], "steps": 1})   # springs, rest lengths, pins, targets
    rng, n = np.random.default_rng(7), cfg["grid"] ** 2
    p0 = (one["p0"][None] + rng.uniform(-0.01, 0.01, (cfg["batch"], n, 2))).astype(np.float32)
    f64 = dict(k=one["k"].astype(np.float64), a=one["a"], b=one["b"], rest=one["rest"].astype(np.float64),
               free=one["free"].astype(np.float64), target=one["target"].astype(np.float64), steps=cfg["steps"])
    loss = simulate(p0.astype(np.float64), **f64)
    # central differences: k on the whole batch (it is shared), p0 on the one cloth it moves
    springs = rng.choice(len(one["a"]), 2, replace=False)
    coords = [(int(c), int(i), int(d)) for c, i, d in zip(rng.choice(cfg["batch"], 3), rng.choice(n, 3),
                                                          rng.integers(0, 2, 3))]
    dk, dp = [], []
    for s in springs:
        h = 1e-4 * f64["k"][s]
        kp, km = f64["k"].copy(), f64["k"].copy()
        kp[s] += h
        km[s] -= h
        dk.append((simulate(p0.astype(np.float64), **{**f64, "k": kp}) -
                   simulate(p0.astype(np.float64), **{**f64, "k": km})) / (2 * h))
    for c, i, d in coords:
        h = 1e-6
        pp, pm = p0[c:c + 1].astype(np.float64), p0[c:c + 1].astype(np.float64)
        pp[0, i, d] += h
        pm[0, i, d] -= h
        dp.append((simulate(pp, **f64) - simulate(pm, **f64)) / (2 * h))
    return {**{key: one[key] for key in ("a", "b", "rest", "free", "k", "target")}, "p0": p0, "loss": loss,
            "springs": springs, "dk": np.array(dk), "coords": coords, "dp": np.array(dp)}


def _check(loss, gk, gp0, ref):
    """gk: d loss / d k (all springs), gp0: d loss / d p0 (B, n, 2); compared on the entries differenced."""
    gp = np.array([gp0[c, i, d] for c, i, d in ref["coords"]])
    return all_close([("loss", close_to(np.array([loss]), np.array([ref["loss"]]), rtol=1e-4)),
                      ("k.grad", close_to(gk[ref["springs"]], ref["dk"], rtol=1e-3,
                                          atol=1e-3 * np.abs(ref["dk"]).max())),
                      ("x0.grad", close_to(gp, ref["dp"], rtol=1e-3, atol=1e-3 * np.abs(ref["dp"]).max()))])


def _runtime():
    """spvad on Vulkan, started once: both systems of this workload share it (sp.init would drop the arrays of
    the one prepared first)."""
    rt = runtime.current()
    if rt is None or rt.backend != "vulkan":
        init_spvad()


def _shared(ref):
    a, b = sp.from_numpy(ref["a"]), sp.from_numpy(ref["b"])
    rest, free, target = sp.from_numpy(ref["rest"]), sp.from_numpy(ref["free"]), sp.from_numpy(ref["target"])
    return a, b, sp.from_numpy(ref["k"], needs_grad=True), rest, free, target, sp.ndarray(sp.f32, (), needs_grad=True)


def _states(steps, p0):
    """Positions, velocities and forces of every step of the cloths p0 (..., n, 2) starts from: x, v of shape
    (..., T+1, n, 2) with x[..., 0, :, :] = p0, and f of shape (..., T, n, 2)."""
    lead, n = p0.shape[:-2], p0.shape[-2]
    x0 = np.zeros((*lead, steps + 1, n, 2), np.float32)
    x0[..., 0, :, :] = p0
    return (sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, x0.shape, needs_grad=True),
            sp.ndarray(sp.f32, (*lead, steps, n, 2), needs_grad=True))


def _tape_op(name, simulate_kernels, zero, loss, k, x0_grad, ref):
    def tape():
        with sp.Tape(loss=loss):
            simulate_kernels()
    return Op(name, tape, sp.sync, setup=zero, check=lambda: _check(loss[None], k.grad.to_numpy(), x0_grad(), ref))


# ---- spvad: the mass_spring workload's per-cloth kernels, batched by sp.vmap, or launched once per cloth -----
bforces = sp.vmap(spring_forces, in_axes=(0, 0, None, None, None, None, None))
badvance = sp.vmap(advance, in_axes=(0, 0, 0, None, None))
bloss = sp.vmap(final_loss, in_axes=(0, None, None, None))


def prepare_spvad(cfg, ref):
    _runtime()
    steps = cfg["steps"]
    a, b, k, rest, free, target, loss = _shared(ref)
    x, v, f = _states(steps, ref["p0"])
    cloths = [_states(steps, p0) for p0 in ref["p0"]]

    def batched():
        for t in range(steps):
            bforces(x, f, a, b, k, rest, t)
            badvance(x, v, f, free, t)
        bloss(x, target, loss, steps)

    def looped():
        for t in range(steps):
            for xc, vc, fc in cloths:
                spring_forces(xc, fc, a, b, k, rest, t)
                advance(xc, vc, fc, free, t)
        for xc, _, _ in cloths:
            final_loss(xc, target, loss, steps)

    def zero(forces):
        def run():   # forces accumulate and the loss is a sum: both start from zero
            for fc in forces:
                fc.fill(0.0)
            loss.fill(0.0)
        return run

    return [_tape_op("tape fwd+bwd", batched, zero([f]), loss, k, lambda: x.grad.to_numpy()[:, 0], ref),
            _tape_op("tape fwd+bwd loop", looped, zero([fc for _, _, fc in cloths]), loss, k,
                     lambda: np.stack([xc.grad.to_numpy()[0] for xc, _, _ in cloths]), ref)]


# ---- the limit: the same kernels with the batch axis written by hand ---------------------------------------
@sp.kernel
def spring_forces_batched(x: sp.Array, f: sp.Array, a: sp.Array, b: sp.Array, k: sp.Array, rest: sp.Array,
                          t: sp.i32):
    for c, s in sp.ndrange(x.shape[0], a.shape[0]):
        i = a[s]
        j = b[s]
        dx = x[c, t, j, 0] - x[c, t, i, 0]
        dy = x[c, t, j, 1] - x[c, t, i, 1]
        length = sp.sqrt(dx * dx + dy * dy)
        e = k[s] * (length - rest[s]) / length
        f[c, t, i, 0] += e * dx
        f[c, t, i, 1] += e * dy
        f[c, t, j, 0] += -e * dx
        f[c, t, j, 1] += -e * dy


@sp.kernel
def advance_batched(x: sp.Array, v: sp.Array, f: sp.Array, free: sp.Array, t: sp.i32):
    for c, i in sp.ndrange(x.shape[0], x.shape[2]):
        vx = free[i] * (v[c, t, i, 0] * DAMPING + DT * f[c, t, i, 0])
        vy = free[i] * (v[c, t, i, 1] * DAMPING + DT * (f[c, t, i, 1] + GRAVITY))
        v[c, t + 1, i, 0] = vx
        v[c, t + 1, i, 1] = vy
        x[c, t + 1, i, 0] = x[c, t, i, 0] + DT * vx
        x[c, t + 1, i, 1] = x[c, t, i, 1] + DT * vy


@sp.kernel
def final_loss_batched(x: sp.Array, target: sp.Array, loss: sp.Array, t: sp.i32):
    for c, i in sp.ndrange(x.shape[0], x.shape[2]):
        dx = x[c, t, i, 0] - target[i, 0]
        dy = x[c, t, i, 1] - target[i, 1]
        loss[None] += (dx * dx + dy * dy) / x.shape[2]


def prepare_limit(cfg, ref):
    _runtime()
    steps = cfg["steps"]
    a, b, k, rest, free, target, loss = _shared(ref)
    x, v, f = _states(steps, ref["p0"])

    def by_hand():
        for t in range(steps):
            spring_forces_batched(x, f, a, b, k, rest, t)
            advance_batched(x, v, f, free, t)
        final_loss_batched(x, target, loss, steps)

    def zero():
        f.fill(0.0)
        loss.fill(0.0)

    return [_tape_op("tape fwd+bwd", by_hand, zero, loss, k, lambda: x.grad.to_numpy()[:, 0], ref)]

"""Workload 4, launch overhead: 1,000 launches of a tiny kernel (64 elements, `a[i] += 1`), then one sync;
reported in microseconds per launch. Two flavours: the array passed as an argument (spvad `sp.Array`,
Taichi/Quadrants `ndarray`), and bound as a global (a captured spvad ndarray, a Taichi/Quadrants field). And a
small-kernel Tape, where a GPU is launch-bound: 500 steps of `u[t+1, i] = u[t, i] * w[i] + 0.01` and a sum,
forward and reverse (1,002 launches), in microseconds per launch; checked against float64 gradients. And the
1,000 launches captured once (spvad: `sp.capture()`, then `g.replay()`; the limit: the same dispatches recorded
once into a secondary command buffer, rhi `record_batch` / `run_batch`), in microseconds per launch replayed."""
import numpy as np

import spvad as sp
from . import limit
from .common import Op, all_close, close_to, init_peer, init_spvad

NAME = "launch"
OPS = ("array argument", "global array", "tape fwd+bwd", "captured")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")
SIZE = 64


def config(quick):
    return {"launches": 200 if quick else 1000}


def title(cfg):
    return (f"launch overhead, {cfg['launches']:,} launches of a {SIZE}-element kernel + one sync; a Tape of "
            f"{_steps(cfg)} such steps, forward and reverse ({_tape_launches(cfg):,} launches) (us/launch)")


def _steps(cfg):
    return cfg["launches"] // 2


def _tape_launches(cfg):
    return 2 * (_steps(cfg) + 1)   # the steps and the sum, forward and reverse


def reference(cfg):
    """The Tape's inputs and, in float64, its loss and gradients (u0's, w's)."""
    rng, steps = np.random.default_rng(4), _steps(cfg)
    u0 = rng.uniform(0.5, 1.0, SIZE).astype(np.float32)
    w = rng.uniform(0.995, 1.0, SIZE).astype(np.float32)
    us = [u0.astype(np.float64)]
    for _ in range(steps):
        us.append(us[-1] * w + 0.01)
    g, gw = np.ones(SIZE), np.zeros(SIZE)
    for t in reversed(range(steps)):
        gw += us[t] * g
        g = g * w
    return {"u0": u0, "w": w, "loss": us[-1].sum(), "du0": g, "dw": gw}


def _tape_op(run, sync, setup, read, ref, cfg):
    """The small-kernel Tape: `read()` -> (loss, d loss / d u0, d loss / d w) after the warm-up run."""
    def check():
        loss, du0, dw = read()
        return all_close([("loss", close_to(np.array([loss]), np.array([ref["loss"]]), rtol=1e-4)),
                          ("u0.grad", close_to(du0, ref["du0"], rtol=1e-3)),
                          ("w.grad", close_to(dw, ref["dw"], rtol=1e-3))])
    return Op("tape fwd+bwd", run, sync, setup=setup, unit="us/launch", scale=1e6, per=_tape_launches(cfg),
              check=check)


def _op(name, launch_once, sync, read, cfg):
    """`launches` launches per run; the check counts every launch of the warm-up run."""
    count = cfg["launches"]
    done = {"runs": 0}

    def run():
        for _ in range(count):
            launch_once()
        done["runs"] += 1

    return Op(name, run, sync, unit="us/launch", scale=1e6, per=count,
              check=lambda: close_to(read(), np.full(SIZE, float(done["runs"] * count)), rtol=0.0))


def _captured_op(replay, sync, read, cfg):
    """A run replays the `launches` launches captured once; the check counts every launch replayed."""
    count = cfg["launches"]
    done = {"runs": 0}

    def run():
        replay()
        done["runs"] += 1

    return Op("captured", run, sync, unit="us/launch", scale=1e6, per=count,
              check=lambda: close_to(read(), np.full(SIZE, float(done["runs"] * count)), rtol=0.0))


# ---- spvad -------------------------------------------------------------------------------------------
@sp.kernel
def bump(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] += 1.0


def _bump_global_kernel(g):
    @sp.kernel
    def bump_global():
        for i in range(g.shape[0]):
            g[i] += 1.0
    return bump_global


@sp.kernel
def decay(u: sp.Array, w: sp.Array, t: sp.i32):
    for i in range(u.shape[1]):
        u[t + 1, i] = u[t, i] * w[i] + 0.01


@sp.kernel
def total(u: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(u.shape[1]):
        loss[None] += u[t, i]


def prepare_spvad(cfg, ref):
    init_spvad()
    a = sp.ndarray(sp.f32, (SIZE,))
    a.fill(0.0)
    g = sp.ndarray(sp.f32, (SIZE,))
    g.fill(0.0)
    bump_global = _bump_global_kernel(g)
    steps = _steps(cfg)
    u = sp.ndarray(sp.f32, (steps + 1, SIZE), needs_grad=True)
    u0 = np.zeros((steps + 1, SIZE), np.float32)
    u0[0] = ref["u0"]
    u.from_numpy(u0)
    w, loss = sp.from_numpy(ref["w"], needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)

    def tape():
        with sp.Tape(loss=loss):
            for t in range(steps):
                decay(u, w, t)
            total(u, loss, steps)

    c = sp.ndarray(sp.f32, (SIZE,))
    c.fill(0.0)
    with sp.capture() as captured:
        for _ in range(cfg["launches"]):
            bump(c)

    return [_op("array argument", lambda: bump(a), sp.sync, a.to_numpy, cfg),
            _op("global array", bump_global, sp.sync, g.to_numpy, cfg),
            _tape_op(tape, sp.sync, None, lambda: (loss[None], u.grad.to_numpy()[0], w.grad.to_numpy()), ref, cfg),
            _captured_op(captured.replay, sp.sync, c.to_numpy, cfg)]


# ---- the limit: one hand-written kernel (benchmarks/limit/launch_bump.comp) launched through spvad's RHI;
# a hand-written shader has no argument/global distinction, so both operations run it, each on its own buffer.
def prepare_limit(cfg, ref):
    dev = limit.device()
    bump_limit = limit.Shader(dev, "launch_bump", 1, local_size=SIZE)
    a, g, c = (limit.upload(dev, np.zeros(SIZE, np.float32)) for _ in range(3))
    return [_op("array argument", bump_limit.launcher([a], SIZE), dev.sync,
                lambda: limit.read(a, np.float32, SIZE), cfg),
            _op("global array", bump_limit.launcher([g], SIZE), dev.sync,
                lambda: limit.read(g, np.float32, SIZE), cfg),
            _limit_tape(dev, cfg, ref),
            _limit_captured(dev, bump_limit, c, cfg)]


def _limit_captured(dev, shader, buf, cfg):
    """The same `launches` dispatches recorded once into one secondary command buffer, run again as a whole."""
    batch = dev.record_batch([shader.dispatch([buf], SIZE)] * cfg["launches"])

    def replay():
        if not dev.run_batch(batch):
            raise RuntimeError("the recorded batch went stale")
    return _captured_op(replay, dev.sync, lambda: limit.read(buf, np.float32, SIZE), cfg)


def _limit_tape(dev, cfg, ref):
    """The small-kernel Tape by hand: the steps forward, then their reverse in place on one gradient row (g), so
    the reverse zeroes nothing but w.grad (in its first kernel). The loss (a sum) starts at zero."""
    if not dev.info["features"].get("atomic_float32_add"):
        return _unavailable_tape("the hand-written loss needs 32-bit float atomic add (VK_EXT_shader_atomic_float)")
    steps = _steps(cfg)
    us = np.zeros((steps + 1, SIZE), np.float32)
    us[0] = ref["u0"]
    u, w = limit.upload(dev, us), limit.upload(dev, ref["w"])
    loss, gu, gw = limit.buffer(dev, 4), limit.buffer(dev, 4 * SIZE), limit.buffer(dev, 4 * SIZE)
    shader = {name: limit.Shader(dev, f"launch_{name}", buffers, push, local_size=SIZE) for name, buffers, push in (
        ("decay", 2, "II"), ("total", 2, "II"), ("decay_grad", 4, "II"), ("total_grad", 2, ""))}
    launches = [shader["decay"].launcher([u, w], SIZE, SIZE, t) for t in range(steps)]
    launches += [shader["total"].launcher([u, loss], SIZE, SIZE, steps), shader["total_grad"].launcher([gu, gw], SIZE)]
    launches += [shader["decay_grad"].launcher([u, w, gu, gw], SIZE, SIZE, t) for t in reversed(range(steps))]

    def run():
        for launch in launches:
            launch()

    def reset():
        loss.view(np.float32)[:] = 0.0

    read = lambda: (limit.read(loss, np.float32, 1)[0], limit.read(gu, np.float32, SIZE),  # noqa: E731
                    limit.read(gw, np.float32, SIZE))
    return _tape_op(run, dev.sync, reset, read, ref, cfg)


def _unavailable_tape(why):
    def refuse():
        raise RuntimeError(why)
    return Op("tape fwd+bwd", refuse, lambda: None)


# ---- Taichi and Quadrants ------------------------------------------------------------------------------
def _prepare_taichi_like(system, cfg, ref):
    ti = init_peer(system)
    a = ti.ndarray(ti.f32, SIZE)
    a.fill(0.0)
    g = ti.field(ti.f32, SIZE)
    steps = _steps(cfg)
    u = ti.field(ti.f32, (steps + 1, SIZE), needs_grad=True)
    w = ti.field(ti.f32, SIZE, needs_grad=True)
    loss = ti.field(ti.f32, (), needs_grad=True)

    @ti.kernel
    def bump_peer(a: ti.types.ndarray()):
        for i in a:
            a[i] += 1.0

    @ti.kernel
    def bump_global_peer():
        for i in g:
            g[i] += 1.0

    @ti.kernel
    def decay_peer(t: ti.i32):
        for i in range(SIZE):
            u[t + 1, i] = u[t, i] * w[i] + 0.01

    @ti.kernel
    def total_peer(t: ti.i32):
        for i in range(SIZE):
            loss[None] += u[t, i]

    us = np.zeros((steps + 1, SIZE), np.float32)
    us[0] = ref["u0"]
    u.from_numpy(us)
    w.from_numpy(ref["w"])

    def tape():
        with ti.ad.Tape(loss=loss):
            for t in range(steps):
                decay_peer(t)
            total_peer(steps)

    return [_op("array argument", lambda: bump_peer(a), ti.sync, a.to_numpy, cfg),
            _op("global array", bump_global_peer, ti.sync, g.to_numpy, cfg),
            _tape_op(tape, ti.sync, None, lambda: (loss[None], u.grad.to_numpy()[0], w.grad.to_numpy()), ref, cfg)]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)

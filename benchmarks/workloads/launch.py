"""Workload 4, launch overhead: 1,000 launches of a tiny kernel (64 elements, `a[i] += 1`), then one sync;
reported in microseconds per launch. Two flavours: the array passed as an argument (spvad `sp.Array`,
Taichi/Quadrants `ndarray`), and bound as a global (a captured spvad ndarray, a Taichi/Quadrants field)."""
import numpy as np

import spvad as sp
from . import limit
from .common import Op, close_to, init_peer, init_spvad

NAME = "launch"
OPS = ("array argument", "global array")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")
SIZE = 64


def config(quick):
    return {"launches": 200 if quick else 1000}


def title(cfg):
    return f"launch overhead, {cfg['launches']:,} launches of a {SIZE}-element kernel + one sync (us/launch)"


def reference(cfg):
    return {}


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


def prepare_spvad(cfg, ref):
    init_spvad()
    a = sp.ndarray(sp.f32, (SIZE,))
    a.fill(0.0)
    g = sp.ndarray(sp.f32, (SIZE,))
    g.fill(0.0)
    bump_global = _bump_global_kernel(g)
    return [_op("array argument", lambda: bump(a), sp.sync, a.to_numpy, cfg),
            _op("global array", bump_global, sp.sync, g.to_numpy, cfg)]


# ---- the limit: one hand-written kernel (benchmarks/limit/launch_bump.comp) launched through spvad's RHI;
# a hand-written shader has no argument/global distinction, so both operations run it, each on its own buffer.
def prepare_limit(cfg, ref):
    dev = limit.device()
    bump_limit = limit.Shader(dev, "launch_bump", 1, local_size=SIZE)
    a, g = (limit.upload(dev, np.zeros(SIZE, np.float32)) for _ in range(2))
    return [_op("array argument", bump_limit.launcher([a], SIZE), dev.sync,
                lambda: limit.read(a, np.float32, SIZE), cfg),
            _op("global array", bump_limit.launcher([g], SIZE), dev.sync,
                lambda: limit.read(g, np.float32, SIZE), cfg)]


# ---- Taichi and Quadrants ------------------------------------------------------------------------------
def _prepare_taichi_like(system, cfg, ref):
    ti = init_peer(system)
    a = ti.ndarray(ti.f32, SIZE)
    a.fill(0.0)
    g = ti.field(ti.f32, SIZE)

    @ti.kernel
    def bump_peer(a: ti.types.ndarray()):
        for i in a:
            a[i] += 1.0

    @ti.kernel
    def bump_global_peer():
        for i in g:
            g[i] += 1.0

    return [_op("array argument", lambda: bump_peer(a), ti.sync, a.to_numpy, cfg),
            _op("global array", bump_global_peer, ti.sync, g.to_numpy, cfg)]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)

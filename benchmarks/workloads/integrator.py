"""Workload 1, dynamic-loop integrator: per thread `v = v + 0.01*sin(v)*w[i]` for `steps` iterations, the
bound a runtime scalar argument; forward and reverse. spvad sizes its adstack at launch; Taichi and Quadrants
are given a fixed `ad_stack_size` (Quadrants: the smallest that does not overflow, steps + 2)."""
import numpy as np

import spvad as sp
from . import limit
from .common import Op, all_close, close_to, init_peer, init_spvad, peer_adstack_config

NAME = "integrator"
OPS = ("forward", "gradient")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")


def config(quick):
    return {"threads": 4096 if quick else 65536, "steps": 16 if quick else 64}


def title(cfg):
    return f"dynamic-loop integrator, {cfg['threads']:,} threads x {cfg['steps']} iterations (runtime bound)"


def reference(cfg):
    """Inputs, float64 outputs and per-element d y/d x, d y/d w (forward-mode in numpy)."""
    rng = np.random.default_rng(0)
    n, steps = cfg["threads"], cfg["steps"]
    x = rng.uniform(0.5, 1.5, n).astype(np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    v, dx, dw = x.astype(np.float64), np.ones(n), np.zeros(n)
    wd = w.astype(np.float64)
    for _ in range(steps):
        s, c = np.sin(v), np.cos(v)
        dx = dx + 0.01 * c * wd * dx
        dw = dw + 0.01 * (c * wd * dw + s)
        v = v + 0.01 * s * wd
    return {"x": x, "w": w, "y": v, "dx": dx, "dw": dw}


def _check_forward(y, ref):
    return close_to(y, ref["y"], rtol=1e-4, atol=1e-5)


def _check_gradient(gx, gw, ref):
    return all_close([("x.grad", close_to(gx, ref["dx"], rtol=1e-3, atol=1e-5)),
                      ("w.grad", close_to(gw, ref["dw"], rtol=1e-3, atol=1e-5))])


# ---- spvad -------------------------------------------------------------------------------------------
def make_integrate(rate=0.01):
    """The integrator kernel with its rate a compile-time constant (another rate: another kernel to compile)."""
    @sp.kernel
    def integrate(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
        for i in range(x.shape[0]):
            v = x[i]
            for _ in range(steps):
                v = v + rate * sp.sin(v) * w[i]
            y[i] = v
    return integrate


integrate = make_integrate()


def prepare_spvad(cfg, ref):
    init_spvad()
    steps = cfg["steps"]
    x = sp.from_numpy(ref["x"], needs_grad=True)
    w = sp.from_numpy(ref["w"], needs_grad=True)
    y = sp.ndarray(sp.f32, (cfg["threads"],), needs_grad=True)

    def seed():
        x.grad.fill(0.0)
        w.grad.fill(0.0)
        y.grad.fill(1.0)

    return [Op("forward", lambda: integrate(x, w, y, steps), sp.sync,
               check=lambda: _check_forward(y.to_numpy(), ref)),
            Op("gradient", lambda: integrate.grad(x, w, y, steps), sp.sync, setup=seed,
               check=lambda: _check_gradient(x.grad.to_numpy(), w.grad.to_numpy(), ref))]


# ---- the limit: hand-written GLSL (benchmarks/limit/integrator_*.comp) through spvad's RHI ----------------
def prepare_limit(cfg, ref):
    dev = limit.device()
    n, steps = cfg["threads"], cfg["steps"]
    x, w = limit.upload(dev, ref["x"]), limit.upload(dev, ref["w"])
    y, gy, gx, gw = (limit.buffer(dev, 4 * n) for _ in range(4))
    forward = limit.Shader(dev, "integrator_forward", 3, "Ii")
    gradient = limit.Shader(dev, "integrator_gradient", 5, "Ii", spec={1: steps})   # stack capacity = steps

    def seed():
        gx.view(np.float32)[:n] = 0.0
        gw.view(np.float32)[:n] = 0.0
        gy.view(np.float32)[:n] = 1.0

    return [Op("forward", forward.launcher([x, w, y], n, n, steps), dev.sync,
               check=lambda: _check_forward(limit.read(y, np.float32, n), ref)),
            Op("gradient", gradient.launcher([x, w, gy, gx, gw], n, n, steps), dev.sync, setup=seed,
               check=lambda: _check_gradient(limit.read(gx, np.float32, n), limit.read(gw, np.float32, n), ref))]


# ---- Taichi and Quadrants (same language; Quadrants is a fork of Taichi) --------------------------------
def build_peer(ti, n, rate=0.01):
    """Fields x, w, y (n,) with gradients and the integrator kernel (also used by the compile workload)."""
    x = ti.field(ti.f32, n, needs_grad=True)
    w = ti.field(ti.f32, n, needs_grad=True)
    y = ti.field(ti.f32, n, needs_grad=True)
    return x, w, y, build_peer_kernel(ti, x, w, y, rate)


def build_peer_kernel(ti, x, w, y, rate=0.01):
    @ti.kernel
    def integrate_peer(steps: ti.i32):
        for i in x:
            v = x[i]
            for _ in range(steps):
                v = v + rate * ti.sin(v) * w[i]
            y[i] = v

    return integrate_peer


def _prepare_taichi_like(system, cfg, ref):
    n, steps = cfg["threads"], cfg["steps"]
    ti = init_peer(system, **peer_adstack_config(system, steps + 2))
    x, w, y, integrate_peer = build_peer(ti, n)
    x.from_numpy(ref["x"])
    w.from_numpy(ref["w"])

    def seed():
        x.grad.fill(0.0)
        w.grad.fill(0.0)
        y.grad.fill(1.0)

    return [Op("forward", lambda: integrate_peer(steps), ti.sync,
               check=lambda: _check_forward(y.to_numpy(), ref)),
            Op("gradient", lambda: integrate_peer.grad(steps), ti.sync, setup=seed,
               check=lambda: _check_gradient(x.grad.to_numpy(), w.grad.to_numpy(), ref))]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)

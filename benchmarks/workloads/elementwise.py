"""Workload 2, elementwise: y = tanh(1.5*x + 0.2) over 16M float32 values, forward and reverse, with numpy's
float32 forward as a CPU baseline. Taichi/Quadrants run with default_gpu_block_dim=512: with their default
128, a 16M-element loop needs 131,072 workgroups, past the 65,535 lavapipe allows, and fails to dispatch."""
import numpy as np

import spvad as sp
from . import limit
from .common import Op, close_to, init_peer, init_spvad

NAME = "elementwise"
OPS = ("forward", "gradient", "d2d copy")   # d2d copy: y = x by the device's copy, the bandwidth to compare with
SYSTEMS = ("spvad", "limit", "taichi", "quadrants", "numpy")


def config(quick):
    return {"n": 1 << (20 if quick else 24)}


def title(cfg):
    return f"elementwise tanh(1.5*x + 0.2), {cfg['n']:,} float32"


def reference(cfg):
    x = np.random.default_rng(1).uniform(-2.0, 2.0, cfg["n"]).astype(np.float32)
    t = np.tanh(1.5 * x.astype(np.float64) + 0.2)
    return {"x": x, "y": t, "dx": 1.5 * (1.0 - t * t)}


def _check_forward(y, ref):
    return close_to(y, ref["y"], rtol=1e-5, atol=1e-6)


def _check_gradient(gx, ref):
    return close_to(gx, ref["dx"], rtol=1e-4, atol=1e-6)


# ---- spvad -------------------------------------------------------------------------------------------
@sp.kernel
def tanh_affine(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.tanh(1.5 * x[i] + 0.2)


def prepare_spvad(cfg, ref):
    init_spvad()
    x = sp.from_numpy(ref["x"], needs_grad=True)
    y = sp.ndarray(sp.f32, (cfg["n"],), needs_grad=True)

    def seed():
        x.grad.fill(0.0)
        y.grad.fill(1.0)

    return [Op("forward", lambda: tanh_affine(x, y), sp.sync, check=lambda: _check_forward(y.to_numpy(), ref)),
            Op("gradient", lambda: tanh_affine.grad(x, y), sp.sync, setup=seed,
               check=lambda: _check_gradient(x.grad.to_numpy(), ref)),
            Op("d2d copy", lambda: y.copy_from(x), sp.sync, check=lambda: check_copy(y.to_numpy(), ref))]


def check_copy(y, ref):
    same = bool(np.array_equal(y, ref["x"]))
    return same, "bitwise copy" if same else "the copy differs from x"


# ---- the limit: hand-written GLSL (benchmarks/limit/elementwise_*.comp) through spvad's RHI ---------------
def prepare_limit(cfg, ref):
    dev = limit.device()
    n = cfg["n"]
    assert n % 4 == 0, "the hand-written kernels take four elements per thread"
    x = limit.upload(dev, ref["x"])
    y, gy, gx = (limit.buffer(dev, 4 * n) for _ in range(3))
    forward = limit.Shader(dev, "elementwise_forward", 2, "I")
    gradient = limit.Shader(dev, "elementwise_gradient", 3, "I")

    def seed():
        gx.view(np.float32)[:n] = 0.0
        gy.view(np.float32)[:n] = 1.0

    return [Op("forward", forward.launcher([x, y], n // 4, n // 4), dev.sync,
               check=lambda: _check_forward(limit.read(y, np.float32, n), ref)),
            Op("gradient", gradient.launcher([x, gy, gx], n // 4, n // 4), dev.sync, setup=seed,
               check=lambda: _check_gradient(limit.read(gx, np.float32, n), ref))]


# ---- Taichi and Quadrants ------------------------------------------------------------------------------
def _prepare_taichi_like(system, cfg, ref):
    ti = init_peer(system, default_gpu_block_dim=512)
    x = ti.field(ti.f32, cfg["n"], needs_grad=True)
    y = ti.field(ti.f32, cfg["n"], needs_grad=True)

    @ti.kernel
    def tanh_affine_peer():
        for i in x:
            y[i] = ti.tanh(1.5 * x[i] + 0.2)

    x.from_numpy(ref["x"])

    def seed():
        x.grad.fill(0.0)
        y.grad.fill(1.0)

    return [Op("forward", tanh_affine_peer, ti.sync, check=lambda: _check_forward(y.to_numpy(), ref)),
            Op("gradient", tanh_affine_peer.grad, ti.sync, setup=seed,
               check=lambda: _check_gradient(x.grad.to_numpy(), ref))]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)


# ---- numpy (CPU, float32, forward only: it has no autodiff) ------------------------------------------------
def prepare_numpy(cfg, ref):
    x = ref["x"]
    out = {}

    def forward():
        out["y"] = np.tanh(1.5 * x + np.float32(0.2))

    return [Op("forward", forward, lambda: None, check=lambda: _check_forward(out["y"], ref))]

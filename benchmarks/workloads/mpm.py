"""Workload 6, MLS-MPM: one substep of examples/mpm.py (particles to grid with a polar decomposition per
particle, grid update, grid to particles) on a block of particles, forward, and forward + reverse under a
Tape with the mean squared distance to a target as the loss. Reference: the example's float64 numpy version
(`simulate_numpy`): the loss, and d loss / d v0 (the initial velocity, one vec2) by central differences.
spvad runs the example's own kernels; Taichi and Quadrants the same algorithm written DiffTaichi-style."""
import importlib.util
import os

import numpy as np

import spvad as sp
from .common import Op, all_close, close_to, init_peer, init_spvad

NAME = "mpm"
OPS = ("forward", "tape fwd+bwd")
SYSTEMS = ("spvad", "taichi", "quadrants")
V0, TARGET = np.array([1.0, -1.0]), np.array([0.62, 0.42])


def _example():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mpm.py")
    spec = importlib.util.spec_from_file_location("mpm_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mpm = _example()


def config(quick):
    return {"side": 16 if quick else 48}


def title(cfg):
    return f"MLS-MPM substep, {cfg['side'] ** 2:,} particles, grid {mpm.GRID}x{mpm.GRID}"


def reference(cfg):
    x0 = mpm.block(cfg["side"], corner=(0.3, 0.12), size=0.3)
    loss, x1 = mpm.simulate_numpy(x0, V0, TARGET, 1)
    eps = 1e-6
    dv = [(mpm.simulate_numpy(x0, V0 + eps * e, TARGET, 1)[0] - mpm.simulate_numpy(x0, V0 - eps * e, TARGET, 1)[0])
          / (2 * eps) for e in np.eye(2)]
    return {"x0": x0, "loss": loss, "x1": x1, "dv": np.array(dv)}


def _check_forward(loss, ref):
    return close_to(np.array([loss]), np.array([ref["loss"]]), rtol=1e-4)


def _check_gradient(dv, ref):
    return all_close([("v0.grad", close_to(dv, ref["dv"], rtol=2e-3, atol=2e-3 * np.abs(ref["dv"]).max()))])


# ---- spvad: the example's Simulation, one step ---------------------------------------------------------------
def prepare_spvad(cfg, ref):
    init_spvad()
    sim = mpm.Simulation(ref["x0"], 1)
    sim.v0.from_numpy(V0.astype(np.float32).reshape(1, 2))
    sim.target.from_numpy(TARGET.astype(np.float32).reshape(1, 2))

    def forward():
        mpm.launch(sim.v, sim.v0)
        mpm.p2g(sim.x, sim.v, sim.C, sim.F, sim.grid_v_in, sim.grid_m, 0)
        mpm.grid_update(sim.grid_v_in, sim.grid_m, sim.grid_v, 0)
        mpm.g2p(sim.x, sim.v, sim.C, sim.grid_v, 0)
        mpm.distance_loss(sim.x, sim.target, sim.loss, 1)

    def reset():
        for a in (sim.grid_v_in, sim.grid_m, sim.grid_v, sim.loss):
            a.fill(0.0)

    def tape():
        with sp.Tape(loss=sim.loss):
            forward()

    return [Op("forward", forward, sp.sync, setup=reset, check=lambda: _check_forward(sim.loss[None], ref)),
            Op("tape fwd+bwd", tape, sp.sync, setup=reset,
               check=lambda: _check_gradient(sim.v0.grad.to_numpy()[0], ref))]


# ---- Taichi and Quadrants: DiffTaichi's diffmpm, one step --------------------------------------------------
def _prepare_taichi_like(system, cfg, ref):
    ti = init_peer(system)
    n, G = len(ref["x0"]), mpm.GRID
    dx, inv_dx, dt, p_vol, p_mass = mpm.DX, mpm.INV_DX, mpm.DT, mpm.P_VOL, mpm.P_MASS
    mu, la, gravity, bound = mpm.MU, mpm.LA, mpm.GRAVITY, mpm.BOUND
    x, v = (ti.Vector.field(2, ti.f32, (2, n), needs_grad=True) for _ in range(2))
    C, F = (ti.Matrix.field(2, 2, ti.f32, (2, n), needs_grad=True) for _ in range(2))
    grid_v_in, grid_v = (ti.Vector.field(2, ti.f32, (G, G), needs_grad=True) for _ in range(2))
    grid_m = ti.field(ti.f32, (G, G), needs_grad=True)
    v0 = ti.Vector.field(2, ti.f32, (), needs_grad=True)
    target = ti.Vector.field(2, ti.f32, ())
    loss = ti.field(ti.f32, (), needs_grad=True)

    @ti.kernel
    def launch_peer():
        for p in range(n):
            v[0, p] = v0[None]

    @ti.kernel
    def p2g_peer():
        for p in range(n):
            base = ti.cast(x[0, p] * inv_dx - 0.5, ti.i32)
            fx = x[0, p] * inv_dx - ti.cast(base, ti.f32)
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
            new_F = (ti.Matrix.identity(ti.f32, 2) + dt * C[0, p]) @ F[0, p]
            F[1, p] = new_F
            J = new_F.determinant()
            r, s = ti.polar_decompose(new_F)
            cauchy = 2.0 * mu * (new_F - r) @ new_F.transpose() + ti.Matrix.identity(ti.f32, 2) * (
                la * (J - 1.0) * J)
            affine = -(dt * p_vol * 4.0 * inv_dx * inv_dx) * cauchy + p_mass * C[0, p]
            for i in ti.static(range(3)):
                for j in ti.static(range(3)):
                    offset = ti.Vector([i, j])
                    dpos = (ti.cast(offset, ti.f32) - fx) * dx
                    weight = w[i][0] * w[j][1]
                    grid_v_in[base + offset] += weight * (p_mass * v[0, p] + affine @ dpos)
                    grid_m[base + offset] += weight * p_mass

    @ti.kernel
    def grid_peer():
        for i, j in grid_m:
            if grid_m[i, j] > 0.0:
                vv = grid_v_in[i, j] / grid_m[i, j]
                vv[1] -= dt * gravity
                if i < bound and vv[0] < 0.0:
                    vv[0] = 0.0
                if i > G - bound and vv[0] > 0.0:
                    vv[0] = 0.0
                if j < bound and vv[1] < 0.0:
                    vv[1] = 0.0
                if j > G - bound and vv[1] > 0.0:
                    vv[1] = 0.0
                grid_v[i, j] = vv

    @ti.kernel
    def g2p_peer():
        for p in range(n):
            base = ti.cast(x[0, p] * inv_dx - 0.5, ti.i32)
            fx = x[0, p] * inv_dx - ti.cast(base, ti.f32)
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
            new_v = ti.Vector([0.0, 0.0])
            new_C = ti.Matrix([[0.0, 0.0], [0.0, 0.0]])
            for i in ti.static(range(3)):
                for j in ti.static(range(3)):
                    dpos = ti.cast(ti.Vector([i, j]), ti.f32) - fx
                    g_v = grid_v[base + ti.Vector([i, j])]
                    weight = w[i][0] * w[j][1]
                    new_v += weight * g_v
                    new_C += 4.0 * inv_dx * weight * g_v.outer_product(dpos)
            v[1, p] = new_v
            C[1, p] = new_C
            x[1, p] = x[0, p] + dt * new_v

    @ti.kernel
    def loss_peer():
        for p in range(n):
            d = x[1, p] - target[None]
            loss[None] += d.dot(d) / n

    xs = np.zeros((2, n, 2), np.float32)
    xs[0] = ref["x0"]
    x.from_numpy(xs)
    Fs = np.zeros((2, n, 2, 2), np.float32)
    Fs[0] = np.eye(2)
    F.from_numpy(Fs)
    v0.from_numpy(V0.astype(np.float32))
    target.from_numpy(TARGET.astype(np.float32))

    def forward():
        launch_peer()
        p2g_peer()
        grid_peer()
        g2p_peer()
        loss_peer()

    def reset():
        for a in (grid_v_in, grid_m, grid_v, loss):
            a.fill(0.0)

    def tape():
        with ti.ad.Tape(loss=loss):
            forward()

    return [Op("forward", forward, ti.sync, setup=reset, check=lambda: _check_forward(loss[None], ref)),
            Op("tape fwd+bwd", tape, ti.sync, setup=reset,
               check=lambda: _check_gradient(v0.grad.to_numpy(), ref))]


def prepare_taichi(cfg, ref):
    return _prepare_taichi_like("taichi", cfg, ref)


def prepare_quadrants(cfg, ref):
    return _prepare_taichi_like("quadrants", cfg, ref)

"""Workload 6, MLS-MPM: one substep of examples/mpm.py (particles to grid with a polar decomposition per
particle, grid update, grid to particles) on a block of particles, forward, and forward + reverse under a
Tape with the mean squared distance to a target as the loss. Reference: the example's float64 numpy version
(`simulate_numpy`): the loss, and d loss / d v0 (the initial velocity, one vec2) by central differences.
spvad runs the example's own kernels; the limit hand-written GLSL (forward and hand-derived reverse); Taichi
and Quadrants the same algorithm written DiffTaichi-style."""
import importlib.util
import os

import numpy as np

import spvad as sp
from . import limit
from .common import Op, Unavailable, all_close, close_to, init_peer, init_spvad

NAME = "mpm"
OPS = ("forward", "tape fwd+bwd")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")
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


# ---- the limit: hand-written GLSL (benchmarks/limit/mpm_*.comp) through spvad's RHI -------------------------
class LimitSimulation:
    """The example's kernels by hand: launch, then per step p2g, grid update and g2p, then the loss; the reverse
    is hand-derived (see the *_grad shaders), one kernel per forward kernel, and runs the steps backwards. The
    layout is the example's: x, v, C, F with one row per step (steps + 1, n), the grids one per step (steps, G,
    G); 2x2 matrices are vec4s in GLSL's column-major mat2 order. The gradients are single rows, (n,) for the
    particles and (G, G) for the grid, updated in place; the first reverse kernel (loss_grad) sets all it needs
    to start from. The workload runs one step, from F = I, where d loss / d v0 does not pass through the stress;
    more `steps` (or another F[0]) make it do so, which is how the polar decomposition's reverse was checked."""

    def __init__(self, dev, x0, steps=1, local_size=64):
        n, nodes = len(x0), mpm.GRID * mpm.GRID
        self.n = n

        def zeros(*shape):
            return limit.buffer(dev, 4 * int(np.prod(shape)))

        rows = np.zeros((steps + 1, n, 2), np.float32)
        rows[0] = x0
        mats = np.zeros((steps + 1, n, 4), np.float32)
        mats[0] = (1.0, 0.0, 0.0, 1.0)                                  # F = I
        self.x, self.v, self.C, self.F = limit.upload(dev, rows), zeros(steps + 1, n, 2), zeros(steps + 1, n, 4), \
            limit.upload(dev, mats)
        self.grid_v_in, self.grid_v = zeros(steps, nodes, 2), zeros(steps, nodes, 2)
        self.grid_m = zeros(steps, nodes)
        self.v0, target = limit.upload(dev, V0.astype(np.float32)), limit.upload(dev, TARGET.astype(np.float32))
        self.loss = zeros(1)
        self.gx, self.gv, self.gC, self.gF = zeros(n, 2), zeros(n, 2), zeros(n, 4), zeros(n, 4)
        ggrid_v, ggrid_v_in, ggrid_m = zeros(nodes, 2), zeros(nodes, 2), zeros(nodes)
        self.gv0 = zeros(2)

        defines = {"DT": mpm.DT, "DX": mpm.DX, "INV_DX": mpm.INV_DX, "P_VOL": mpm.P_VOL, "P_MASS": mpm.P_MASS,
                   "MU": mpm.MU, "LA": mpm.LA, "GRAVITY": mpm.GRAVITY, "GRID": mpm.GRID, "BOUND": mpm.BOUND}
        shaders = {name: limit.Shader(dev, f"mpm_{name}", num_buffers, push_format, local_size=local_size,
                                      defines=defines)
                   for name, num_buffers, push_format in (
                       ("launch", 2, "I"), ("p2g", 6, "II"), ("grid", 3, "I"), ("g2p", 4, "II"), ("loss", 3, "II"),
                       ("loss_grad", 8, "II"), ("g2p_grad", 6, "II"), ("grid_grad", 5, "I"), ("p2g_grad", 10, "II"),
                       ("launch_grad", 2, "I"))}

        def launcher(name, buffers, threads, *push):
            return shaders[name].launcher(buffers, threads, *push)

        x, v, C, F, gx, gv, gC, gF = self.x, self.v, self.C, self.F, self.gx, self.gv, self.gC, self.gF
        self.forward_launches = [launcher("launch", [v, self.v0], n, n)]
        for f in range(steps):
            self.forward_launches += [
                launcher("p2g", [x, v, C, F, self.grid_v_in, self.grid_m], n, n, f),
                launcher("grid", [self.grid_v_in, self.grid_m, self.grid_v], nodes, f),
                launcher("g2p", [x, v, C, self.grid_v], n, n, f)]
        self.forward_launches.append(launcher("loss", [x, target, self.loss], n, n, steps))
        reverse = [launcher("loss_grad", [x, target, gx, gv, gC, gF, ggrid_v, self.gv0], max(n, nodes), n, steps)]
        for f in reversed(range(steps)):
            reverse += [
                launcher("g2p_grad", [x, self.grid_v, gx, gv, gC, ggrid_v], n, n, f),
                launcher("grid_grad", [self.grid_v_in, self.grid_m, ggrid_v, ggrid_v_in, ggrid_m], nodes, f),
                launcher("p2g_grad", [x, v, C, F, ggrid_v_in, ggrid_m, gx, gv, gC, gF], n, n, f)]
        reverse.append(launcher("launch_grad", [gv, self.gv0], n, n))
        self.tape_launches = self.forward_launches + reverse

    def reset(self):
        """p2g and the loss add into the grids and the loss: they start at zero."""
        for buf in (self.grid_v_in, self.grid_m, self.loss):
            buf.view(np.float32)[:] = 0.0

    def forward(self):
        for launch in self.forward_launches:
            launch()

    def tape(self):
        for launch in self.tape_launches:
            launch()

    def loss_value(self):
        return limit.read(self.loss, np.float32, 1)[0]

    def v0_grad(self):
        return limit.read(self.gv0, np.float32, 2)


def prepare_limit(cfg, ref):
    dev = limit.device()
    if not dev.info["features"].get("atomic_float32_add"):
        raise Unavailable("the hand-written kernels need 32-bit float atomic add (VK_EXT_shader_atomic_float)")
    sim = LimitSimulation(dev, ref["x0"])
    return [Op("forward", sim.forward, dev.sync, setup=sim.reset,
               check=lambda: _check_forward(sim.loss_value(), ref)),
            Op("tape fwd+bwd", sim.tape, dev.sync, setup=sim.reset,
               check=lambda: _check_gradient(sim.v0_grad(), ref))]


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

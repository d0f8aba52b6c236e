"""A differentiable 2-D MLS-MPM (moving least squares material point method, as in DiffTaichi's diffmpm): a
block of elastic particles (fixed-corotated stress through a polar decomposition) is thrown under gravity;
gradient descent on its initial velocity brings the particles after the last step close to a target point
(the loss: their mean squared distance to it).

Each step is three kernels (particles to grid, grid update, grid to particles) over arrays with one row per
step (x, v, C, F: (steps + 1, n); the grid: (steps, G, G)), so sp.Tape keeps nothing and the reverse pass
reads each step's state where the forward left it. The same algorithm in float64 numpy (`simulate_numpy`)
checks the gradient (tests/examples/test_mpm.py).

    python examples/mpm.py [--particles N] [--steps T] [--iters K] [--picture mpm.png]

The picture needs Pillow (`pip install pillow`); without it the example says so and skips it."""
import argparse

import numpy as np

import spvad as sp

GRID = 32
DX = 1.0 / GRID
INV_DX = float(GRID)
DT = 1e-3
P_VOL = (DX * 0.5) ** 2
P_MASS = P_VOL * 1.0
E, NU = 400.0, 0.2
MU = E / (2 * (1 + NU))
LA = E * NU / ((1 + NU) * (1 - 2 * NU))
GRAVITY = 9.8
BOUND = 3            # grid nodes next to the walls: velocities into a wall are cut


# ---- spvad -------------------------------------------------------------------------------------------------
@sp.func
def weights(fx):
    """Quadratic B-spline weights of the three grid nodes around a particle (fx: its offset in cells)."""
    return 0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2


@sp.func
def stencil(x):
    """A particle's 3x3 grid stencil: its lower-left node (bx, by), the particle's offset from it in cells,
    and the weights of the nodes along each axis."""
    xp = x * INV_DX
    bx = int(xp[0] - 0.5)
    by = int(xp[1] - 0.5)
    fx = xp - sp.vec2(float(bx), float(by))
    return bx, by, fx, weights(fx[0]), weights(fx[1])


@sp.kernel
def p2g(x: sp.Array, v: sp.Array, C: sp.Array, F: sp.Array, grid_v_in: sp.Array, grid_m: sp.Array, f: sp.i32):
    for p in range(x.shape[1]):
        bx, by, fx, wx, wy = stencil(x[f, p])
        new_F = (sp.mat2.identity() + DT * C[f, p]) @ F[f, p]
        F[f + 1, p] = new_F
        J = sp.determinant(new_F)
        r, s = sp.polar_decompose(new_F)
        cauchy = 2.0 * MU * (new_F - r) @ new_F.T + sp.mat2.identity() * (LA * (J - 1.0) * J)
        affine = -(DT * P_VOL * 4.0 * INV_DX * INV_DX) * cauchy + P_MASS * C[f, p]
        for i in sp.static(range(3)):
            for j in sp.static(range(3)):
                dpos = (sp.vec2(float(i), float(j)) - fx) * DX
                weight = wx[i] * wy[j]
                grid_v_in[f, bx + i, by + j] += weight * (P_MASS * v[f, p] + affine @ dpos)
                grid_m[f, bx + i, by + j] += weight * P_MASS


@sp.kernel
def grid_update(grid_v_in: sp.Array, grid_m: sp.Array, grid_v: sp.Array, f: sp.i32):
    for i, j in sp.ndrange(GRID, GRID):
        m = grid_m[f, i, j]
        if m > 0.0:
            vx = grid_v_in[f, i, j][0] / m
            vy = grid_v_in[f, i, j][1] / m - DT * GRAVITY
            if i < BOUND and vx < 0.0:
                vx = 0.0
            if i > GRID - BOUND and vx > 0.0:
                vx = 0.0
            if j < BOUND and vy < 0.0:
                vy = 0.0
            if j > GRID - BOUND and vy > 0.0:
                vy = 0.0
            grid_v[f, i, j] = sp.vec2(vx, vy)


@sp.kernel
def g2p(x: sp.Array, v: sp.Array, C: sp.Array, grid_v: sp.Array, f: sp.i32):
    for p in range(x.shape[1]):
        bx, by, fx, wx, wy = stencil(x[f, p])
        new_v = sp.vec2(0.0, 0.0)
        new_C = sp.mat2.zero()
        for i in sp.static(range(3)):
            for j in sp.static(range(3)):
                dpos = sp.vec2(float(i), float(j)) - fx
                g_v = grid_v[f, bx + i, by + j]
                weight = wx[i] * wy[j]
                new_v += weight * g_v
                new_C += (4.0 * INV_DX * weight) * sp.outer(g_v, dpos)
        v[f + 1, p] = new_v
        C[f + 1, p] = new_C
        x[f + 1, p] = x[f, p] + DT * new_v


@sp.kernel
def launch(v: sp.Array, v0: sp.Array):
    for p in range(v.shape[1]):
        v[0, p] = v0[0]


@sp.kernel
def distance_loss(x: sp.Array, target: sp.Array, loss: sp.Array, f: sp.i32):
    """The mean squared distance of the particles after step f to the target point."""
    for p in range(x.shape[1]):
        d = x[f, p] - target[0]
        loss[None] += sp.dot(d, d) / x.shape[1]


class Simulation:
    """The arrays of one run: particles (steps + 1 rows), grids (one per step), the loss and v0."""

    def __init__(self, x0, steps):
        n = len(x0)
        self.steps, self.n = steps, n
        self.x = sp.ndarray(sp.vec2, (steps + 1, n), needs_grad=True)
        self.v = sp.ndarray(sp.vec2, (steps + 1, n), needs_grad=True)
        self.C = sp.ndarray(sp.mat2, (steps + 1, n), needs_grad=True)
        self.F = sp.ndarray(sp.mat2, (steps + 1, n), needs_grad=True)
        self.grid_v_in = sp.ndarray(sp.vec2, (steps, GRID, GRID), needs_grad=True)   # p2g's momenta
        self.grid_v = sp.ndarray(sp.vec2, (steps, GRID, GRID), needs_grad=True)      # velocities
        self.grid_m = sp.ndarray(sp.f32, (steps, GRID, GRID), needs_grad=True)
        self.v0 = sp.ndarray(sp.vec2, (1,), needs_grad=True)
        self.target = sp.ndarray(sp.vec2, (1,))
        self.loss = sp.ndarray(sp.f32, (), needs_grad=True)
        xs = np.zeros((steps + 1, n, 2), np.float32)
        xs[0] = x0
        self.x.from_numpy(xs)
        Fs = np.zeros((steps + 1, n, 2, 2), np.float32)
        Fs[0] = np.eye(2)
        self.F.from_numpy(Fs)

    def run(self, v0, target):
        """Loss and d loss / d v0 for initial velocity `v0` (2,)."""
        for a in (self.grid_v_in, self.grid_m, self.grid_v, self.loss):
            a.fill(0.0)
        self.v0.from_numpy(np.asarray(v0, np.float32).reshape(1, 2))
        self.target.from_numpy(np.asarray(target, np.float32).reshape(1, 2))
        with sp.Tape(loss=self.loss):
            launch(self.v, self.v0)
            for f in range(self.steps):
                p2g(self.x, self.v, self.C, self.F, self.grid_v_in, self.grid_m, f)
                grid_update(self.grid_v_in, self.grid_m, self.grid_v, f)
                g2p(self.x, self.v, self.C, self.grid_v, f)
            distance_loss(self.x, self.target, self.loss, self.steps)
        return float(self.loss[None]), self.v0.grad.to_numpy()[0].astype(np.float64)



# ---- the same algorithm in float64 numpy (the reference the test differences) -------------------------------
def _weights_np(fx):
    return [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]


def _polar_np(A):
    """R, S with A = R @ S, R a rotation (per particle, A: (n, 2, 2)): the 2x2 closed form."""
    x, y = A[:, 0, 0] + A[:, 1, 1], A[:, 1, 0] - A[:, 0, 1]
    scale = 1.0 / np.sqrt(x * x + y * y)
    c, s = x * scale, y * scale
    R = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
    return R, np.transpose(R, (0, 2, 1)) @ A


def simulate_numpy(x0, v0, target, steps):
    """The loss of the spvad simulation above, in float64."""
    n = len(x0)
    x, v = x0.astype(np.float64), np.tile(np.asarray(v0, np.float64), (n, 1))
    C, F = np.zeros((n, 2, 2)), np.tile(np.eye(2), (n, 1, 1))
    eye = np.eye(2)
    for _ in range(steps):
        xp = x * INV_DX
        base = (xp - 0.5).astype(np.int64)          # truncation, as int() in the kernel (positions > 0)
        fx = xp - base
        wx, wy = _weights_np(fx[:, 0]), _weights_np(fx[:, 1])
        F = (eye + DT * C) @ F
        J = np.linalg.det(F)
        r, _ = _polar_np(F)
        cauchy = 2.0 * MU * (F - r) @ np.transpose(F, (0, 2, 1)) + eye * (LA * (J - 1.0) * J)[:, None, None]
        affine = -(DT * P_VOL * 4.0 * INV_DX * INV_DX) * cauchy + P_MASS * C
        gv, gm = np.zeros((GRID, GRID, 2)), np.zeros((GRID, GRID))
        for i in range(3):
            for j in range(3):
                dpos = (np.array([i, j], np.float64) - fx) * DX
                w = wx[i] * wy[j]
                np.add.at(gv, (base[:, 0] + i, base[:, 1] + j),
                          w[:, None] * (P_MASS * v + np.einsum("nab,nb->na", affine, dpos)))
                np.add.at(gm, (base[:, 0] + i, base[:, 1] + j), w * P_MASS)
        has = gm > 0
        gv[has] /= gm[has][:, None]
        gv[has, 1] -= DT * GRAVITY
        ii, jj = np.meshgrid(np.arange(GRID), np.arange(GRID), indexing="ij")
        for cond, comp, sign in ((ii < BOUND, 0, -1), (ii > GRID - BOUND, 0, 1),
                                 (jj < BOUND, 1, -1), (jj > GRID - BOUND, 1, 1)):
            cut = has & cond & (sign * gv[..., comp] > 0)
            gv[cut, comp] = 0.0
        new_v, new_C = np.zeros((n, 2)), np.zeros((n, 2, 2))
        for i in range(3):
            for j in range(3):
                dpos = np.array([i, j], np.float64) - fx
                g = gv[base[:, 0] + i, base[:, 1] + j]
                w = wx[i] * wy[j]
                new_v += w[:, None] * g
                new_C += (4.0 * INV_DX * w)[:, None, None] * np.einsum("na,nb->nab", g, dpos)
        v, C = new_v, new_C
        x = x + DT * v
    d = x - np.asarray(target, np.float64)
    return np.mean(np.sum(d * d, axis=1)), x


def block(n_side, corner=(0.3, 0.12), size=0.15, seed=0):
    """n_side^2 particles in a jittered square block."""
    rng = np.random.default_rng(seed)
    g = (np.stack(np.meshgrid(np.arange(n_side), np.arange(n_side), indexing="ij"), -1).reshape(-1, 2) + 0.5)
    pts = np.asarray(corner) + g * (size / n_side) + rng.uniform(-0.2, 0.2, g.shape) * (size / n_side)
    return pts.astype(np.float32)


def picture(path, start, before, after, target):
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        print("(no picture: pip install pillow)")
        return
    size = 400
    img = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(img)
    for pts, colour in ((start, (190, 190, 190)), (before, (230, 140, 40)), (after, (30, 90, 200))):
        for px, py in pts:
            u, w = px * size, (1 - py) * size
            draw.ellipse((u - 2, w - 2, u + 2, w + 2), fill=colour)
    tu, tw = target[0] * size, (1 - target[1]) * size
    draw.line((tu - 6, tw, tu + 6, tw), fill=(200, 30, 30), width=2)
    draw.line((tu, tw - 6, tu, tw + 6), fill=(200, 30, 30), width=2)
    img.save(path)
    print(f"picture: {path} (grey: the start; orange: the end before optimising, blue: after; red cross: "
          "the target)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--particles", type=int, default=16, help="particles per side of the block")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--picture", default="mpm.png")
    a = ap.parse_args()
    x0, target = block(a.particles), np.array([0.62, 0.42])
    sim = Simulation(x0, a.steps)
    v0, rate = np.array([0.0, 0.0]), 10.0
    print(f"device: {sp.device_info()['name']}; {len(x0)} particles, {a.steps} steps, grid {GRID}x{GRID}")
    for it in range(a.iters):
        loss, grad = sim.run(v0, target)
        if it == 0:
            before = sim.x.to_numpy()[a.steps]
        print(f"iter {it:2d}: loss {loss:.6f}  v0 = ({v0[0]:+.3f}, {v0[1]:+.3f})")
        v0 = v0 - rate * grad / max(1.0, np.linalg.norm(grad) / 2.0)   # a clipped gradient step
    loss, _ = sim.run(v0, target)
    print(f"final:   loss {loss:.6f}  v0 = ({v0[0]:+.3f}, {v0[1]:+.3f})")
    picture(a.picture, x0, before, sim.x.to_numpy()[a.steps], target)


if __name__ == "__main__":
    main()

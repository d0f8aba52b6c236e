"""Taichi's implicit_mass_spring.py (a cloth of springs, `@ti.data_oriented class Cloth`), ported with its class
structure: kernels that build the grid and its springs, a `@sp.func` method clearing the forces, and forces from
gravity, the springs and two pinned corners. Taichi's version steps implicitly with its sparse solver, which
spvad does not offer: this one takes small explicit steps (symplectic Euler, the velocities damped by `kd`).

    python examples/mass_spring.py [--n 5] [--steps 2000]"""
import argparse

import numpy as np

import spvad as sp


@sp.data_oriented
class Cloth:
    def __init__(self, N):
        self.N = N
        self.NV = (N + 1) ** 2                      # vertices
        self.NE = 2 * N * (N + 1) + 2 * N * N      # edges: the grid's and both diagonals
        self.pos = sp.ndarray(sp.vec2, (self.NV,))
        self.initPos = sp.ndarray(sp.vec2, (self.NV,))
        self.vel = sp.ndarray(sp.vec2, (self.NV,))
        self.force = sp.ndarray(sp.vec2, (self.NV,))
        self.mass = sp.ndarray(sp.f32, (self.NV,))
        self.spring = sp.ndarray(sp.Vector(2, sp.i32), (self.NE,))
        self.rest_len = sp.ndarray(sp.f32, (self.NE,))
        self.ks = 1000.0   # spring stiffness
        self.kd = 0.5      # damping
        self.kf = 1.0e5    # stiffness of the pinned corners
        self.init_pos()
        self.init_edges()

    @sp.kernel
    def init_pos(self):
        for i, j in sp.ndrange(self.N + 1, self.N + 1):
            k = i * (self.N + 1) + j
            self.pos[k] = sp.Vector([i, j]) / self.N * 0.5 + sp.Vector([0.25, 0.25])
            self.initPos[k] = self.pos[k]
            self.vel[k] = sp.Vector([0.0, 0.0])
            self.mass[k] = 1.0

    @sp.kernel
    def init_edges(self):
        N = self.N
        for i, j in sp.ndrange(N + 1, N):   # along j
            idx, idx1 = i * N + j, i * (N + 1) + j
            self.spring[idx] = sp.Vector([idx1, idx1 + 1])
            self.rest_len[idx] = (self.pos[idx1] - self.pos[idx1 + 1]).norm()
        for i, j in sp.ndrange(N, N + 1):   # along i
            idx, idx1, idx2 = N * (N + 1) + i + j * N, i * (N + 1) + j, i * (N + 1) + j + N + 1
            self.spring[idx] = sp.Vector([idx1, idx2])
            self.rest_len[idx] = (self.pos[idx1] - self.pos[idx2]).norm()
        for i, j in sp.ndrange(N, N):       # one diagonal
            idx, idx1, idx2 = 2 * N * (N + 1) + i * N + j, i * (N + 1) + j, (i + 1) * (N + 1) + j + 1
            self.spring[idx] = sp.Vector([idx1, idx2])
            self.rest_len[idx] = (self.pos[idx1] - self.pos[idx2]).norm()
        for i, j in sp.ndrange(N, N):       # the other
            idx, idx1, idx2 = 2 * N * (N + 1) + N * N + i * N + j, i * (N + 1) + j + 1, (i + 1) * (N + 1) + j
            self.spring[idx] = sp.Vector([idx1, idx2])
            self.rest_len[idx] = (self.pos[idx1] - self.pos[idx2]).norm()

    @sp.func
    def clear_force(self, i):
        self.force[i] = sp.Vector([0.0, 0.0])

    @sp.kernel
    def compute_force(self):
        gravity = sp.Vector([0.0, -2.0])
        for i in self.force:
            self.clear_force(i)
            self.force[i] += gravity * self.mass[i]
        for i in self.spring:
            idx1, idx2 = self.spring[i][0], self.spring[i][1]
            pos1, pos2 = self.pos[idx1], self.pos[idx2]
            dis = pos2 - pos1
            force = self.ks * (dis.norm() - self.rest_len[i]) * dis.normalized()
            self.force[idx1] += force
            self.force[idx2] -= force
        # the two pinned corners pull back to where they started
        self.force[self.N] += self.kf * (self.initPos[self.N] - self.pos[self.N])
        self.force[self.NV - 1] += self.kf * (self.initPos[self.NV - 1] - self.pos[self.NV - 1])

    @sp.kernel
    def update_pos_vel(self, h: sp.f32):
        for i in self.pos:
            self.vel[i] = (self.vel[i] + h * self.force[i] / self.mass[i]) * sp.exp(-h * self.kd)
            self.pos[i] += h * self.vel[i]

    def update(self, h):
        self.compute_force()
        self.update_pos_vel(h)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    cloth = Cloth(args.n)
    for step in range(args.steps):
        cloth.update(1e-3)
    pos = cloth.pos.to_numpy()
    print(f"after {args.steps} steps: lowest vertex at y = {pos[:, 1].min():.4f}, "
          f"pinned corners at {np.round(pos[[args.n, -1]], 4).tolist()}")


if __name__ == "__main__":
    main()

"""Taichi's ad_gravity.py, written as a `@sp.data_oriented` class: particles attracting one another, whose
forces are the gradient of the potential energy U, computed by sp.Tape at every step (dv/dt = -dU/dx).

    python examples/ad_gravity.py [--particles 8] [--frames 20]

The original keeps module-level fields; the class holds them as ndarrays, and its kernels read `self.x`,
`self.x.grad` and `self.dt` as the original's read its globals."""
import argparse

import spvad as sp


@sp.data_oriented
class Gravity:
    def __init__(self, n, dt):
        self.n, self.dt = n, dt
        self.x = sp.ndarray(sp.vec2, (n,), needs_grad=True)   # particle positions
        self.v = sp.ndarray(sp.vec2, (n,))                    # particle velocities
        self.U = sp.ndarray(sp.f32, (), needs_grad=True)      # potential energy

    @sp.kernel
    def compute_U(self):
        for i, j in sp.ndrange(self.n, self.n):
            r = self.x[i] - self.x[j]
            # r.norm(1e-3) is sqrt(|r|**2 + 1e-3): no 1/0 (and no wrong derivative) where i == j
            self.U[None] += -1 / r.norm(1e-3)

    @sp.kernel
    def advance(self):
        for i in self.x:
            self.v[i] += self.dt * -self.x.grad[i]   # dv/dt = -dU/dx
        for i in self.x:
            self.x[i] += self.dt * self.v[i]         # dx/dt = v

    def substep(self):
        with sp.Tape(loss=self.U):
            self.compute_U()   # the Tape computes dU/dx into x.grad
        self.advance()

    @sp.kernel
    def init(self):
        for i in self.x:
            self.x[i] = [sp.random(), sp.random()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=8)
    parser.add_argument("--frames", type=int, default=20)
    args = parser.parse_args()
    sim = Gravity(args.particles, 1e-5)
    sim.init()
    for frame in range(args.frames):
        for _ in range(50):
            sim.substep()
        print(f"frame {frame}: U = {float(sim.U.to_numpy()):.4f}")


if __name__ == "__main__":
    main()

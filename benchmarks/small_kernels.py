"""Programs of many small launches, timed per launch: Taichi's mgpcg.py solve (a multigrid-preconditioned
conjugate gradient on an N^3 Poisson problem: thousands of launches of tiny kernels and a host read of a reduced
scalar three times per iteration) and odop_solar's 8-body step (examples/odop_solar.py), against numpy float64
doing the same arithmetic. Both are @sp.data_oriented classes, as in Taichi. Where `sp.capture` exists, the
solar steps are also captured once and replayed (one submission, no Python per launch).

    python benchmarks/small_kernels.py [--n 16] [--steps 1000] [--repeat 3]

mgpcg's sparse (pointer) fields are dense ndarrays here, each level's loops over its active region."""
import argparse
import importlib.util
import os
import statistics
import time

import numpy as np

import spvad as sp
from spvad.kernel import Kernel
from spvad.ndarray import Ndarray

HERE = os.path.dirname(os.path.abspath(__file__))


@sp.data_oriented
class MGPCG:
    """Taichi's mgpcg.py as a class: r[l], z[l] per level; x, p, Ap; alpha, beta, sum as 0-d arrays."""

    def __init__(self, n, levels=4, pre_and_post=2, bottom=50):
        self.n, self.levels, self.pre_and_post, self.bottom = n, levels, pre_and_post, bottom
        self.n_ext, self.n_tot = n // 2, 2 * n
        shape = (self.n_tot,) * 3
        self.r = [sp.ndarray(sp.f32, shape) for _ in range(levels)]   # residual (one level's cells used)
        self.z = [sp.ndarray(sp.f32, shape) for _ in range(levels)]   # M^-1 r
        self.x, self.p, self.Ap = (sp.ndarray(sp.f32, shape) for _ in range(3))
        self.alpha, self.beta, self.sum = (sp.ndarray(sp.f32, ()) for _ in range(3))

    @sp.kernel
    def init(self):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            xl, yl, zl = (i - lo) * 2.0 / self.n_tot, (j - lo) * 2.0 / self.n_tot, (k - lo) * 2.0 / self.n_tot
            self.r[0][i, j, k] = sp.sin(2.0 * np.pi * xl) * sp.sin(2.0 * np.pi * yl) * sp.sin(2.0 * np.pi * zl)
            self.z[0][i, j, k] = 0.0
            self.Ap[i, j, k] = 0.0
            self.p[i, j, k] = 0.0
            self.x[i, j, k] = 0.0

    @sp.kernel
    def compute_Ap(self):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            p = self.p
            self.Ap[i, j, k] = 6.0 * p[i, j, k] - p[i + 1, j, k] - p[i - 1, j, k] - p[i, j + 1, k] \
                - p[i, j - 1, k] - p[i, j, k + 1] - p[i, j, k - 1]

    @sp.kernel
    def reduce(self, p: sp.template(), q: sp.template()):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            self.sum[None] += p[i, j, k] * q[i, j, k]

    @sp.kernel
    def update_x(self):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            self.x[i, j, k] += self.alpha[None] * self.p[i, j, k]

    @sp.kernel
    def update_r(self):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            self.r[0][i, j, k] -= self.alpha[None] * self.Ap[i, j, k]

    @sp.kernel
    def update_p(self):
        lo, hi = self.n_ext, self.n_tot - self.n_ext
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            self.p[i, j, k] = self.z[0][i, j, k] + self.beta[None] * self.p[i, j, k]

    @sp.kernel
    def restrict(self, l: sp.template()):
        lo, hi = self.n_ext >> l, (self.n_tot - self.n_ext) >> l
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            z = self.z[l]
            res = self.r[l][i, j, k] - (6.0 * z[i, j, k] - z[i + 1, j, k] - z[i - 1, j, k] - z[i, j + 1, k]
                                        - z[i, j - 1, k] - z[i, j, k + 1] - z[i, j, k - 1])
            self.r[l + 1][i // 2, j // 2, k // 2] += res * 0.5

    @sp.kernel
    def prolongate(self, l: sp.template()):
        lo, hi = self.n_ext >> l, (self.n_tot - self.n_ext) >> l
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):
            self.z[l][i, j, k] = self.z[l + 1][i // 2, j // 2, k // 2]

    @sp.kernel
    def smooth(self, l: sp.template(), phase: sp.template()):
        lo, hi = self.n_ext >> l, (self.n_tot - self.n_ext) >> l
        for i, j, k in sp.ndrange((lo, hi), (lo, hi), (lo, hi)):   # red/black Gauss-Seidel
            z = self.z[l]
            if (i + j + k) & 1 == phase:
                z[i, j, k] = (self.r[l][i, j, k] + z[i + 1, j, k] + z[i - 1, j, k] + z[i, j + 1, k]
                              + z[i, j - 1, k] + z[i, j, k + 1] + z[i, j, k - 1]) / 6.0

    def apply_preconditioner(self):
        self.z[0].fill(0)
        for l in range(self.levels - 1):
            for _ in range(self.pre_and_post << l):
                self.smooth(l, 0)
                self.smooth(l, 1)
            self.z[l + 1].fill(0)
            self.r[l + 1].fill(0)
            self.restrict(l)
        for _ in range(self.bottom):
            self.smooth(self.levels - 1, 0)
            self.smooth(self.levels - 1, 1)
        for l in reversed(range(self.levels - 1)):
            self.prolongate(l)
            for _ in range(self.pre_and_post << l):
                self.smooth(l, 1)
                self.smooth(l, 0)

    def dot(self, p, q):
        self.sum[None] = 0.0
        self.reduce(p, q)
        return float(self.sum[None])   # a host read: waits for the launches before it

    def solve(self, max_iters=400, tol=1e-8):
        """Taichi's loop (which asks for 1e-12, below what float32 reaches: it then runs all 400 iterations);
        returns (iterations, host reads, final residual rTr / initial rTr)."""
        self.init()
        initial = self.dot(self.r[0], self.r[0])
        self.apply_preconditioner()
        self.update_p()
        old_zTr, reads = self.dot(self.z[0], self.r[0]), 2
        for it in range(max_iters):
            self.compute_Ap()
            self.alpha[None] = old_zTr / self.dot(self.p, self.Ap)
            self.update_x()
            self.update_r()
            rTr = self.dot(self.r[0], self.r[0])
            reads += 2
            if rTr < initial * tol:
                break
            self.apply_preconditioner()
            new_zTr = self.dot(self.z[0], self.r[0])
            reads += 1
            self.beta[None] = new_zTr / old_zTr
            self.update_p()
            old_zTr = new_zTr
        return it + 1, reads, rTr / initial


def counted(fn):
    """fn() while counting kernel launches and ndarray fills (each a submission)."""
    kernel_call, fill, count = Kernel.__call__, Ndarray.fill, [0]

    def call(self, *a, **k):
        count[0] += 1
        return kernel_call(self, *a, **k)

    def fills(self, *a, **k):
        count[0] += 1
        return fill(self, *a, **k)

    Kernel.__call__, Ndarray.fill = call, fills
    try:
        out = fn()
    finally:
        Kernel.__call__, Ndarray.fill = kernel_call, fill
    return out, count[0]


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sp.sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@sp.kernel
def integrate_plain(x: sp.Array, v: sp.Array, center: sp.Array, dt: sp.f32):
    """odop_solar's step as a plain kernel taking its arrays as arguments (the launch fast path's case)."""
    for i in range(x.shape[0]):
        offset = -(x[i] - center[None])
        v[i] += dt * offset / offset.norm() ** 3
        x[i] += dt * v[i]


def solar_numpy_step(x, v, dt, center=0.5):
    offset = center - x
    v += dt * offset / np.linalg.norm(offset, axis=1, keepdims=True) ** 3
    x += dt * v


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="mgpcg's N (the grid is (2N)^3, the region N^3)")
    parser.add_argument("--steps", type=int, default=1000, help="solar steps timed")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sp.init()
    print(f"device: {sp.device_info()['name']}")

    solver = MGPCG(args.n)
    (iters, reads, residual), launches = counted(solver.solve)   # (compiles everything, counts)
    t = timed(solver.solve, args.repeat)
    print(f"mgpcg N={args.n}: {iters} iterations, {launches} launches and fills, {reads} host reads, "
          f"residual {residual:.1e}: {t * 1e3:.1f} ms per solve, {t / launches * 1e6:.1f} us per launch")

    spec = importlib.util.spec_from_file_location("odop_solar", os.path.join(HERE, "..", "examples", "odop_solar.py"))
    solar_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solar_mod)
    solar = solar_mod.make_solar(8, 1e-4)
    solar.integrate()

    def steps():
        for _ in range(args.steps):
            solar.integrate()
    t = timed(steps, args.repeat)
    t_plain = timed(lambda: [integrate_plain(solar.x, solar.v, solar.center, 1e-4) for _ in range(args.steps)],
                    args.repeat)
    x, v = solar.x.to_numpy().astype(np.float64), solar.v.to_numpy().astype(np.float64)

    def numpy_steps():
        for _ in range(args.steps):
            solar_numpy_step(x, v, 1e-4)
    t_np = timed(numpy_steps, args.repeat)
    print(f"odop_solar 8 bodies: {t / args.steps * 1e6:.1f} us per step (bound method launch); numpy float64 "
          f"{t_np / args.steps * 1e6:.1f} us per step; the same step as a plain kernel "
          f"{t_plain / args.steps * 1e6:.1f} us per step")
    if hasattr(sp, "capture"):
        with sp.capture() as g:
            for _ in range(args.steps):
                solar.integrate()
        t_cap = timed(g.replay, args.repeat)
        print(f"odop_solar captured: {t_cap / args.steps * 1e6:.1f} us per step (g.replay of {args.steps} steps)")
    else:
        print("sp.capture is not in this tree: no captured numbers")


if __name__ == "__main__":
    main()

"""SDF normals three ways, one run: `sp.grad` inside the kernel, the analytic gradient written by hand, and
central differences (six SDF evaluations); the SDF is examples/sdf_normals.py's bumpy sphere. Each is checked
against the float64 closed form, then timed (a warm-up, the median of interleaved repetitions, each ending
with a sync) over a million points; prints ms, ns per normal and sp.grad / analytic.

Usage: python benchmarks/normals.py [--n 1048576] [--repeat 9]
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import spvad as sp  # noqa: E402
from sdf_normals import BUMP, normal_np, sdf  # noqa: E402

H = 1e-3   # central-difference step (f32: smaller steps lose more to rounding than they gain)


@sp.kernel
def by_grad(pts: sp.Array, r: sp.f32, out: sp.Array):
    for i in range(pts.shape[0]):
        out[i] = sp.grad(sdf, argnums=0)(pts[i], r)


@sp.kernel
def by_hand(pts: sp.Array, r: sp.f32, out: sp.Array):
    for i in range(pts.shape[0]):
        p = pts[i]
        s = sp.vec3(sp.sin(3.0 * p[0]), sp.sin(3.0 * p[1]), sp.sin(3.0 * p[2]))
        c = sp.vec3(sp.cos(3.0 * p[0]), sp.cos(3.0 * p[1]), sp.cos(3.0 * p[2]))
        out[i] = p / sp.length(p) + 3.0 * BUMP * sp.vec3(c[0] * s[1] * s[2], s[0] * c[1] * s[2], s[0] * s[1] * c[2])


@sp.kernel
def by_differences(pts: sp.Array, r: sp.f32, out: sp.Array):
    for i in range(pts.shape[0]):
        p = pts[i]
        dx = sdf(p + sp.vec3(H, 0.0, 0.0), r) - sdf(p - sp.vec3(H, 0.0, 0.0), r)
        dy = sdf(p + sp.vec3(0.0, H, 0.0), r) - sdf(p - sp.vec3(0.0, H, 0.0), r)
        dz = sdf(p + sp.vec3(0.0, 0.0, H), r) - sdf(p - sp.vec3(0.0, 0.0, H), r)
        out[i] = sp.vec3(dx, dy, dz) / (2.0 * H)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return (f"{fields.get('Model name', '?').strip()} (family {fields.get('CPU family', '?').strip()} "
                f"model {fields.get('Model', '?').strip()}, {os.cpu_count()} logical CPUs)")
    except OSError:
        return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    sp.init()
    rng = np.random.default_rng(0)
    d = rng.normal(size=(a.n, 3))
    p = (d / np.linalg.norm(d, axis=1, keepdims=True) * rng.uniform(0.6, 1.0, (a.n, 1))).astype(np.float32)
    pts, out = sp.from_numpy(p, dtype=sp.vec3), sp.ndarray(sp.vec3, (a.n,))
    want = normal_np(p.astype(np.float64), 0.8)
    kernels = {"sp.grad": by_grad, "analytic by hand": by_hand, "central differences": by_differences}
    times = {name: [] for name in kernels}
    for name, k in kernels.items():   # warm-up (compiles) and check
        k(pts, 0.8, out)
        err = np.abs(out.to_numpy() - want).max() / np.abs(want).max()
        print(f"{name:<20} max error vs float64: {err:.2e}", file=sys.stderr)
    for _ in range(a.repeat):
        for name, k in kernels.items():
            sp.sync()
            t0 = time.perf_counter()
            k(pts, 0.8, out)
            sp.sync()
            times[name].append(time.perf_counter() - t0)
    print(f"device: {sp.device_info()['name']}; CPU: {cpu_model()}; {a.n:,} normals, median of {a.repeat}")
    base = statistics.median(times["analytic by hand"])
    for name in kernels:
        t = statistics.median(times[name])
        print(f"{name:<20} {t * 1e3:8.2f} ms  {t / a.n * 1e9:6.2f} ns/normal  {t / base:5.2f}x the analytic")


if __name__ == "__main__":
    main()

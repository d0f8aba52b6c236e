"""Forward vs gradient time of a per-thread dynamic-loop kernel: 65,536 threads x 64 iterations of
`v = v + 0.01*sin(v)*w[i]` (the loop bound is a scalar argument, so the adstack is sized at launch).

Prints median wall times (launch + sync, after a warm-up that compiles) and the gradient/forward ratio,
and checks the gradient against a float64 numpy reference on a few elements.
Usage: python benchmarks/integrator.py [--threads N] [--steps K] [--repeat R]
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
import spvad as sp  # noqa: E402


@sp.kernel
def integrate(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(steps):
            v = v + 0.01 * sp.sin(v) * w[i]
        y[i] = v


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sp.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def reference_grad(x, w, steps):
    """d y / d x and d y / d w per element, by forward-mode in float64 numpy."""
    v, dvdx, dvdw = x.copy(), np.ones_like(x), np.zeros_like(x)
    for _ in range(steps):
        s, c = np.sin(v), np.cos(v)
        dvdx = dvdx + 0.01 * c * w * dvdx
        dvdw = dvdw + 0.01 * (c * w * dvdw + s)
        v = v + 0.01 * s * w
    return dvdx, dvdw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    xn, wn = rng.uniform(0.5, 1.5, a.threads), rng.uniform(0.5, 1.5, a.threads)
    x = sp.from_numpy(xn.astype(np.float32), needs_grad=True)
    w = sp.from_numpy(wn.astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (a.threads,), needs_grad=True)

    def forward():
        integrate(x, w, y, a.steps)

    def gradient():
        y.grad.fill(1.0)
        integrate.grad(x, w, y, a.steps)

    t0 = time.perf_counter()
    forward()
    sp.sync()
    first_fwd = time.perf_counter() - t0
    t0 = time.perf_counter()
    x.grad.fill(0.0)
    w.grad.fill(0.0)
    gradient()
    sp.sync()
    first_grad = time.perf_counter() - t0
    gx_ref, gw_ref = reference_grad(xn, wn, a.steps)
    ok = np.allclose(x.grad.to_numpy(), gx_ref, rtol=1e-4) and np.allclose(w.grad.to_numpy(), gw_ref, rtol=1e-4)
    t_fwd = timed(forward, a.repeat)
    t_grad = timed(gradient, a.repeat)
    result = {"device": sp.device_info()["name"], "threads": a.threads, "steps": a.steps,
              "forward_ms": round(t_fwd * 1e3, 3), "gradient_ms": round(t_grad * 1e3, 3),
              "gradient_over_forward": round(t_grad / t_fwd, 2), "first_forward_ms": round(first_fwd * 1e3, 1),
              "first_gradient_ms": round(first_grad * 1e3, 1), "gradient_correct": bool(ok)}
    print(f"device {result['device']}: {a.threads} threads x {a.steps} steps")
    print(f"  forward   {result['forward_ms']:9.3f} ms   (first call incl. compile {result['first_forward_ms']} ms)")
    print(f"  gradient  {result['gradient_ms']:9.3f} ms   (first call incl. compile {result['first_gradient_ms']} ms)")
    print(f"  gradient / forward = {result['gradient_over_forward']}x, gradient {'OK' if ok else 'WRONG'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

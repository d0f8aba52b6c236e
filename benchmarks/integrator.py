"""Forward vs gradient time of a per-thread dynamic-loop kernel: 65,536 threads x 64 iterations of
`v = v + 0.01*sin(v)*w[i]` (the loop bound is a scalar argument, so the adstack is sized at launch).

Prints median wall times (launch + sync, after a warm-up that compiles) and the gradient/forward ratio,
and checks the gradient against a float64 numpy reference. `--debug` measures the same with
sp.init(debug=True) (every global access bounds-checked on the device) in the same process and prints the
slowdown; `--rounds` alternates the two runtimes to spread load from elsewhere on the machine over both.
Usage: python benchmarks/integrator.py [--threads N] [--steps K] [--repeat R] [--debug [--rounds M]]
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
    """Wall times of `repeat` runs of fn(); sync()."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sp.sync()
        times.append(time.perf_counter() - t0)
    return times


def reference_grad(x, w, steps):
    """d y / d x and d y / d w per element, by forward-mode in float64 numpy."""
    v, dvdx, dvdw = x.copy(), np.ones_like(x), np.zeros_like(x)
    for _ in range(steps):
        s, c = np.sin(v), np.cos(v)
        dvdx = dvdx + 0.01 * c * w * dvdx
        dvdw = dvdw + 0.01 * (c * w * dvdw + s)
        v = v + 0.01 * s * w
    return dvdx, dvdw


def measure(a, debug):
    """One runtime, sp.init(debug=debug): first calls (they compile), a correctness check, then `a.repeat`
    timed forward and gradient runs. Returns (first forward, first gradient, forward times, gradient times, ok)."""
    sp.init(debug=debug)
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
    return first_fwd, first_grad, timed(forward, a.repeat), timed(gradient, a.repeat), ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--debug", action="store_true",
                    help="also run with sp.init(debug=True) (bounds checks on the device) and print the slowdown")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --debug: alternate default and debug runtimes this many times (medians over all)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    modes = (False, True) if a.debug else (False,)
    runs = {m: [] for m in modes}
    for _ in range(a.rounds if a.debug else 1):   # alternating, so load from elsewhere falls on both alike
        for m in modes:
            runs[m].append(measure(a, m))
    result = {"device": sp.device_info()["name"], "threads": a.threads, "steps": a.steps}
    for m in modes:
        key = "debug_" if m else ""
        t_fwd = statistics.median(t for r in runs[m] for t in r[2])
        t_grad = statistics.median(t for r in runs[m] for t in r[3])
        result.update({
            key + "forward_ms": round(t_fwd * 1e3, 3), key + "gradient_ms": round(t_grad * 1e3, 3),
            key + "gradient_over_forward": round(t_grad / t_fwd, 2),
            key + "first_forward_ms": round(runs[m][0][0] * 1e3, 1),
            key + "first_gradient_ms": round(runs[m][0][1] * 1e3, 1),
            key + "gradient_correct": all(r[4] for r in runs[m])})
    print(f"device {result['device']}: {a.threads} threads x {a.steps} steps")
    for m in modes:
        key = "debug_" if m else ""
        ok = result[key + "gradient_correct"]
        if m:
            print("  with sp.init(debug=True) (bounds checks on the device):")
        print(f"  forward   {result[key + 'forward_ms']:9.3f} ms   (first call incl. compile "
              f"{result[key + 'first_forward_ms']} ms)")
        print(f"  gradient  {result[key + 'gradient_ms']:9.3f} ms   (first call incl. compile "
              f"{result[key + 'first_gradient_ms']} ms)")
        print(f"  gradient / forward = {result[key + 'gradient_over_forward']}x, "
              f"gradient {'OK' if ok else 'WRONG'}")
    if a.debug:
        result["debug_slowdown_forward"] = round(result["debug_forward_ms"] / result["forward_ms"], 2)
        result["debug_slowdown_gradient"] = round(result["debug_gradient_ms"] / result["gradient_ms"], 2)
        print(f"  debug / default: forward {result['debug_slowdown_forward']}x, "
              f"gradient {result['debug_slowdown_gradient']}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

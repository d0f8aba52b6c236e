"""Adstack depth vs stack home: gradient time and first-launch (compile) time of the integrator
`v = v + 0.01*sin(v)*w[i]` (loop bound from a scalar, so the stack is sized at launch) at several depths,
with the stacks forced into Function-scope arrays or into the storage buffer, and the home `auto` picks.

Mesa's on-disk shader cache is disabled before spvad is imported, so first launches include the compile.
Each (depth, home) runs on a fresh runtime. Gradients are checked against a float64 numpy reference.
Usage: python benchmarks/adstack_depth.py [--threads N] [--steps 64,1024,16384] [--repeat R] [--json F]
"""
import argparse
import json
import os
import statistics
import time

os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"   # before the driver loads: measure real compiles
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import numpy as np  # noqa: E402

import spvad as sp  # noqa: E402
from integrator import integrate, reference_grad  # noqa: E402  (benchmarks/integrator.py)
from spvad import runtime  # noqa: E402
from spvad.launch.device_task import task_on_device  # noqa: E402


def held_homes(ct):
    """The stack homes the runtime picked for compiled task `ct` at its last launch."""
    held = task_on_device(runtime.get(), ct)
    return held.homes(held.last_spec)

HOMES = ("function", "buffer", "auto")


def measure(threads, steps, home, repeat):
    os.environ["SPVAD_ADSTACK_HOME"] = home
    sp.init()
    rng = np.random.default_rng(0)
    xn, wn = rng.uniform(0.5, 1.5, threads), rng.uniform(0.5, 1.5, threads)
    x = sp.from_numpy(xn.astype(np.float32), needs_grad=True)
    w = sp.from_numpy(wn.astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (threads,), needs_grad=True)
    integrate(x, w, y, steps)
    sp.sync()

    def gradient():
        y.grad.fill(1.0)
        integrate.grad(x, w, y, steps)
        sp.sync()

    t0 = time.perf_counter()
    gradient()
    first = time.perf_counter() - t0
    gx_ref, gw_ref = reference_grad(xn, wn, steps)
    # absolute tolerance on the O(1) scale: near the fixed point v = pi, float32 leaves sin(v) ~ 1e-7 where
    # float64 reaches 0, so long runs differ from the reference by ~1e-5 in either home
    ok = all(np.allclose(g.grad.to_numpy(), ref, rtol=1e-3, atol=1e-4) for g, ref in ((x, gx_ref), (w, gw_ref)))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        gradient()
        times.append(time.perf_counter() - t0)
    ct = integrate._compiled(integrate._bind((x, w, y, steps))[0], "reverse").tasks[0]
    picked = held_homes(ct)[0]
    sp.reset()
    return {"steps": steps, "home": home, "picked": picked, "first_launch_ms": round(first * 1e3, 1),
            "gradient_ms": round(statistics.median(times) * 1e3, 2), "correct": bool(ok)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1024)
    ap.add_argument("--steps", default="64,1024,16384")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rows = [measure(a.threads, int(s), home, a.repeat) for s in a.steps.split(",") for home in HOMES]
    info = sp.device_info()
    print(f"device {info['name']} ({info['device_type']}), {a.threads} threads, integrator gradient; "
          "first launch = gradient launch + sync incl. compile (shader cache off)")
    print(f"{'steps':>7} {'home':>14} {'first launch ms':>16} {'gradient ms':>12} {'correct':>8}")
    for r in rows:
        home = r["home"] if r["home"] != "auto" else f"auto:{r['picked']}"
        print(f"{r['steps']:>7} {home:>14} {r['first_launch_ms']:>16.1f} {r['gradient_ms']:>12.2f} "
              f"{'yes' if r['correct'] else 'NO':>8}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": info["name"], "threads": a.threads, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

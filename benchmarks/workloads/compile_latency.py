"""Workload 5, compile latency: the first forward and first gradient launch of the integrator kernel (dynamic
loop, adstack; 1,024 threads x 64 iterations, so the run itself is negligible) in a fresh process per system.
Cold: Mesa's shader cache off (MESA_SHADER_CACHE_DISABLE=true) and each system's own offline cache off (spvad
has none; Taichi/Quadrants offline_cache=False). Warm: a fresh process with every cache on, after a first
process filled them (caches in a private temporary folder, so earlier runs on this machine do not count).
"Cold 2nd kernel": in the cold process, after those two, the first forward of another integrator kernel (another
rate): the kernel's own compile, once the process's one-time driver and runtime set-up is paid (Taichi and
Quadrants pay theirs in init, whose from_numpy runs a kernel; spvad's from_numpy is a host write, so spvad pays
it at its first launch)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import Unavailable, describe, peer_adstack_config, row

NAME = "compile"
OPS = ("import+init", "cold forward", "cold gradient", "cold 2nd kernel", "warm forward", "warm gradient")
SYSTEMS = ("spvad", "limit", "taichi", "quadrants")
THREADS, STEPS = 1024, 64


def config(quick):
    return {"runs": 1 if quick else 7}


def title(cfg):
    return (f"compile latency, first call in a fresh process (integrator {THREADS:,} x {STEPS}), "
            f"median of {cfg['runs']} process(es)")


def reference(cfg):
    return {}


# ---- the child process: one system, one cache setting; prints one JSON line -------------------------------
def child(system, cache, cache_dir):
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    xn = rng.uniform(0.5, 1.5, THREADS).astype(np.float32)
    wn = rng.uniform(0.5, 1.5, THREADS).astype(np.float32)
    if system == "spvad":
        import spvad as sp
        from .integrator import integrate, make_integrate
        sp.init(backend="vulkan")
        sync = sp.sync
        x = sp.from_numpy(xn, needs_grad=True)
        w = sp.from_numpy(wn, needs_grad=True)
        y = sp.ndarray(sp.f32, (THREADS,), needs_grad=True)
        t_init = time.perf_counter() - t0

        def forward():
            integrate(x, w, y, STEPS)

        def gradient():
            integrate.grad(x, w, y, STEPS)

        def second():
            make_integrate(0.02)(x, w, y, STEPS)
    else:
        from .common import init_peer
        from .integrator import build_peer, build_peer_kernel
        opts = {"offline_cache": cache == "on"}
        if cache == "on":
            opts["offline_cache_file_path"] = os.path.join(cache_dir, system)
        if system == "quadrants":
            opts["src_ll_cache"] = cache == "on"
        ti = init_peer(system, **opts, **peer_adstack_config(system, STEPS + 2))
        sync = ti.sync
        x, w, y, kern = build_peer(ti, THREADS)
        x.from_numpy(xn)
        w.from_numpy(wn)
        sync()
        t_init = time.perf_counter() - t0

        def forward():
            kern(STEPS)

        def gradient():
            kern.grad(STEPS)

        def second():
            build_peer_kernel(ti, x, w, y, 0.02)(STEPS)
    t = time.perf_counter()
    forward()
    sync()
    t_fwd = time.perf_counter() - t
    y.grad.fill(1.0)
    sync()
    t = time.perf_counter()
    gradient()
    sync()
    t_grad = time.perf_counter() - t
    t = time.perf_counter()
    second()
    sync()
    t_second = time.perf_counter() - t
    print("RESULT " + json.dumps({"init": t_init, "forward": t_fwd, "gradient": t_grad, "second": t_second}),
          flush=True)


def _spawn(script, system, cache, cache_dir):
    env = dict(os.environ)
    if cache == "off":
        env["MESA_SHADER_CACHE_DISABLE"] = "true"
        env["SPVAD_CACHE"] = "0"              # spvad's own compile and pipeline caches off too
    else:
        env.pop("MESA_SHADER_CACHE_DISABLE", None)
        env.pop("SPVAD_CACHE", None)
        env["MESA_SHADER_CACHE_DIR"] = os.path.join(cache_dir, "mesa")
        env["SPVAD_CACHE_DIR"] = os.path.join(cache_dir, "spvad")   # private, like the peers' caches
    cmd = [sys.executable, script, "--compile-child", system, "--cache", cache, "--cache-dir", cache_dir]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or [f"exit code {p.returncode}"]
    raise RuntimeError(f"child process failed ({p.returncode}): {tail[0][:300]}")


def run(systems, cfg, script):
    """Runs in the parent: spawns the children of every system in `systems`; returns their rows (medians over
    processes). The processes alternate between the systems, round by round in a rotating order (the cold
    ones, then each system's warm-cache filling run, then the warm ones), so that a drift of the machine's
    speed over the minute this takes falls on every system alike."""
    rows = [row(NAME, op, "limit", "n/a", detail="no hand-written equivalent (compiling Python kernels is what "
                "spvad, Taichi and Quadrants do; a hand-written shader has no such step)")
            for op in OPS if "limit" in systems]
    live = [s for s in systems if s != "limit"]
    runs, failed = {s: {"off": [], "on": []} for s in live}, {}

    def rounds(cache, dirs):
        for r in range(cfg["runs"]):
            for system in live[r % len(live):] + live[:r % len(live)]:
                if system not in failed:
                    try:
                        runs[system][cache].append(_spawn(script, system, cache, dirs[system]))
                    except (Unavailable, RuntimeError, subprocess.TimeoutExpired) as e:
                        failed[system] = e

    with tempfile.TemporaryDirectory(prefix="peers-cache-") as cold_dir:
        rounds("off", {s: cold_dir for s in live})
    with tempfile.TemporaryDirectory(prefix="peers-cache-") as warm_root:
        warm_dirs = {s: os.path.join(warm_root, s) for s in live}
        for system in live:
            os.makedirs(warm_dirs[system])
            try:
                _spawn(script, system, "on", warm_dirs[system])   # fills Mesa's and the system's caches
            except (Unavailable, RuntimeError, subprocess.TimeoutExpired) as e:
                failed.setdefault(system, e)
        rounds("on", warm_dirs)
    picks = (("import+init", "off", "init"), ("cold forward", "off", "forward"), ("cold gradient", "off", "gradient"),
             ("cold 2nd kernel", "off", "second"), ("warm forward", "on", "forward"), ("warm gradient", "on", "gradient"))
    for system in live:
        if system in failed:
            rows += [row(NAME, op, system, "ERROR", detail=describe(failed[system])) for op in OPS]
            continue
        rows += [row(NAME, op, system, "OK", statistics.median(s), samples=s)
                 for op, cache, key in picks for s in [[r[key] for r in runs[system][cache]]]]
    return rows

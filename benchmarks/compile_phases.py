"""Where the integrator's first launch in a fresh process spends its time (benchmarks/workloads/compile_latency.py's
workload, cold and warm), phase by phase: spvad's frontend, passes and lowering, the disk cache's key and load, the
driver's pipeline creation, and the wait at the first sync (lavapipe compiles the shader with LLVM there). Python
phases in the main thread's CPU time (steady under load), the whole in wall time; medians over processes, one
spvad tree after another in turn (A/B), e.g. a branch against a checkout of main.

Usage: python benchmarks/compile_phases.py [--runs N] [--trees DIR[,DIR...]]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# (label, module, attribute path): the functions timed in the child, each a phase
PHASES = [("frontend", "spvad.pipeline", "build_kernel"), ("passes", "spvad.pipeline", "run_passes"),
          ("lowering", "spvad.pipeline", "compile_task"), ("cache key", "spvad.cache", "entry_key"),
          ("package hash", "spvad.cache.key", "package_hash"), ("cache load", "spvad.cache", "load_compiled"),
          ("globals check", "spvad.kernel", "Kernel._check_globals"),
          ("pipeline creation", "spvad.rhi.vulkan.pipelines", "PipelineMixin.create_pipeline"),
          ("RHI launch", "spvad.rhi.vulkan.program", "ProgramMixin.launch"),   # (rows of one label add up)
          ("RHI launch", "spvad.rhi.vulkan.program", "ProgramMixin.prepare_launch"),
          ("RHI launch", "spvad.rhi.vulkan.program", "PreparedLaunch.__call__")]
ROWS = list(dict.fromkeys(label for label, _, _ in PHASES)) + ["call (CPU)", "first sync (wall)", "total (wall)"]


def child():
    """One fresh process: the integrator's first forward and first gradient launch; prints one JSON line."""
    import importlib
    import numpy as np
    import spvad as sp
    sys.path.insert(0, os.path.dirname(HERE))
    from benchmarks.workloads.integrator import integrate
    spent = {}

    def timed(label, fn):
        def wrapper(*args, **kwargs):
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t
        return wrapper

    for label, module, path in PHASES:
        owner = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        setattr(owner, name, timed(label, getattr(owner, name)))
    sp.init(backend="vulkan")
    n, rng = 1024, np.random.default_rng(0)
    x = sp.from_numpy(rng.uniform(0.5, 1.5, n).astype(np.float32), needs_grad=True)
    w = sp.from_numpy(rng.uniform(0.5, 1.5, n).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (n,), needs_grad=True)
    sp.sync()
    out = {}
    for op, launch in (("forward", integrate), ("gradient", integrate.grad)):
        spent.clear()
        wall, cpu = time.perf_counter(), time.thread_time()
        launch(x, w, y, 64)
        spent["call (CPU)"] = time.thread_time() - cpu
        t = time.perf_counter()
        sp.sync()
        spent["first sync (wall)"], spent["total (wall)"] = time.perf_counter() - t, time.perf_counter() - wall
        out[op] = dict(spent)
        y.grad.fill(1.0)
    print("RESULT " + json.dumps(out), flush=True)


def spawn(tree, cache, folder):
    env = dict(os.environ, PYTHONPATH=tree)
    if cache == "cold":
        env.update(MESA_SHADER_CACHE_DISABLE="true", SPVAD_CACHE="0")
    else:
        env.pop("MESA_SHADER_CACHE_DISABLE", None)
        env.pop("SPVAD_CACHE", None)
        env.update(MESA_SHADER_CACHE_DIR=os.path.join(folder, "mesa"), SPVAD_CACHE_DIR=os.path.join(folder, "spvad"))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env, cwd=tree,
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child failed in {tree}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="processes per tree and cache setting")
    ap.add_argument("--trees", default=os.path.dirname(HERE), help="comma-separated spvad checkouts (A/B)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    samples = {}   # (tree, cache, op, row) -> seconds per process
    with tempfile.TemporaryDirectory(prefix="compile-phases-") as tmp:
        folders = {tree: os.path.join(tmp, str(k)) for k, tree in enumerate(trees)}
        for tree in trees:
            spawn(tree, "warm", folders[tree])   # fills the caches
        for _ in range(args.runs):
            for cache in ("cold", "warm"):
                for tree in trees:   # in turn, so load on the machine hits every tree alike
                    for op, spent in spawn(tree, cache, folders[tree]).items():
                        for row in ROWS:
                            samples.setdefault((tree, cache, op, row), []).append(spent.get(row, 0.0))
    for cache in ("cold", "warm"):
        for op in ("forward", "gradient"):
            print(f"\n{cache} {op} (ms, median of {args.runs})")
            print(f"{'phase':<20}" + "".join(f"{os.path.basename(t)[:14]:>16}" for t in trees))
            for row in ROWS:
                print(f"{row:<20}" + "".join(f"{statistics.median(samples[t, cache, op, row]) * 1e3:>16.2f}"
                                             for t in trees))


if __name__ == "__main__":
    main()

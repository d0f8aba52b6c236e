"""A captured Tape: DiffTaichi's electric (benchmarks/workloads/electric_long.py, 4 kernels per step) under
sp.Tape, run as usual (every launch recorded by the Tape from Python, its backward launched at exit) and the
same Tape captured once (`with sp.capture() as g: with sp.Tape(loss): ...`) and replayed (`g.replay()`: the
forward, the Tape's clears, seed, kept rows and backward in one batch). Both are checked against the float64
reference (loss, gradients along random directions) and against each other; the time of an iteration (the
Tape, or the replay, then a sync; the reset of the state before it untimed) is the median of interleaved
repetitions; also the CPU time of the process's threads (Python's and lavapipe's) per iteration.

Usage: python benchmarks/captured_tape.py [--steps 256] [--repeat 15] [--forms difftaichi,prev]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # lavapipe warns without one
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import spvad as sp  # noqa: E402
from workloads import electric_long as wl  # noqa: E402


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")),
                "unknown")


def timed(prog, run):
    """(wall, CPU) seconds of one iteration: the state reset (untimed), then `run()` and a sync. CPU: of every
    thread of the process (Python's and lavapipe's), which other load on the machine changes less."""
    prog.reset()
    prog.sync()
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    prog.sync()
    return time.perf_counter() - t0, time.process_time() - c0


def measure_form(form, steps, repeat):
    ref = wl.reference(steps, form)
    prog = wl.prepare_spvad(ref)
    results = {}
    timed(prog, prog.tape)   # the warm-up compiles
    ok, detail = wl.check(prog.loss(), prog.grads(), ref)
    uncaptured = (prog.loss(), prog.grads())
    results["uncaptured"] = {"ok": ok, "detail": detail, "samples": []}
    prog.reset()
    prog.sync()
    with sp.capture() as g:
        prog.tape()
    timed(prog, g.replay)   # the first replay (lavapipe compiles nothing new, but caches warm)
    ok, detail = wl.check(prog.loss(), prog.grads(), ref)
    same = max(float(np.max(np.abs(a - b))) for a, b in zip(prog.grads(), uncaptured[1]))
    results["captured"] = {"ok": ok, "detail": detail, "samples": [],
                           "vs_uncaptured": (abs(prog.loss() - uncaptured[0]), same)}
    runs = {"uncaptured": prog.tape, "captured": g.replay}
    for r in range(repeat):
        for name in (("uncaptured", "captured") if r % 2 == 0 else ("captured", "uncaptured")):
            results[name]["samples"].append(timed(prog, runs[name]))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--forms", default="difftaichi,prev")
    args = parser.parse_args()
    sp.init(backend="vulkan")
    info = sp.device_info()
    print(f"device: {info['name']} (Vulkan); CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); electric, "
          f"{args.steps} steps x {wl.KERNELS_PER_STEP} kernels ({wl.launches(args.steps):,} forward launches); "
          f"median of {args.repeat} interleaved iterations after a warm-up")
    print(f"{'form':<11} {'Tape (uncaptured)':>20} {'captured Tape':>16} {'speed-up':>9} {'(fastest of each)':>18}"
          f" {'CPU: uncaptured':>16} {'captured':>11}  checks")
    for form in args.forms.split(","):
        res = measure_form(form, args.steps, args.repeat)
        un, cap = (statistics.median(w for w, _ in res[k]["samples"]) for k in ("uncaptured", "captured"))
        cpu_un, cpu_cap = (statistics.median(c for _, c in res[k]["samples"]) for k in ("uncaptured", "captured"))
        best = min(w for w, _ in res["uncaptured"]["samples"]) / min(w for w, _ in res["captured"]["samples"])
        dloss, dgrad = res["captured"]["vs_uncaptured"]
        checks = (f"uncaptured {'OK' if res['uncaptured']['ok'] else 'WRONG'}, captured "
                  f"{'OK' if res['captured']['ok'] else 'WRONG'} ({res['captured']['detail']}); captured - "
                  f"uncaptured: loss {dloss:.2g}, gradients max {dgrad:.2g}")
        print(f"{form:<11} {1e3 * un:>17.2f} ms {1e3 * cap:>13.2f} ms {un / cap:>8.2f}x {best:>17.2f}x "
              f"{1e3 * cpu_un:>13.1f} ms {1e3 * cpu_cap:>8.1f} ms  {checks}")


if __name__ == "__main__":
    main()

"""Per-launch cost of a parallel loop whose count is read from an array (`for i in range(n[None])`), one run.

Three ways to launch the same loop over the same count, each `--launches` times then one sync, interleaved
repetitions, the median per launch:
  scalar    the count as a scalar argument: one plain dispatch (the baseline)
  indirect  the count read from an array on the device: a one-thread counting dispatch writes the groups,
            then the task's dispatch reads them (what spvad does, launch/device_count.py)
  host      the count read back on the host before each launch (`int(n[None])`: a sync per launch), then the
            scalar launch (what a host-side count would cost)
for a small loop (launch overhead dominates) and a large one (the kernel's own work dominates).

Usage: python benchmarks/array_bounds.py [--launches 200] [--repeat 7] [--small 64] [--large 1048576]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import spvad as sp  # noqa: E402
from normals import cpu_model  # noqa: E402


@sp.kernel
def scaled_by_scalar(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(n):
        y[i] = x[i] * 1.5 + sp.sin(x[i])


@sp.kernel
def scaled_by_array(x: sp.Array, y: sp.Array, n: sp.Array):
    for i in range(n[None]):
        y[i] = x[i] * 1.5 + sp.sin(x[i])


def ways(x, y, count, launches):
    n = sp.from_numpy(np.array(count, np.int32))

    def scalar():
        for _ in range(launches):
            scaled_by_scalar(x, y, count)

    def indirect():
        for _ in range(launches):
            scaled_by_array(x, y, n)

    def host():
        for _ in range(launches):
            scaled_by_scalar(x, y, int(n[None]))
    return {"scalar": scalar, "indirect": indirect, "host": host}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("--large", type=int, default=1 << 20)
    a = ap.parse_args()
    sp.init()
    rng = np.random.default_rng(0)
    runs = {}
    for size in (a.small, a.large):
        x = sp.from_numpy(rng.uniform(-1, 1, size).astype(np.float32))
        y = sp.ndarray(sp.f32, (size,))
        want = None
        for way, run in ways(x, y, size, a.launches).items():
            y.fill(0.0)
            run()                     # compiles; checked against the others
            got = y.to_numpy()
            want = got if want is None else want
            if not np.array_equal(got, want):
                raise SystemExit(f"{way} differs from scalar at {size} elements")
            runs[(size, way)] = (run, [])
    for _ in range(a.repeat):
        for run, times in runs.values():
            sp.sync()
            t0 = time.perf_counter()
            run()
            sp.sync()
            times.append(time.perf_counter() - t0)
    print(f"device: {sp.device_info()['name']}; CPU: {cpu_model()}; {a.launches} launches then one sync, "
          f"median of {a.repeat}, microseconds per launch")
    for size in (a.small, a.large):
        t = {way: statistics.median(runs[(size, way)][1]) / a.launches * 1e6 for way in ("scalar", "indirect", "host")}
        print(f"{size:>10,} elements  " + "  ".join(f"{way} {us:9.1f}" for way, us in t.items()) +
              f"  indirect/scalar {t['indirect'] / t['scalar']:.2f}  host/scalar {t['host'] / t['scalar']:.2f}")


if __name__ == "__main__":
    main()

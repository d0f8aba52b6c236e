"""The math library's bit-identity check at scale: for each expandable function (ir/libm/, trig included) and dtype,
1M points (half random bit patterns: NaNs, infinities, subnormals and all; half tests/libm_reference.py's dense
samples where it has the function, else uniform in [-50, 50]) computed on the Vulkan device and by libm.vector_eval
(each op rounded once in its dtype, as the interpreter computes; tests/spirv/test_libm_bits.py checks the two against
the interpreter backend). Prints a table of the points whose bits differ (any NaN equals any NaN) and the device's
time per launch (the least of three).

Usage: python benchmarks/libm_bits.py [--n 1000000] [--only exp,log]
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import spvad as sp  # noqa: E402
from elementwise import call_of, elementwise  # noqa: E402
from libm_reference import SAMPLERS, samples  # noqa: E402
from spvad import types as T  # noqa: E402
from spvad.ir.libm import EXPANSIONS  # noqa: E402
from spvad.ir.libm.vector_eval import evaluate  # noqa: E402
from spvad.ir.ops import ARITY  # noqa: E402

CHUNK = 1 << 17   # points per vector_eval call (it keeps every intermediate array)


def points(op, dt, n, arity, rng):
    uint = np.uint32 if dt == T.f32 else np.uint64
    half = n // 2
    bits = [rng.integers(0, np.iinfo(uint).max, half, dtype=uint, endpoint=True).view(dt.np) for _ in range(arity)]
    if op.value in SAMPLERS:
        dense = samples(op.value, dt, half, rng)
        dense = [np.resize(d, n - half) for d in dense]
    else:
        dense = [rng.uniform(-50, 50, n - half).astype(dt.np) for _ in range(arity)]
    return [np.concatenate([b, d]) for b, d in zip(bits, dense)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    sp.init()
    info = sp.device_info()
    print(f"device: {info.get('device_name') or info.get('name')}")
    print("| function | dtype | points | bits differ | device ms / launch |")
    print("|---|---|---|---|---|")
    ops = sorted(EXPANSIONS, key=lambda op: op.value)
    if args.only:
        ops = [op for op in ops if op.value in args.only.split(",")]
    total = 0
    for op in ops:
        arity = ARITY[op]
        kernel = elementwise(call_of(op), arity)[0]
        for dt in (T.f32, T.f64):
            pts = points(op, dt, args.n, arity, np.random.default_rng(17))
            ins = [sp.from_numpy(a) for a in pts]
            out = sp.ndarray(dt, (args.n,))
            kernel(*ins, out)   # compile and warm up
            sp.sync()
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                kernel(*ins, out)
                sp.sync()
                times.append(time.perf_counter() - t0)
            ms = min(times) * 1e3
            got = out.to_numpy()
            want = np.concatenate([evaluate(op, dt, *(a[k:k + CHUNK] for a in pts)) for k in range(0, args.n, CHUNK)])
            uint = np.uint32 if dt == T.f32 else np.uint64
            differ = ~((got.view(uint) == want.view(uint)) | (np.isnan(got) & np.isnan(want)))
            total += int(differ.sum())
            print(f"| {op.value} | {dt.name} | {args.n:,} | {int(differ.sum())} | {ms:.1f} |", flush=True)
    print(f"points whose bits differ, in all: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())

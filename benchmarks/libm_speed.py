"""What the math library costs: peers.py's integrator (sin) and elementwise (tanh) workloads, forward and gradient, with
spvad's expansions (ir/libm/) and with the driver's functions (sp.init(native_math=True)), interleaved in one
process on one device: each repetition runs both, in turn. Both results are checked against the workload's float64
references first. Prints the median ms of each and libm / native.

Each switch drops the workload kernels' remembered last launches: a kernel called again with the same objects
replays its last compiled variant without looking at the runtime's native_math (spvad/kernel.py, Kernel._replay),
so without that every run after the first would time the first mode's code.

Usage: python benchmarks/libm_speed.py [--repeat 9] [--only integrator,elementwise]
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from spvad import runtime  # noqa: E402
from workloads import elementwise, integrator  # noqa: E402
from workloads.common import run_once  # noqa: E402

WORKLOADS = {"integrator": integrator, "elementwise": elementwise}
MODES = ("libm", "native")


def switch(rt, mode, kernels):
    """The runtime in `mode`, the kernels' replays of the other mode's code forgotten (see the docstring)."""
    rt.native_math = mode == "native"
    for k in kernels:
        k._replay = k._grad_replay = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    args = ap.parse_args()
    print("| workload | op | libm (ms) | native (ms) | libm / native |")
    print("|---|---|---|---|---|")
    for name in args.only.split(","):
        wl = WORKLOADS[name]
        cfg = wl.config(False)
        ref = wl.reference(cfg)
        ops = wl.prepare_spvad(cfg, ref)   # (sp.init: the runtime's native_math is switched below, per run)
        rt = runtime.get()
        kernels = [v for v in vars(wl).values() if getattr(v, "_spvad_kernel", False)]
        for op in ops:
            samples = {m: [] for m in MODES}
            for mode in MODES:   # compile, warm up, check
                switch(rt, mode, kernels)
                run_once(op)
                if op.check:
                    ok, detail = op.check()
                    assert ok, f"{name} {op.name} {mode}: {detail}"
            for _ in range(args.repeat):
                for mode in MODES:
                    switch(rt, mode, kernels)
                    samples[mode].append(run_once(op))
            libm, native = (statistics.median(samples[m]) * 1e3 for m in MODES)
            print(f"| {name} | {op.name} | {libm:.2f} | {native:.2f} | {libm / native:.2f} |", flush=True)
        rt.native_math = False


if __name__ == "__main__":
    main()

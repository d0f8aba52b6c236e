"""Forward or reverse mode for a derivative inside a kernel: the same `sp.grad` compiled both ways, one run.

Each function's gradient is compiled once in forward mode (vector mode, a tangent per input) and once in
reverse mode (autodiff/inline_derivatives.py, _Reverse for straight-line code and inline_reverse.py with
adstacks for loops), checked against each other, then timed (a warm-up, the median of interleaved
repetitions, each ending with a sync). The functions: the energy of a 3x3 deformation gradient (9 inputs,
straight line, and with a branch), a tanh chain x <- tanh(F x) over n steps (9 and 16 inputs, a loop), and a
3-input loop. What spvad picks by default is marked with *.

Usage: python benchmarks/inner_modes.py [--n 262144] [--steps 8] [--repeat 7]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ["SPVAD_CACHE"] = "0"   # each kernel compiled under the mode forced below
import spvad as sp  # noqa: E402
from spvad.autodiff import inline_derivatives as D  # noqa: E402
from normals import cpu_model  # noqa: E402


@sp.func
def energy(F, steps):
    J = sp.determinant(F)
    return 0.7 * (sp.trace(F.T @ F) - 3.0) - 1.4 * sp.log(abs(J)) + 0.5 * (J - 1.0) * (J - 1.0)


@sp.func
def branchy(F, steps):
    J = sp.determinant(F)
    e = 0.0
    if J > 0.5:
        e = 0.7 * (sp.trace(F.T @ F) - 3.0) - 1.4 * sp.log(J)
    else:
        e = 10.0 * (J - 0.5) * (J - 0.5) + sp.trace(F @ F)
    return e + 0.5 * (J - 1.0) * (J - 1.0)


@sp.func
def chain(F, steps):
    x = 0.5 * F[0]   # a 3x3 or a 4x4 matrix
    e = 0.0
    for _ in range(steps):
        x = sp.tanh(F @ x)
        e += sp.dot(x, x)
    return e


@sp.func
def orbit(p, steps):
    q = p
    d = 0.0
    for _ in range(steps):
        q = sp.vec3(sp.sin(q.y) + q.x * 0.5, q.z * q.x, sp.cos(q.x) - q.z * 0.3)
        d += sp.length(q)
    return d


def make(f):
    @sp.kernel
    def gradients(xs: sp.Array, steps: sp.i32, out: sp.Array):
        for i in range(xs.shape[0]):
            out[i] = sp.grad(f)(xs[i], steps)
    return gradients


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 18)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    sp.init()
    rng = np.random.default_rng(0)
    F3, F4 = np.eye(3) + 0.2 * rng.normal(size=(a.n, 3, 3)), 0.5 * rng.normal(size=(a.n, 4, 4))
    cases = {"energy (9 in, no loop)": (energy, sp.mat3, F3, False),
             "branchy (9 in, no loop)": (branchy, sp.mat3, F3, False),
             f"tanh chain (9 in, {a.steps} steps)": (chain, sp.mat3, 0.6 * rng.normal(size=(a.n, 3, 3)), True),
             f"tanh chain (16 in, {a.steps} st)": (chain, sp.mat4, F4, True),
             f"orbit (3 in, {a.steps} steps)": (orbit, sp.vec3, 0.5 * rng.normal(size=(a.n, 3)), True)}
    runs, default = {}, (D.REVERSE_WIDTH_PER_OUTPUT, D.REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS)
    for name, (f, dtype, data, _) in cases.items():
        xs = sp.from_numpy(data.astype(np.float32), dtype=dtype)
        results = {}
        for mode, threshold in (("forward", 10 ** 9), ("reverse", 0)):
            D.REVERSE_WIDTH_PER_OUTPUT = D.REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS = threshold
            k, out = make(f), sp.ndarray(dtype, (a.n,))
            k(xs, a.steps, out)   # compiles under the forced threshold
            results[mode] = out.to_numpy()
            runs[(name, mode)] = (k, xs, out, [])
        D.REVERSE_WIDTH_PER_OUTPUT, D.REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS = default
        err = np.abs(results["forward"] - results["reverse"]).max() / np.abs(results["forward"]).max()
        print(f"{name:<26} forward vs reverse: max relative difference {err:.1e}", file=sys.stderr)
    for _ in range(a.repeat):
        for k, xs, out, times in runs.values():
            sp.sync()
            t0 = time.perf_counter()
            k(xs, a.steps, out)
            sp.sync()
            times.append(time.perf_counter() - t0)
    print(f"device: {sp.device_info()['name']}; CPU: {cpu_model()}; {a.n:,} gradients, median of {a.repeat}")
    for name, (f, dtype, _, loops) in cases.items():
        width = {sp.mat3: 9, sp.mat4: 16, sp.vec3: 3}[dtype]
        pick = "reverse" if width > default[loops] else "forward"
        t = {mode: statistics.median(runs[(name, mode)][3]) for mode in ("forward", "reverse")}
        print(f"{name:<26} " + "  ".join(f"{mode}{'*' if mode == pick else ' '} {t[mode] * 1e3:7.2f} ms"
                                         for mode in t) + f"  reverse/forward {t['reverse'] / t['forward']:.2f}")


if __name__ == "__main__":
    main()

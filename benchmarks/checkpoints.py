"""What a Tape's checkpoints cost: a double-buffered simulation (two arrays swapped every step, so each step
overwrites what the gradient of the step before the previous one reads, and the Tape keeps a copy) against
the same simulation written with one array per step (nothing overwritten, nothing kept).

Both run `steps` launches of a nonlinear step over `n` elements under a Tape, then the loss; times are the
median of interleaved repetitions of forward + backward (each ending in the Tape's sync), and memory is the
device bytes the program holds (arrays, their .grad, kept copies). Both gradients are checked against a
float64 numpy reference first.
Usage: python benchmarks/checkpoints.py [--steps K] [--n N] [--repeat R]
"""
import argparse
import os
import platform
import statistics
import subprocess
import time

import numpy as np

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
import spvad as sp  # noqa: E402

DT = 0.01


@sp.kernel
def step(a: sp.Array, b: sp.Array, w: sp.Array, dt: sp.f32):
    for i in range(a.shape[0]):
        b[i] = a[i] + dt * sp.sin(a[i]) * w[i]


@sp.kernel
def squared_norm(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def double_buffered(x0, w, steps):
    """Returns run() -> (d loss / d x0, bytes held)."""
    a = sp.from_numpy(x0, needs_grad=True)
    b = sp.ndarray(sp.f32, x0.shape, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def run():
        a.from_numpy(x0)
        loss.fill(0.0)
        with sp.Tape(loss) as tape:
            for s in range(steps):
                step(a, b, w, DT) if s % 2 == 0 else step(b, a, w, DT)
            squared_norm(b if steps % 2 else a, loss)
        return a.grad, 2 * 2 * a.buffer.nbytes + tape.checkpoint_bytes
    return run


def one_array_per_step(x0, w, steps):
    xs = [sp.from_numpy(x0, needs_grad=True)] + [sp.ndarray(sp.f32, x0.shape, needs_grad=True)
                                                   for _ in range(steps)]
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def run():
        loss.fill(0.0)
        with sp.Tape(loss) as tape:
            for s in range(steps):
                step(xs[s], xs[s + 1], w, DT)
            squared_norm(xs[steps], loss)
        assert tape.checkpoint_bytes == 0
        return xs[0].grad, 2 * sum(x.buffer.nbytes for x in xs)
    return run


def reference(x0, w0, steps):
    """d |x_steps|^2 / d x0 in float64 (forward-mode, elementwise)."""
    x, d = x0.astype(np.float64), np.ones(x0.shape)
    w = w0.astype(np.float64)
    for _ in range(steps):
        d = d * (1 + DT * np.cos(x) * w)
        x = x + DT * np.sin(x) * w
    return 2 * x * d


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name"))
    except Exception:  # noqa: BLE001
        return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    sp.init(backend="vulkan")
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, args.n).astype(np.float32)
    w0 = rng.uniform(0.5, 1.5, args.n).astype(np.float32)
    w = sp.from_numpy(w0)
    forms = {"double-buffered (Tape keeps copies)": double_buffered(x0, w, args.steps),
             "one array per step": one_array_per_step(x0, w, args.steps)}
    want = reference(x0, w0, args.steps)
    held = {}
    for name, run in forms.items():   # warm-up (compiles) and correctness first
        grad, held[name] = run()
        np.testing.assert_allclose(grad.to_numpy(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max(),
                                   err_msg=name)
    times = {name: [] for name in forms}
    for _ in range(args.repeat):
        for name, run in forms.items():   # interleaved
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    print(f"{args.steps:,} steps x {args.n:,} elements, Tape forward + backward; {sp.device_info()['name']}, "
          f"CPU {cpu_model()}")
    base = statistics.median(times["one array per step"])
    for name in forms:
        t = statistics.median(times[name])
        print(f"  {name:38s} {t * 1e3:8.1f} ms  ({t / base:.2f}x)   {held[name] / 2**20:8.1f} MiB held")


if __name__ == "__main__":
    main()

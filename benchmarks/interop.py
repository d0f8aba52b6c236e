"""What crossing between spvad and torch / JAX costs, and what an @sp.torch_function call adds.

1. Crossing, per size (float32): a.to_torch(), sp.from_torch(t), torch.from_dlpack(a) (a view: no copy),
   sp.from_dlpack(t), a.to_jax(), sp.from_jax(x), against a numpy copy of the same bytes (`x.copy()`), and
   a.to_numpy() / a.from_numpy(x) for spvad's own host I/O. With CUDA torch (a GPU machine), CUDA tensors
   cross too, through the host.
2. A function call: the same launches (a spring rollout, `steps` launches over n elements, and a loss) run
   directly on ndarrays made once (forward; forward + backward under sp.Tape), and as an @sp.torch_function
   (forward under torch.no_grad; forward + loss.backward()). The difference per call is the bridge's overhead:
   tensors in and out, the call's own arrays (and .grad companions) allocated, the cotangents and gradients.

Times are medians of interleaved repetitions after a warm-up; every figure is printed with the devices of both
sides and the CPU model. Usage: python benchmarks/interop.py [--sizes N,N,..] [--n N] [--steps K] [--repeat R]
"""
import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import spvad as sp  # noqa: E402
from checkpoints import cpu_model  # noqa: E402 (benchmarks/checkpoints.py: lscpu's model name)

DT = 0.0625


@sp.kernel
def spring_step(x: sp.Array, v: sp.Array, p: sp.Array, x_next: sp.Array, v_next: sp.Array):
    for i in range(x.shape[0]):
        v_new = v[i] + DT * (-p[0] * x[i] - p[1] * v[i] * abs(v[i]))
        v_next[i] = v_new
        x_next[i] = x[i] + DT * v_new


@sp.kernel
def squared_norm(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def rollout(p, x0, v0, xs, vs, loss, steps):
    """`steps` double-buffered steps from (x0, v0) into the scratch pairs xs, vs, then the loss."""
    spring_step(x0, v0, p, xs[1], vs[1])
    for s in range(1, steps):
        spring_step(xs[s % 2], vs[s % 2], p, xs[1 - s % 2], vs[1 - s % 2])
    squared_norm(xs[steps % 2], loss)


@sp.torch_function
def rollout_function(p, x0, v0, steps):
    xs = [sp.ndarray(x0.dtype, x0.shape) for _ in range(2)]
    vs = [sp.ndarray(x0.dtype, x0.shape) for _ in range(2)]
    loss = sp.ndarray(x0.dtype, ())
    rollout(p, x0, v0, xs, vs, loss, steps)
    return loss


def median_times(cases, repeat):
    """{name: median seconds} of each callable, interleaved, after one warm-up call each."""
    for run in cases.values():
        run()
    times = {name: [] for name in cases}
    for _ in range(repeat):
        for name, run in cases.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def crossing_cases(n, rng, cuda):
    host = rng.uniform(-1, 1, n).astype(np.float32)
    a, t, x = sp.from_numpy(host), torch.from_numpy(host.copy()), jnp.asarray(host)
    cases = {"numpy copy of the same bytes": lambda: host.copy(),
             "a.to_numpy()": a.to_numpy,
             "a.from_numpy(x) (existing array)": lambda: a.from_numpy(host),
             "a.to_torch()": a.to_torch,
             "sp.from_torch(t)": lambda: sp.from_torch(t),
             "torch.from_dlpack(a) (a view)": lambda: torch.from_dlpack(a),
             "sp.from_dlpack(t)": lambda: sp.from_dlpack(t),
             "a.to_jax()": lambda: a.to_jax().block_until_ready(),
             "sp.from_jax(x)": lambda: sp.from_jax(x)}
    if cuda:
        tc = t.cuda()
        cases["sp.from_torch(CUDA tensor)"] = lambda: sp.from_torch(tc)
        cases["a.to_torch().cuda()"] = lambda: a.to_torch().cuda().sum().item()
        cases["CUDA tensor .cpu() alone"] = lambda: tc.cpu()
    return cases


def function_cases(n, steps, rng, device):
    """The same launches direct and through @sp.torch_function; each case leaves its results on the host."""
    p0 = np.array([1.3, 0.4], np.float32)
    x0h, v0h = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(2))
    p, x0, v0 = sp.from_numpy(p0, needs_grad=True), sp.from_numpy(x0h, needs_grad=True), sp.from_numpy(v0h)
    xs = [sp.ndarray(sp.f32, (n,)) for _ in range(2)]
    vs = [sp.ndarray(sp.f32, (n,)) for _ in range(2)]
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def direct_forward():
        loss.fill(0.0)
        rollout(p, x0, v0, xs, vs, loss, steps)
        return loss[None]

    def direct_gradient():
        loss.fill(0.0)
        with sp.Tape(loss):
            rollout(p, x0, v0, xs, vs, loss, steps)
        return p.grad.to_numpy(), x0.grad.to_numpy()

    pt, xt, vt = (torch.from_numpy(h).to(device) for h in (p0, x0h, v0h))
    pt.requires_grad_()
    xt.requires_grad_()

    def function_forward():
        with torch.no_grad():
            return rollout_function(pt, xt, vt, steps).item()

    def function_gradient():
        pt.grad = xt.grad = None
        rollout_function(pt, xt, vt, steps).backward()
        return pt.grad.cpu(), xt.grad.cpu()

    torch.testing.assert_close(function_gradient()[0].cpu(), torch.from_numpy(direct_gradient()[0]), rtol=1e-5,
                               atol=1e-6)
    return {"forward": (direct_forward, function_forward), "forward + backward": (direct_gradient, function_gradient)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,65536,1048576,16777216", help="float32 elements per crossing")
    ap.add_argument("--n", default="1024,1048576", help="elements of the function-call rollout")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)   # torch's threads would compete with lavapipe's for the same cores
    sp.init()
    cuda = torch.cuda.is_available()
    torch_device = torch.device("cuda") if cuda else torch.device("cpu")
    rng = np.random.default_rng(0)
    print(f"spvad on {sp.device_info()['name']} ({sp.device_info()['backend']}); torch {torch.__version__} on "
          f"{torch.cuda.get_device_name() if cuda else 'cpu'}; jax {jax.__version__} on {jax.devices()[0].platform}; "
          f"CPU {cpu_model()}")
    print("\n1. Crossing, median time per call (float32), and its ratio to a numpy copy of the same bytes")
    for n in (int(s) for s in args.sizes.split(",")):
        times = median_times(crossing_cases(n, rng, cuda), max(3, args.repeat if n <= 1 << 20 else 5))
        base = times["numpy copy of the same bytes"]
        print(f"  {n:,} elements ({n * 4 / 2**20:.3g} MiB): numpy copy {base * 1e6:,.1f} us")
        for name, t in times.items():
            print(f"    {name:36s} {t * 1e6:12,.1f} us  {t / base:8.2f}x")
    print(f"\n2. The same launches ({args.steps} steps + loss) direct and as an @sp.torch_function "
          f"(tensors on {torch_device}), median per call")
    for n in (int(s) for s in args.n.split(",")):
        for what, (direct, function) in function_cases(n, args.steps, rng, torch_device).items():
            times = median_times({"direct": direct, "function": function}, args.repeat)
            d, f = times["direct"], times["function"]
            print(f"  n = {n:>9,} {what:18s} direct {d * 1e3:8.2f} ms   torch_function {f * 1e3:8.2f} ms   "
                  f"overhead {(f - d) * 1e3:+7.2f} ms per call ({f / d:.2f}x)")


if __name__ == "__main__":
    main()

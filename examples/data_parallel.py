"""Data-parallel training of a simulation's parameters on PyTorch's engine: torch.distributed (gloo, on
127.0.0.1 only) runs several processes, each with its own spvad runtime and its share of the batch, and
DistributedDataParallel averages their gradients. Each process's simulation is an @sp.torch_function.

The parameters every process ends with are checked against one process training on the whole batch with
plain torch in float64 (the same arithmetic, torch's own autograd): data parallelism changes nothing but
where the work runs.

    python examples/data_parallel.py            # 2 processes, then the one-process reference
    python examples/data_parallel.py --world 4
"""
import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import spvad as sp

DT, STEPS, EPOCHS, LR, BATCH = 0.0625, 16, 60, 0.1, 64
TRUE_PARAMS, START = (1.3, 0.4), (0.6, 0.1)   # stiffness and quadratic drag of the springs


@sp.kernel
def rollout_loss(x0: sp.Array, v0: sp.Array, p: sp.Array, target: sp.Array, loss: sp.Array, steps: sp.i32):
    for i in range(x0.shape[0]):          # one thread per spring
        x, v = x0[i], v0[i]
        for _ in range(steps):            # semi-implicit Euler; the gradient keeps x, v per step
            v = v + DT * (-p[0] * x - p[1] * v * abs(v))
            x = x + DT * v
        d = x - target[i]
        loss[None] += d * d


@sp.torch_function
def squared_distance(params, x0, v0, target):
    loss = sp.ndarray(params.dtype, ())
    rollout_loss(x0, v0, params, target, loss, STEPS)
    return loss


def rollout_torch(params, x0, v0):
    """The same simulation in plain torch: the reference, and the maker of the targets."""
    x, v = x0, v0
    for _ in range(STEPS):
        v = v + DT * (-params[0] * x - params[1] * v * v.abs())
        x = x + DT * v
    return x


class Springs(torch.nn.Module):
    """The springs' parameters; `spvad=False` simulates them with plain torch instead."""

    def __init__(self, spvad=True):
        super().__init__()
        self.params = torch.nn.Parameter(torch.tensor(START, dtype=torch.float64))
        self.spvad = spvad

    def forward(self, x0, v0, target):
        if self.spvad:
            return squared_distance(self.params, x0, v0, target) / len(x0)
        return ((rollout_torch(self.params, x0, v0) - target) ** 2).sum() / len(x0)


def make_batch(seed=0):
    rng = np.random.default_rng(seed)
    x0 = torch.from_numpy(rng.uniform(-1.0, 1.0, BATCH))
    v0 = torch.from_numpy(rng.uniform(-0.5, 0.5, BATCH))
    with torch.no_grad():
        target = rollout_torch(torch.tensor(TRUE_PARAMS, dtype=torch.float64), x0, v0)
    return x0, v0, target


def train(model, batch, params, epochs=EPOCHS):
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for _ in range(epochs):
        opt.zero_grad()
        loss = model(*batch)
        loss.backward()
        opt.step()
    return params.detach().tolist(), loss.item()


def worker(rank, world, port, out, epochs):
    """One process: its own spvad runtime (sp.init(device=...) would pick its own GPU) and its share."""
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")   # loopback only
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sp.init()
        springs = Springs()
        model = DistributedDataParallel(springs)
        share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        params, loss = train(model, [t[share] for t in make_batch()], springs.params, epochs)
        sp.sync()
        messages = sp.runtime.get().device.validation_messages()
        pathlib.Path(out).write_text(json.dumps({"rank": rank, "params": params, "loss": loss,
                                                 "device": sp.device_info()["name"], "messages": messages}))
        # every rank done before any tears down: rank 0 hosts the store, and a rank still tearing down when it
        # has gone aborted in gloo ("terminate called without an active exception", 2-3 runs in 8 with torch 2.13)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_data_parallel(world=2, epochs=EPOCHS, timeout=600):
    """Start `world` worker processes of this script; their results (rank, params, loss, device)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{rank}.json") for rank in range(world)]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(rank), "--world", str(world),
                                   "--port", str(port), "--out", outs[rank], "--epochs", str(epochs)]) for rank in range(world)]
        try:
            codes = [p.wait(timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise RuntimeError(f"worker processes exited with {codes}")
        return [json.loads(pathlib.Path(o).read_text()) for o in outs]


def train_reference(epochs=EPOCHS):
    """One process, the whole batch, plain torch in float64."""
    springs = Springs(spvad=False)
    return train(springs, make_batch(), springs.params, epochs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args.worker, args.world, args.port, args.out, args.epochs)
    results = train_data_parallel(args.world, args.epochs)
    ref_params, ref_loss = train_reference(args.epochs)
    for r in results:
        print(f"rank {r['rank']} on {r['device']}: params {np.round(r['params'], 6)}, "
              f"loss of its share {r['loss']:.3e}")
    print(f"one process, whole batch, plain torch: params {np.round(ref_params, 6)}, loss {ref_loss:.3e}")
    print(f"true parameters {TRUE_PARAMS}; largest difference to the reference: "
          f"{max(abs(a - b) for r in results for a, b in zip(r['params'], ref_params)):.1e}")


if __name__ == "__main__":
    main()

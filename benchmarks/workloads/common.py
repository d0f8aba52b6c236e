"""Shared pieces of the peer benchmarks: bringing up each system on Vulkan, checking against float64
references, and timing (a warm-up, then the median of interleaved repetitions, each ending with the
system's own sync)."""
import contextlib
import dataclasses
import importlib
import statistics
import time
import traceback
from typing import Callable, Optional

import numpy as np

SYSTEMS = ("spvad", "limit", "taichi", "quadrants")   # limit: hand-written GLSL (workloads/limit.py)
PEER_MODULES = {"taichi": "taichi", "quadrants": "quadrants", "quadrants-cuda": "quadrants"}
ARCH = {}                     # system -> the arch init_peer starts it on, when not Vulkan (peer_arch)


class Unavailable(Exception):
    """A system that cannot run here (not installed, no Vulkan); the message says why."""


def init_spvad():
    import spvad as sp
    sp.init(backend="vulkan")
    return sp


@contextlib.contextmanager
def peer_arch(system, arch):
    """Within the block, init_peer(system) starts `system` on `arch` (Quadrants on CUDA: quadrants-cuda)."""
    ARCH[system] = arch
    try:
        yield
    finally:
        ARCH.pop(system, None)


def init_peer(system, arch=None, **config):
    """Import Taichi or Quadrants and (re)initialise it on Vulkan (or `arch`, or peer_arch's); a silent fall-back
    to the CPU backend is refused, so every timing is on the device asked for."""
    arch = arch or ARCH.get(system, "vulkan")
    try:
        ti = importlib.import_module(PEER_MODULES[system])
    except Exception as e:  # noqa: BLE001 - any import failure makes the peer unavailable
        raise Unavailable(f"import {PEER_MODULES[system]} failed: {e}") from None
    if PEER_MODULES[system] == "quadrants":
        config.setdefault("enable_fallback", False)
    try:
        ti.init(arch=getattr(ti, arch), log_level=ti.WARN, **config)
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"{system} init(arch={arch}) failed: {e}") from None
    got = ti.lang.impl.current_cfg().arch
    if got != getattr(ti, arch):
        raise Unavailable(f"{system} fell back to {got} instead of {arch}")
    return ti


def peer_adstack_config(system, size):
    """Taichi and Quadrants cannot size adstacks for a loop bound passed as a scalar argument: both need a
    fixed `ad_stack_size`, and Quadrants also needs its (experimental) adstack switched on."""
    if PEER_MODULES[system] == "quadrants":
        return {"ad_stack_size": size, "ad_stack_experimental_enabled": True}
    return {"ad_stack_size": size}


def release_peer(system):
    """Free a peer's device memory between workloads (its next init starts a fresh program)."""
    try:
        importlib.import_module(PEER_MODULES[system]).reset()
    except Exception:  # noqa: BLE001 - best effort
        pass


def close_to(got, ref, rtol, atol=0.0):
    """(ok, message): max errors of `got` against the float64 reference `ref`."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return False, f"shape {got.shape} != reference {ref.shape}"
    if not np.all(np.isfinite(got)):
        return False, f"{int(np.sum(~np.isfinite(got)))} non-finite values"
    err = np.abs(got - ref)
    bad = err > atol + rtol * np.abs(ref)
    worst = int(np.argmax(err / (atol + rtol * np.abs(ref) + 1e-300)))
    rel = err / np.maximum(np.abs(ref), 1e-300)
    msg = (f"max abs err {err.max():.3g} (rel {rel.max():.2g}), {int(bad.sum())}/{bad.size} outside "
           f"rtol={rtol:g} atol={atol:.3g}; "
           f"e.g. got {got.flat[worst]:.6g} want {ref.flat[worst]:.6g}")
    return not bool(bad.any()), msg


def all_close(checks):
    """Combine (ok, message) pairs labelled by name: [('x.grad', (ok, msg)), ...]."""
    ok = all(c[1][0] for c in checks)
    msg = "; ".join(f"{name}: {m}" for name, (good, m) in checks if not good) if not ok else \
        "; ".join(f"{name}: {m.split(',')[0]}" for name, (_, m) in checks)
    return ok, msg


@dataclasses.dataclass
class Op:
    """One timed operation of one system: `run()` then `sync()` is timed; `setup()` (untimed, synchronised)
    precedes every run; `check()` -> (ok, detail) looks at the results of the warm-up run."""
    name: str
    run: Callable
    sync: Callable
    setup: Optional[Callable] = None
    check: Optional[Callable] = None
    unit: str = "ms"
    scale: float = 1e3
    per: int = 1                  # the time is divided by this (e.g. per launch)


def row(workload, op, system, status, seconds=None, unit="ms", scale=1e3, detail="", samples=None):
    return {"workload": workload, "op": op, "system": system, "status": status,
            "value": None if seconds is None else seconds * scale, "unit": unit, "seconds": seconds,
            "samples_s": samples, "detail": detail}


def describe(e):
    """A one-line account of an exception and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename.split('/')[-1]}:{tb[-1].lineno})" if tb else ""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1][:300] if text else ''}{where}"


SAMPLE_S = 0.02   # a timed sample repeats a short operation to last about this long: a single 1-3 ms run is
                  # at the mercy of one scheduler tick on a loaded 2-core machine (MPM's Tape swung 1.23-1.45x)


def run_once(op, times=1):
    """Seconds per run of `op` (per `op.per`), the mean of `times` runs, each after its untimed setup."""
    total = 0.0
    for _ in range(times):
        if op.setup:
            op.setup()
            op.sync()
        t0 = time.perf_counter()
        op.run()
        op.sync()
        total += time.perf_counter() - t0
    return total / times / op.per


def runs_per_sample(op):
    """How many runs of a warmed-up `op` one sample averages so that it lasts about SAMPLE_S (1 to 50)."""
    seconds = run_once(op) * op.per
    return max(1, min(50, round(SAMPLE_S / max(seconds, 1e-6))))


def bench(workload, op_name, ops, repeat, warmup=1):
    """Rows for one operation of every system in `ops` ({system: Op}): each system warms up (compiles) and is
    checked; then the systems still standing are timed `repeat` times, interleaved in a rotating order so
    that load from elsewhere on the machine falls on all of them alike; the median is reported. A sample of
    a short operation is the mean of several runs (runs_per_sample)."""
    rows, live = [], []
    for system, op in ops.items():
        try:
            for _ in range(warmup):
                run_once(op)
            ok, detail = op.check() if op.check else (True, "")
        except Exception as e:  # noqa: BLE001 - a failing system is a result, not a crash
            rows.append(row(workload, op_name, system, "ERROR", unit=op.unit, detail=describe(e)))
            continue
        if ok:
            live.append((system, op, detail, runs_per_sample(op)))
        else:
            rows.append(row(workload, op_name, system, "WRONG", unit=op.unit, detail=detail))
    samples = {system: [] for system, *_ in live}
    failed = {}
    for r in range(repeat):
        for system, op, _, times in live[r % max(len(live), 1):] + live[:r % max(len(live), 1)]:
            if system in failed:
                continue
            try:
                samples[system].append(run_once(op, times))
            except Exception as e:  # noqa: BLE001
                failed[system] = describe(e)
    for system, op, detail, times in live:
        if system in failed:
            rows.append(row(workload, op_name, system, "ERROR", unit=op.unit, detail=failed[system]))
        else:
            s = samples[system]
            rows.append(row(workload, op_name, system, "OK", statistics.median(s), op.unit, op.scale, detail, s))
            rows[-1]["runs_per_sample"] = times
    return rows

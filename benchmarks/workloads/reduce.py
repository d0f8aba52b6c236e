"""Workload reduce: many threads adding into few addresses. forward: `loss[None] += x[i] * x[i]` over 16M float32
values; gradient: the weight gradient of a small dense layer y[b] = W x[b] (W 16 x 16) over a batch of 65,536
rows, `W.grad[j, k] += y.grad[b, j] * x[b, k]` (the reverse of a broadcast). Against the limit: hand-written GLSL
that reduces by subgroup and shared memory (benchmarks/limit/reduce_*.comp).

`compare_before_after()` times spvad's kernels against the same kernels compiled without the subgroup
reduction (spirv/lower_reduce.py), interleaved in one process:
    cd benchmarks && ../.venv/bin/python -c "from workloads import reduce; reduce.compare_before_after()"
"""
import contextlib
import statistics

import numpy as np

import spvad as sp
from . import limit
from .common import Op, close_to, init_spvad, run_once

NAME = "reduce"
OPS = ("forward", "gradient")
SYSTEMS = ("spvad", "limit")
J = K = 16   # the dense layer's shape


def config(quick):
    return {"n": 1 << (20 if quick else 24), "batch": 1 << (12 if quick else 16)}


def title(cfg):
    return (f"sum of x^2 over {cfg['n']:,} float32; dense {J}x{K} weight gradient over a batch of "
            f"{cfg['batch']:,}")


def reference(cfg):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, cfg["n"]).astype(np.float32)
    rows = rng.uniform(-1.0, 1.0, (cfg["batch"], K)).astype(np.float32)
    w = rng.uniform(-1.0, 1.0, (J, K)).astype(np.float32)
    gy = rng.uniform(-1.0, 1.0, (cfg["batch"], J)).astype(np.float32)
    return {"x": x, "loss": np.sum(x.astype(np.float64) ** 2), "rows": rows, "w": w, "gy": gy,
            "gw": gy.astype(np.float64).T @ rows.astype(np.float64)}


def _check_forward(loss, ref):
    return close_to(np.asarray(loss).reshape(()), ref["loss"], rtol=1e-4)


def _check_gradient(gw, ref):
    return close_to(gw.reshape(J, K), ref["gw"], rtol=1e-3, atol=0.05)   # sums of 65,536 float32 products


# ---- spvad -------------------------------------------------------------------------------------------
def sum_squares(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def dense(x: sp.Array, W: sp.Array, y: sp.Array):
    for b in range(x.shape[0]):
        for j in range(W.shape[0]):
            acc = 0.0
            for k in range(W.shape[1]):
                acc += W[j, k] * x[b, k]
            y[b, j] = acc


def _spvad_ops(cfg, ref, fwd, layer):
    """The two operations with kernels `fwd` (sum_squares) and `layer` (dense)."""
    x = sp.from_numpy(ref["x"])
    loss = sp.ndarray(sp.f32, ())
    rows, w = sp.from_numpy(ref["rows"]), sp.from_numpy(ref["w"], needs_grad=True)
    y = sp.ndarray(sp.f32, (cfg["batch"], J), needs_grad=True)
    layer(rows, w, y)

    def seed():
        w.grad.fill(0.0)
        y.grad.from_numpy(ref["gy"])   # the gradient consumes it

    return [Op("forward", lambda: fwd(x, loss), sp.sync, setup=lambda: loss.fill(0.0),
               check=lambda: _check_forward(loss.to_numpy(), ref)),
            Op("gradient", lambda: layer.grad(rows, w, y), sp.sync, setup=seed,
               check=lambda: _check_gradient(w.grad.to_numpy(), ref))]


def prepare_spvad(cfg, ref):
    init_spvad()
    return _spvad_ops(cfg, ref, sp.kernel(sum_squares), sp.kernel(dense))


# ---- the limit: hand-written GLSL (benchmarks/limit/reduce_*.comp) through spvad's RHI -------------------
def prepare_limit(cfg, ref, shared=True):
    dev = limit.device()
    n, batch = cfg["n"], cfg["batch"]
    assert n % 4 == 0, "the hand-written sum reads four elements at once"
    x, loss = limit.upload(dev, ref["x"]), limit.buffer(dev, 4)
    rows, gy, gw = limit.upload(dev, ref["rows"]), limit.buffer(dev, 4 * batch * J), limit.buffer(dev, 4 * J * K)
    local = 64   # the gradient's shared sums: J * K floats per subgroup must fit in shared memory
    subgroups = local // dev.info["limits"]["subgroup_size"]
    flags = {"SHARED": 1} if shared else {}
    forward = limit.Shader(dev, "reduce_forward", 2, "I", defines=flags)
    gradient = limit.Shader(dev, "reduce_gradient", 3, "III", local_size=local,
                            defines={"WEIGHTS": J * K, "SUBGROUPS": max(subgroups, 1), **flags})

    def clear():
        loss.view(np.float32)[0] = 0.0

    def seed():
        gw.view(np.float32)[:J * K] = 0.0
        gy.view(np.float32)[:batch * J] = ref["gy"].ravel()

    return [Op("forward", forward.launcher([x, loss], n // 4, n // 4), dev.sync, setup=clear,
               check=lambda: _check_forward(limit.read(loss, np.float32, 1), ref)),
            Op("gradient", gradient.launcher([rows, gy, gw], batch, batch, J, K), dev.sync, setup=seed,
               check=lambda: _check_gradient(limit.read(gw, np.float32, J * K), ref))]


# ---- today's code: the same kernels compiled without the subgroup reduction ------------------------------
@contextlib.contextmanager
def _without_subgroup_reduce():
    """Kernels compiled (first launched) inside lower every atomic as it is (their compiled form is kept)."""
    from spvad import runtime
    features = runtime.get().device.info["features"]
    was = features.get("subgroup_reduce", False)
    features["subgroup_reduce"] = False
    try:
        yield
    finally:
        features["subgroup_reduce"] = was


def compare_before_after(quick=False, repeat=9):
    """Median times of spvad's operations with and without the subgroup reduction, interleaved; prints them."""
    cfg = config(quick)
    ref = reference(cfg)
    init_spvad()
    now = {op.name: op for op in _spvad_ops(cfg, ref, sp.kernel(sum_squares), sp.kernel(dense))}
    with _without_subgroup_reduce():
        before = {op.name: op for op in _spvad_ops(cfg, ref, sp.kernel(sum_squares), sp.kernel(dense))}
        for op in before.values():   # compiled here
            run_once(op)
    times = {(name, which): [] for name in OPS for which in ("before", "after")}
    for _ in range(repeat + 1):   # the first round is a warm-up
        for name in OPS:
            for which, ops in (("before", before), ("after", now)):
                times[name, which].append(run_once(ops[name]))
    print(f"{title(cfg)}; {sp.device_info()['name']}")
    for name in OPS:
        b, a = (statistics.median(times[name, w][1:]) for w in ("before", "after"))
        print(f"  {name:8s} before {b * 1e3:8.2f} ms  after {a * 1e3:8.2f} ms  speed-up {b / a:5.2f}x")
        # one float32 atomic per element rounds at the running total's magnitude: the 16M sum drifts by ~2%
        for which, ops in (("before", before), ("after", now)):
            print(f"    {which} {'ok' if ops[name].check()[0] else 'OUTSIDE the tolerance'}: {ops[name].check()[1]}")



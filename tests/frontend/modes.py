"""Checking a kernel in every mode a Taichi program uses: its forward values, `k.grad`, `sp.Tape` over the
kernel and a second kernel reducing its outputs to a loss, and forward mode (`k.fwd`), each against an
independent float64 numpy reference (central differences of it for the derivatives)."""
import numpy as np

import spvad as sp
from adcheck import assert_close, check_grad, device_args, rand, reference


@sp.kernel
def weighted_sum_1d(out: sp.Array, w: sp.Array, loss: sp.Array):
    for i in out:
        loss[None] += out[i] * w[i]


@sp.kernel
def weighted_sum_2d(out: sp.Array, w: sp.Array, loss: sp.Array):
    for i, j in out:
        loss[None] += out[i, j] * w[i, j]


@sp.kernel
def weighted_sum_0d(out: sp.Array, w: sp.Array, loss: sp.Array):
    loss[None] += out[None] * w[None]


WEIGHTED_SUM = {0: weighted_sum_0d, 1: weighted_sum_1d, 2: weighted_sum_2d}


def perturbed(args, k, direction, h):
    a = [np.asarray(x, np.float64) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x for x in args]
    a[k] = a[k] + h * direction
    return a


def weighted_loss(ref, args, outs, seeds):
    return sum(float(np.sum(s * o)) for s, o in zip(seeds, reference(ref, args, outs)))


def fd_gradient(ref, args, outs, seeds, k, eps=1e-6):
    g = np.zeros(np.shape(args[k]))
    for j in np.ndindex(g.shape):
        e = np.zeros(g.shape)
        e[j] = 1.0
        g[j] = (weighted_loss(ref, perturbed(args, k, e, eps), outs, seeds) -
                weighted_loss(ref, perturbed(args, k, e, -eps), outs, seeds)) / (2 * eps)
    return g


def check_tape(kernel, ref, args, outs, wrt, rng, rtol):
    """sp.Tape over the kernel and a weighted sum of its outputs (a second kernel) into a scalar loss."""
    seeds = [rand(rng, np.shape(args[k]), 0.5, 1.5).astype(np.float64) for k in outs]
    dev = device_args(args, set(outs) | set(wrt))
    weights = [sp.from_numpy(s.astype(np.float32)) for s in seeds]
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        kernel(*dev)
        for k, w in zip(outs, weights):
            WEIGHTED_SUM[np.ndim(args[k])](dev[k], w, loss)
    want = weighted_loss(ref, args, outs, seeds)
    assert_close(loss.to_numpy(), want, rtol, f"Tape loss of {kernel.name}")
    for k in wrt:
        fd = fd_gradient(ref, args, outs, seeds, k)
        assert np.any(fd != 0), f"vacuous: zero gradient w.r.t. argument {k}"
        assert_close(dev[k].grad.to_numpy(), fd, rtol, f"Tape gradient w.r.t. argument {k} of {kernel.name}")


def check_forward_mode(kernel, ref, args, outs, wrt, rng, rtol, eps=1e-6):
    """k.fwd with random tangents on the inputs `wrt`: the outputs' .dual is the directional derivative."""
    dev = [sp.from_numpy(a, needs_dual=k in wrt or k in outs) if isinstance(a, np.ndarray) else a
           for k, a in enumerate(args)]
    tangents = {k: rand(rng, np.shape(args[k])) for k in wrt}
    for k, t in tangents.items():
        dev[k].dual.from_numpy(t)
    kernel.fwd(*dev)
    plus, minus = list(args), list(args)
    for k, t in tangents.items():
        plus = perturbed(plus, k, t.astype(np.float64), eps)
        minus = perturbed(minus, k, t.astype(np.float64), -eps)
    for k, hi, lo in zip(outs, reference(ref, plus, outs), reference(ref, minus, outs)):
        want = (hi - lo) / (2 * eps)
        assert np.any(want != 0), f"vacuous: zero tangent of output {k}"
        assert_close(dev[k].dual.to_numpy(), want, rtol, f"forward-mode tangent of output {k} of {kernel.name}")


def check_modes(kernel, ref, args, outs, wrt, rng, rtol=2e-4):
    """Forward values and k.grad (adcheck.check_grad), sp.Tape and k.fwd, all against `ref`."""
    check_grad(kernel, ref, args, outs, wrt, rng, rtol=rtol, fwd_rtol=rtol)
    check_tape(kernel, ref, args, outs, wrt, rng, rtol)
    check_forward_mode(kernel, ref, args, outs, wrt, rng, rtol)

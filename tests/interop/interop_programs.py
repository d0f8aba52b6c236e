"""A differentiable program the interop tests share: damped springs stepped with double-buffered state,
several kernels, a host write, several outputs; and its float64 re-implementation in plain torch (the
reference: torch's own autograd on the same arithmetic, no spvad)."""
import torch

import spvad as sp

DT = 0.0625   # exact in f32 and f64: the f32 constant in f64 kernels is the same number


@sp.kernel
def copy_into(src: sp.Array, dst: sp.Array):
    for i in range(src.shape[0]):
        dst[i] = src[i]


@sp.kernel
def spring_step(x: sp.Array, v: sp.Array, p: sp.Array, x_next: sp.Array, v_next: sp.Array):
    for i in range(x.shape[0]):
        a = -p[0] * x[i] - p[1] * v[i] * abs(v[i])
        v_new = v[i] + DT * a
        v_next[i] = v_new
        x_next[i] = x[i] + DT * v_new


@sp.kernel
def squared_error(x: sp.Array, target: sp.Array, scale: sp.f32, loss: sp.Array):
    for i in range(x.shape[0]):
        d = x[i] - target[i]
        loss[None] += scale * d * d


def rollout(p, x0, v0, target, steps, scale=1.0):
    """(loss, final positions) after `steps` steps from (x0, v0); arrays two of each, swapped every step."""
    x = [sp.ndarray(x0.dtype, x0.shape) for _ in range(2)]
    v = [sp.ndarray(x0.dtype, x0.shape) for _ in range(2)]
    copy_into(x0, x[0])
    copy_into(v0, v[0])
    for s in range(steps):
        spring_step(x[s % 2], v[s % 2], p, x[1 - s % 2], v[1 - s % 2])
    loss = sp.ndarray(x0.dtype, ())
    loss.fill(0.0)   # a host write inside the recording
    squared_error(x[steps % 2], target, scale, loss)
    return loss, x[steps % 2]


def rollout_reference(p, x0, v0, target, steps, scale=1.0):
    x, v = x0, v0
    for _ in range(steps):
        v = v + DT * (-p[0] * x - p[1] * v * v.abs())
        x = x + DT * v
    return scale * ((x - target) ** 2).sum(), x


def random_problem(rng, n=16, dtype=torch.float64):
    """Random, non-zero parameters and states."""
    def rand(*shape, lo=0.2, hi=1.0):
        sign = torch.where(torch.rand(*shape, generator=rng) < 0.5, -1.0, 1.0)
        return (sign * (lo + (hi - lo) * torch.rand(*shape, generator=rng))).to(dtype)
    p = (0.5 + torch.rand(2, generator=rng)).to(dtype)
    return p, rand(n), rand(n), rand(n)

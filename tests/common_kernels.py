"""Kernel functions several test files share, undecorated: IR tests build them with `build_kernel`, the others
wrap them with `sp.kernel` (each file its own kernel object, so no compile or replay state is shared); and the
float64 references of the spring chain."""
import numpy as np

import spvad as sp


def integrate(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    """The integrator of benchmarks/: a dynamic loop whose gradient keeps a value per step on an adstack."""
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + 0.01 * sp.sin(v) * w[i]
        y[i] = v


def sin_out(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.sin(x[i])


def sin_steps(x: sp.Array, y: sp.Array, s: sp.f32, n: sp.i32):
    """v += s sin(v), n times: an f32 adstack."""
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + s * sp.sin(v)
        y[i] = v


def flip(x: sp.Array, y: sp.Array, n: sp.i32):
    """A bool carried through a dynamic loop: a bool adstack."""
    for i in range(x.shape[0]):
        v = x[i]
        up = v > 0.0
        for _ in range(n):
            if up:
                v = v * 0.5
            else:
                v = v * 2.0
            up = not up
        y[i] = v


def halve_until_small(x: sp.Array, y: sp.Array):
    """A while loop whose trip count depends on the data."""
    for i in range(x.shape[0]):
        v = x[i]
        while v > 0.1:
            v = v * 0.5 + 0.01
        y[i] = v


def chain_forces(x: sp.Array, f: sp.Array, k: sp.Array, t: sp.i32):
    """A chain of springs at step t: spring s joins particles s and s + 1 (rest length 1)."""
    for s in range(k.shape[0]):
        d = x[t, s + 1] - x[t, s]
        c = k[s] * (d - 1.0)
        f[t, s] += c
        f[t, s + 1] += -c


CHAIN_DT = 0.01


def chain_advance(x: sp.Array, v: sp.Array, f: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        v[t + 1, i] = 0.99 * v[t, i] + CHAIN_DT * f[t, i]
        x[t + 1, i] = x[t, i] + CHAIN_DT * v[t + 1, i]


def chain_energy(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += x[t, i] * x[t, i] * (i + 1)


def chain_np(x0, k, steps):
    """The spring chain's energy after `steps` steps from positions x0 (one chain), in float64."""
    x, v = np.asarray(x0, np.float64).copy(), np.zeros(len(x0))
    for _ in range(steps):
        c = k * (x[1:] - x[:-1] - 1.0)
        f = np.zeros(len(x))
        f[:-1] += c
        f[1:] -= c
        v = 0.99 * v + CHAIN_DT * f
        x = x + CHAIN_DT * v
    return np.sum(x * x * np.arange(1, len(x) + 1))


def central(fn, arg, h):
    """Central differences of the float64 function `fn` at every entry of `arg`."""
    out = np.zeros(arg.shape)
    for i in range(arg.size):
        up, down = arg.astype(np.float64).copy(), arg.astype(np.float64).copy()
        up.flat[i] += h
        down.flat[i] -= h
        out.flat[i] = (fn(up) - fn(down)) / (2 * h)
    return out


def dense(x: sp.Array, W: sp.Array, y: sp.Array):
    """A dense layer y = x W^T over a batch: the gradient of W is the reverse of a broadcast (every thread adds
    into every W element)."""
    for b in range(x.shape[0]):
        for j in range(W.shape[0]):
            acc = 0.0
            for k in range(W.shape[1]):
                acc += W[j, k] * x[b, k]
            y[b, j] = acc

"""Kernel functions several test files share, undecorated: IR tests build them with `build_kernel`, the others
wrap them with `sp.kernel` (each file its own kernel object, so no compile or replay state is shared)."""
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

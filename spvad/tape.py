"""`sp.Tape`: records kernel launches, then runs their gradients in reverse order on exit."""
from . import runtime
from .errors import ArgumentError

_active = []


def record(kernel, args):
    if _active:
        _active[-1].record(kernel, args)


class Tape:
    """`with sp.Tape(loss=loss): forward(...)` zeroes the .grad of every needs-grad ndarray the recorded
    launches touch, seeds loss.grad = 1 and runs the launches' gradients in reverse order on exit."""

    def __init__(self, loss=None, validation=False):
        if loss is not None:
            if not getattr(loss, "_spvad_ndarray", False):
                raise ArgumentError(f"Tape(loss=...) needs an sp.ndarray, got {type(loss).__name__}")
            if loss.grad is None:
                raise ArgumentError("Tape(loss=...): the loss ndarray needs needs_grad=True")
            if loss.size != 1:
                raise ArgumentError(f"Tape(loss=...): the loss must hold a single element, got shape {loss.shape}")
        self.loss, self.validation = loss, validation
        self.launches = []

    def record(self, kernel, args):
        self.launches.append((kernel, args))

    def __enter__(self):
        _active.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _active.remove(self)
        if exc_type is not None:
            return False
        self.backward()
        return False

    def backward(self):
        seen = {}
        for kernel, args in self.launches:
            for a in kernel.arrays_of(args):
                if a.grad is not None:
                    seen[id(a)] = a
        for a in seen.values():
            a.grad.fill(0)
        if self.loss is not None:
            self.loss.grad.fill(1)
        for kernel, args in reversed(self.launches):
            kernel.grad(*args)
        runtime.sync()


_forward = []


def forward_mode_active():
    return _forward[-1] if _forward else None


class FwdMode:
    """`with sp.FwdMode(loss=y, param=x, seed=[...]):` kernels launched inside run in forward mode;
    afterwards `y.dual` holds the derivative of y along `seed` (default: all ones for a scalar x)."""

    def __init__(self, loss, param, seed=None):
        import numpy as np
        for name, a in (("loss", loss), ("param", param)):
            if not getattr(a, "_spvad_ndarray", False):
                raise ArgumentError(f"FwdMode({name}=...) needs an sp.ndarray, got {type(a).__name__}")
            if a.dual is None:
                raise ArgumentError(f"FwdMode: the {name} ndarray needs needs_dual=True")
        if seed is None:
            if param.size != 1:
                raise ArgumentError(f"FwdMode: param has {param.size} elements; pass seed=[...] of that length")
            seed = [1.0]
        seed = np.asarray(seed, dtype=np.float64).reshape(-1)
        if seed.size != param.size:
            raise ArgumentError(f"FwdMode: seed has {seed.size} entries, param has {param.size} elements")
        self.loss, self.param, self.seed = loss, param, seed.reshape(param.shape)
        self.seen = {id(param)}

    def prepare(self, arrays):
        """An array first seen in this context starts with a zero dual (only `param` carries the seed)."""
        for a in arrays:
            if a.dual is not None and id(a) not in self.seen:
                self.seen.add(id(a))
                a.dual.fill(0)

    def __enter__(self):
        self.param.dual.from_numpy(self.seed)
        self.loss.dual.fill(0)
        _forward.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _forward.remove(self)
        if exc_type is None:
            runtime.sync()
        return False

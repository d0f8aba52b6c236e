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

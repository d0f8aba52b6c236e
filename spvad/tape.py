"""`sp.Tape` (records launches, runs their gradients in reverse on exit), `sp.FwdMode`, and custom
gradients (`@sp.grad_replaced` / `@sp.grad_for`)."""
import functools

from . import runtime
from .errors import ArgumentError

_active = []


def validating():
    """True inside a `Tape(validation=True)` when the runtime runs with debug=True, except in the launches
    of a @grad_replaced function: their generated gradients never run (the supplied one does), so the
    data access rule that protects those gradients does not apply to them."""
    return bool(_active) and _active[-1].validation and not _active[-1].inside_custom and runtime.get().debug


def read_marker(array):
    """The validating Tape's marker of which elements of `array` were read (zeros when first asked)."""
    return _active[-1].read_marker(array)


def recording():
    return bool(_active)


def record(kernel, args, bound, arrays):
    if _active:
        _active[-1].record(kernel, args, bound, arrays)


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
        self.launches = []        # (kernel, checked arguments) or (CustomGradient, (args, kwargs))
        self.inside_custom = 0
        self.arrays = {}          # id -> every ndarray a recorded launch touched (their grads are zeroed)
        self.markers = {}         # id -> (ndarray, its read marker) for the access checker (validation)

    def read_marker(self, array):
        entry = self.markers.get(id(array))
        if entry is None:
            from .ndarray import Ndarray
            from .types import i32
            entry = self.markers[id(array)] = (array, Ndarray(i32, array.storage_shape))
        return entry[1]

    def record(self, kernel, args, bound, arrays):
        for a in arrays:
            self.arrays[id(a)] = a
        if not self.inside_custom:   # launches inside a @grad_replaced function only count for zeroing
            self.launches.append((kernel, bound))

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
        for a in self.arrays.values():
            if a.grad is not None:
                a.grad.fill(0)
        if self.loss is not None:
            self.loss.grad.fill(1)
        for kernel, args in reversed(self.launches):
            if isinstance(kernel, CustomGradient):
                kernel.backward(*args)
            else:
                kernel.grad_bound(*args)
        runtime.sync()


class CustomGradient:
    """A Python function whose gradient a user supplies: a Tape records the call itself and, on the way
    back, runs the function registered with @sp.grad_for instead of the gradients of its launches."""

    def __init__(self, fn):
        self.fn, self.grad_fn = fn, None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        tape = _active[-1] if _active else None
        if tape is None:
            return self.fn(*args, **kwargs)
        if not tape.inside_custom:   # nested in another replaced function: the outer gradient covers it
            tape.launches.append((self, (args, kwargs)))
        tape.inside_custom += 1
        try:
            return self.fn(*args, **kwargs)
        finally:
            tape.inside_custom -= 1

    def backward(self, args, kwargs):
        if self.grad_fn is None:
            raise ArgumentError(f"@sp.grad_replaced function {self.fn.__name__} has no @sp.grad_for gradient")
        self.grad_fn(*args, **kwargs)


def grad_replaced(fn):
    return CustomGradient(fn)


def grad_for(primal):
    if not isinstance(primal, CustomGradient):
        raise ArgumentError("@sp.grad_for(f) needs f decorated with @sp.grad_replaced")

    def register(grad_fn):
        primal.grad_fn = grad_fn
        return grad_fn
    return register


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
        self.loss, self.param, self.seed = loss, param, seed.reshape(param.storage_shape)
        self.seen = {id(param)}

    def prepare(self, arrays):
        """An array first seen in this context starts with a zero dual (only `param` carries the seed)."""
        for a in arrays:
            if a.dual is not None and id(a) not in self.seen:
                self.seen.add(id(a))
                a.dual.fill(0)

    def __enter__(self):
        self.loss.dual.fill(0)
        self.param.dual.from_numpy(self.seed)   # after: loss may be param itself (an in-place update)
        _forward.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _forward.remove(self)
        if exc_type is None:
            runtime.sync()
        return False

"""Custom gradients: `@sp.grad_replaced` marks a Python function whose gradient a user supplies with
`@sp.grad_for`; a Tape records the call (entries.CustomEntry) instead of its launches' gradients."""
import functools

from .. import recording
from ..errors import ArgumentError
from .controls import BoundCustomGradient
from .entries import CustomEntry


class CustomGradient:
    """A Python function whose gradient a user supplies: a Tape records the call itself and, on the way
    back, runs the function registered with @sp.grad_for instead of the gradients of its launches."""

    def __init__(self, fn):
        self.fn, self.grad_fn = fn, None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        tape = recording.current()
        if tape is None:
            return self.fn(*args, **kwargs)
        tape.stop_plans()
        entry = None
        if not tape.inside_custom:   # nested in another replaced function: the outer gradient covers it
            entry = CustomEntry(self, args, kwargs)
            tape.entries.append(entry)
        tape.inside_custom += 1
        try:
            return self.fn(*args, **kwargs)
        finally:
            tape.inside_custom -= 1
            if entry is not None:
                for a in entry.ndarrays():
                    entry.needs.append((a, a.version))
                    tape.checkpoints.need(a, a.version)

    def __get__(self, obj, objtype=None):   # a method: `self.f(...)` calls f(self, ...) under the same rules
        return self if obj is None else BoundCustomGradient(self, obj)

    @property
    def grad(self):
        """The supplied gradient: `f.grad(...)` runs the @sp.grad_for function."""
        return lambda *args, **kwargs: self.backward(args, kwargs)

    def backward(self, args, kwargs):
        if self.grad_fn is None:
            raise ArgumentError(f"@sp.grad_replaced function {self.fn.__name__} has no @sp.grad_for gradient")
        return self.grad_fn(*args, **kwargs)


def grad_replaced(fn):
    return CustomGradient(fn)


def grad_for(primal):
    if not isinstance(primal, CustomGradient):
        raise ArgumentError("@sp.grad_for(f) needs f decorated with @sp.grad_replaced")

    def register(grad_fn):
        primal.grad_fn = grad_fn
        return grad_fn
    return register

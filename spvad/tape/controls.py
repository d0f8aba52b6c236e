"""Gradient controls: `@sp.no_grad` on a kernel (a Tape records none of its launches' gradients) and the
bound form of a `@sp.grad_replaced` method (`self.f(...)`)."""
from ..errors import ArgumentError


def no_grad(kernel):
    """`@sp.no_grad` above `@sp.kernel` (Taichi's `ti.ad.no_grad`): the kernel's launches inside a Tape are
    skipped by its backward, as host code would be; what they overwrite is still kept for the gradients
    recorded before them."""
    if not hasattr(kernel, "derivative_with_companions"):
        raise ArgumentError(f"@sp.no_grad needs an @sp.kernel (put it above @sp.kernel), got "
                            f"{type(kernel).__name__}")
    kernel.no_grad = True
    return kernel


class BoundCustomGradient:
    """`obj.f` for a @sp.grad_replaced method f: calls and `.grad` pass obj first, as a bound method does."""

    def __init__(self, custom, obj):
        self.custom, self.obj = custom, obj
        self.__name__ = custom.fn.__name__

    def __call__(self, *args, **kwargs):
        return self.custom(self.obj, *args, **kwargs)

    def grad(self, *args, **kwargs):
        """Runs the supplied gradient (the @sp.grad_for method) on obj."""
        return self.custom.backward((self.obj,) + args, kwargs)


def record_copy(tape, dst, src):
    """`dst.copy_from(src)` inside a Tape (called before the copy is queued): recorded like a launch. What the
    copy overwrites is kept for the gradients recorded before it; a dst without .grad gets a temporary one
    when src carries gradient (the chain would stop there)."""
    tape.stop_plans()
    for a in (dst, src):
        tape.arrays.setdefault(id(a), a)
    if src.grad is not None and dst.grad is None and not tape.needs_grad_only:
        tape._give_temporary_grad(dst)
    if tape.checkpoints.watches(dst):
        tape.checkpoints.protect(dst, tape.name_of(dst), f"the copy into {tape.name_of(dst)}")
    tape.entries.append(CopyEntry(dst, src))


class CopyEntry:
    """A recorded `dst.copy_from(src)`: its gradient adds dst.grad into src.grad, then zeroes dst.grad (the copy
    overwrote dst: its old values reach nothing after it)."""

    def __init__(self, dst, src):
        self.dst, self.src = dst, src

    def backward(self, tape):
        dst, src = self.dst, self.src
        if dst.grad is None:
            return
        if src.grad is not None:
            src.grad.from_numpy(src.grad.to_numpy() + dst.grad.to_numpy())
        dst.grad.zero_on_device()

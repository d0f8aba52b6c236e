"""What a `sp.Tape` records, one entry per launch, host write or custom-gradient call, each with its
`backward`; and the Recipe of a launch (what its gradient reads and what it writes, worked out once per kernel)."""
from .. import runtime
from ..frontend.random_numbers import random_key_index
from .checkpoints import StateView


def merged_slices(a, b):
    """The slices (ir/rows.py) two writes of one launch to one array touch together: along the axes both name."""
    if a is None or b is None:
        return None
    return {axis: tuple(sorted(set(a[axis]) | set(b[axis]))) for axis in a if axis in b} or None


def launch_writes(ck, everything):
    """(array index, rows, writes) per array a launch of `ck` writes: an array bound to several parameters is
    written by each (the rows they touch together, and one version bump each)."""
    written = {}   # id -> (array index, rows, bumps)
    for ai, slices in ck.facts.primal_writes:
        at, before, bumps = written.get(id(everything[ai]), (ai, slices, 0))
        rows = slices if before is slices else merged_slices(before, slices)
        written[id(everything[ai])] = (at, rows, bumps + 1)
    return written.values()


class Recipe:
    """What a Tape does at every launch of a compiled kernel with the same arguments' .grad present and as many
    distinct arrays (`grads`: .grad present per argument, before the temporary ones), worked out at the first:
    the gradient's specs and compiled kernel, the arrays given a temporary .grad (indices among the launch's
    arguments and global ndarrays), the contents the gradient reads ((array index, (index, field), rows) PRE;
    POST as ArrayFacts.reads_after) and, when no array is bound twice, what the launch writes (as
    launch_writes; None: work it out per launch)."""
    __slots__ = ("ck", "grads", "specs", "grad_ck", "given", "reads", "post", "writes", "draws_random")

    def __init__(self, ck, grads, specs, grad_ck, given, distinct):
        self.ck, self.grads, self.specs, self.grad_ck, self.given = ck, grads, specs, grad_ck, given
        self.reads = tuple((ai, (ai, field), slices) for ai, field, slices in grad_ck.facts.reads_before)
        self.post = grad_ck.facts.reads_after
        self.writes = tuple((ai, slices, 1) for ai, slices in ck.facts.primal_writes) if distinct else None
        self.draws_random = random_key_index(ck.ir) is not None


class Writer:
    """"the launch of kernel NAME", for a message that may never be written."""
    __slots__ = ("kernel",)

    def __init__(self, kernel):
        self.kernel = kernel

    def __str__(self):
        return f"the launch of kernel {self.kernel.name}"


class ArrayName:
    """How messages name an ndarray ("'x' (kernel step)"): the parameter name is looked up only when a message
    is written, not at every launch that first meets an array."""
    __slots__ = ("kernel", "ck", "index")

    def __init__(self, kernel, ck, index):
        self.kernel, self.ck, self.index = kernel, ck, index

    def __str__(self):
        return f"'{self.kernel.array_names(self.ck)[self.index]}' (kernel {self.kernel.name})"


class LaunchEntry:
    __slots__ = ("kernel", "specs", "arrays", "scalars", "everything", "needs", "post")

    def __init__(self, kernel, specs, arrays, scalars, everything, post):
        self.kernel, self.specs, self.arrays, self.scalars = kernel, specs, arrays, scalars
        self.everything = everything   # arrays + captured globals, as kernel.arrays indexes them
        self.needs = {}                # (array index, field) -> (version, rows along its axis) the gradient reads
        self.post = post               # (array index, field, rows) read as the launch left them

    def backward(self, tape):
        buffers = None   # array index -> {field: buffer}, where one is not the array's own
        for (ai, field), (version, rows) in self.needs.items():
            a = self.everything[ai]
            if a.version == version:   # unchanged since: the array's own buffer
                continue
            buffer = tape.checkpoints.buffer_of(a, version, rows, tape.name_of(a), self.kernel.name, field)
            if buffer is not a.buffer:
                buffers = buffers or {}
                buffers.setdefault(ai, {})[field] = buffer
        views = None
        if buffers:
            views = {ai: StateView(self.everything[ai], fields.get("primal", self.everything[ai].buffer),
                                   fields.get("final", self.everything[ai].buffer))
                     for ai, fields in buffers.items()}
        self.kernel.grad_bound(self.specs, self.arrays, self.scalars, views,
                               captured=self.everything[len(self.arrays):])


class HostWriteEntry:
    """A host write's gradient: the overwritten values no longer reach the loss, so their .grad is cleared."""

    def __init__(self, array, index):
        self.array, self.index = array, index

    def backward(self, tape):
        if self.array.grad is not None:
            self.array.grad.zero_on_device(self.index)


class CustomEntry:
    """A call of a @grad_replaced function: its @grad_for function runs on the contents the call left."""

    def __init__(self, fn, args, kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.needs = []   # (ndarray argument, version after the call)

    def ndarrays(self):
        return [a for a in list(self.args) + list(self.kwargs.values()) if getattr(a, "_spvad_ndarray", False)]

    def backward(self, tape):
        """Put back the contents the call left where later writes changed them, run the supplied gradient,
        then restore the final contents (the user's arrays end as the forward left them)."""
        device, swaps = runtime.get().device, []
        for a, version in self.needs:
            if a.version != version:
                kept = tape.checkpoints.buffer_of(a, version, None, tape.name_of(a), self.fn.fn.__name__)
                final = device.create_buffer(a.buffer.nbytes)
                device.copy_buffer(a.buffer, final, a.buffer.nbytes)
                device.copy_buffer(kept, a.buffer, a.buffer.nbytes)
                swaps.append((a, final))
        self.fn.backward(self.args, self.kwargs)
        for a, final in swaps:
            device.copy_buffer(final, a.buffer, a.buffer.nbytes)
            final.release()

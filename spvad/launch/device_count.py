"""Launches of a task whose thread count is read from arrays (ir/thread_count.py): a one-thread counting launch
writes the group counts of the task's dispatches, which read them when they run (Device.launch_indirect), so
the count is the arrays' value at that point of the queue with no sync. Where the host needs the count (a
depth probe sizing adstacks, stacks in a buffer of one slice per thread) it syncs and evaluates it instead."""
import numpy as np

from .. import types as T
from ..errors import ArgumentError, DeviceError, ThreadCountError
from ..ir import nodes as N
from ..ir.interp import OutOfBoundsError, eval_num_threads
from ..ir.thread_count import ARGS_WORDS, ERROR_WORD, TAIL_GROUPS, checks
from .capture import refuse_host_step
from .dispatch import BufferArg, PushPacker, dispatch

SINGLE = 1   # the counting task runs one thread


class DeviceCount:
    """What a runtime holds for the count of one task (`ct`, a pipeline.CompiledTask whose `thread_count` is
    the lowered counting task): its pipeline and its words buffer (layout: ir/thread_count.py)."""

    def __init__(self, rt, ct):
        self.rt, self.ct = rt, ct
        self.shared = self.words = None   # made by the first counting launch

    def release(self):
        if self.words is not None:
            self.shared.release()
            self.words.release()
        self.shared = self.words = None

    def launch(self, arrays, scalars, shapes):
        """Queue the counting launch; returns (prepared launch, recorded, push) for a replay, as dispatch gives
        them."""
        low = self.ct.thread_count
        self.refuse_addressed(arrays)
        if self.words is None:
            self.shared = self.rt.shared_pipelines.get(low, self.ct.kernel_name + " (thread count)", None)
            self.words = self.rt.device.create_buffer(4 * ARGS_WORDS)
        push = PushPacker(low, shapes + [(ARGS_WORDS,)])
        send, recorded = dispatch(self.rt, low, self.shared.pipeline, arrays + [BufferArg(self.words)], scalars,
                                  shapes, SINGLE, push=push)
        return send, recorded, push

    def groups(self, part):
        """(buffer, byte offset) of the group counts of `part`: the task's module or a coarsened task's tail."""
        return self.words, 4 * TAIL_GROUPS if part.rest else 0

    def on_host(self, arrays, shapes, scalars):
        """The count evaluated on the host from the arrays as the queued launches leave them (syncs)."""
        refuse_host_step(self.rt, self.ct.kernel_name, "its thread count (read from arrays) is needed",
                         "fix its adstack capacities with an ad_stack_size=N small enough for Function-scope "
                         "stacks, or launch it outside the capture")
        self.refuse_addressed(arrays)
        self.rt.sync()
        buffers = {}
        for s in self.ct.task.header.stmts:
            if isinstance(s, N.GlobalLoad):
                ai = s.array.index
                dtype = np.dtype(T.storage_np_dtype(s.array.dtype))
                data = arrays[ai].buffer.view(dtype)[: int(np.prod(shapes[ai], dtype=np.int64))]
                buffers[(ai, s.field)] = data.reshape(shapes[ai])
        try:
            return eval_num_threads(self.ct.task, scalars, shapes, buffers)
        except OutOfBoundsError as e:
            raise DeviceError(f"kernel {self.ct.kernel_name}: {e}") from None

    def refuse_addressed(self, arrays):
        """The counting kernel binds its arrays plainly: a bound read from an array past the device's largest
        binding (reached by address, rhi/vulkan/buffers.py) is refused rather than read wrong."""
        for s in self.ct.task.header.stmts:
            if isinstance(s, N.GlobalLoad) and arrays[s.array.index].buffer.addressed:
                raise ArgumentError(
                    f"kernel {self.ct.kernel_name}: its parallel loop's bounds read '{s.array.name}', an array "
                    "past the device's largest storage-buffer binding; copy the bound into a small array first")

    def error(self):
        """At sync: the error of a counting launch since the last sync (the words cleared), or None."""
        words = self.words.view(np.int32) if self.words is not None else None
        failed = int(words[ERROR_WORD]) if words is not None else 0
        if not failed:
            return None
        words[ERROR_WORD] = 0
        s = checks(self.ct.task)[failed - 1]
        where = f"kernel {self.ct.kernel_name} ({self.ct.task.name})"
        if isinstance(s, N.GlobalLoad):
            return DeviceError(f"{where}: the bounds of its parallel loop read '{s.array.name}' outside its "
                               f"shape, so that launch ran no thread{_at(s)}")
        return ThreadCountError(
            f"{where}: the thread count of its parallel loop, read from arrays on the device, needs a value "
            "outside 32 bits: a launch holds at most 2**31 - 1 threads, so that one ran no thread; split it "
            f"into several launches{_at(s)}")


def _at(s):
    return f"\n    at {s.loc}" if s.loc is not None else ""

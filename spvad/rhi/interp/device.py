"""The interpreter backend's Device: buffers are numpy memory, a launch runs an InterpTask (program.py) on the
IR interpreter at the next sync, in order with copies and fills, as base.Device's execution model says. A capture
(begin_capture / end_capture) keeps what is queued meanwhile as a batch that run_batch queues again, in order."""
import math
import struct

import numpy as np

from ... import types as T
from ...errors import DeviceError
from ...ir.interp import InterpError, run_task
from ..base import Buffer, Device, Pipeline, check_regions, check_transfer

INFO = {
    "backend": "interp", "name": "spvad IR interpreter", "driver": "spvad", "device_type": "cpu",
    "api_version": "1.0",
    "limits": {"max_workgroup_count": (2**31 - 1, 65535, 65535), "max_workgroup_invocations": 1024,
               "max_workgroup_size": (1024, 1024, 64), "max_push_constants_size": 1 << 16,
               "max_storage_buffer_range": 2**31 - 1, "subgroup_size": 1, "max_loop_iterations": None},
    "features": {"float64": True, "int64": False, "atomic_float32_add": True},
    "preferred_local_size": 64,
}


class InterpBuffer(Buffer):
    def __init__(self, nbytes):
        self.nbytes = nbytes
        self._data = np.zeros(max(-(-nbytes // 8), 1), np.uint64).view(np.uint8)   # 8-byte aligned

    def view(self, dtype):
        if self._data is None:
            raise DeviceError("view of a released buffer")
        dtype = np.dtype(dtype)
        return self._data[: self.nbytes - self.nbytes % dtype.itemsize].view(dtype)

    @property
    def released(self):
        return self._data is None

    def release(self):
        self._data = None   # a queued launch holding this buffer keeps its memory alive

    def __repr__(self):
        return f"<InterpBuffer {self.nbytes} bytes{' released' if self._data is None else ''}>"


class InterpPipeline(Pipeline):
    def __init__(self, program, name, num_buffers, push_constant_size, spec_constants):
        self.program, self.name = program, name
        self.num_buffers, self.push_constant_size = num_buffers, push_constant_size
        self.capacities = dict(spec_constants or {})

    def release(self):
        pass


class InterpDevice(Device):
    """See base.Device for the contract of each method."""

    def __init__(self, selector=None, validation=False, pipeline_cache_dir=None):
        self.validation = bool(validation)
        self._queue = []
        self._capture = None   # the InterpBatch being captured (its steps are queued there instead)

    def _queued(self, run, buffers):
        """Queue `run` (a step reading and writing `buffers`), or keep it in the capture being recorded."""
        if self._capture is None:
            self._queue.append(run)
        else:
            self._capture.steps.append(run)
            self._capture.buffers.update((id(b), b) for b in buffers)

    @property
    def info(self):
        return INFO

    def validation_messages(self):
        return []

    def create_buffer(self, nbytes):
        return InterpBuffer(int(nbytes))

    def create_pipeline(self, spirv, *, name, num_buffers, push_constant_size, spec_constants=None, entry="main",
                        fast_math=True):   # the interpreter computes every float operation as written
        return InterpPipeline(spirv, name, num_buffers, push_constant_size, spec_constants)

    def launch(self, pipeline, buffers, push_constants, groups):
        if len(buffers) != pipeline.num_buffers:
            raise DeviceError(f"{pipeline.name}: {len(buffers)} buffers bound, the kernel takes "
                              f"{pipeline.num_buffers}")
        if any(b.released for b in buffers):
            raise DeviceError(f"{pipeline.name}: launch with a released buffer")
        memory = [b._data for b in buffers]
        self._queued(lambda: _run(pipeline, memory, push_constants), buffers)

    def launch_indirect(self, pipeline, buffers, push_constants, args, offset):
        """See base.Device.launch_indirect: no thread runs when the words at `offset` count no group; else the
        task runs over the count its header gives (the interpreter evaluates it itself, from the arrays)."""
        if offset % 4 or offset + 12 > args.nbytes or args.released:
            raise DeviceError(f"{pipeline.name}: indirect arguments at byte {offset} of {args!r}")
        if len(buffers) != pipeline.num_buffers or any(b.released for b in buffers):
            self.launch(pipeline, buffers, push_constants, (1, 1, 1))   # (raises as launch does)
        memory, groups = [b._data for b in buffers], args._data[offset: offset + 12].view(np.uint32)
        self._queued(lambda: _run(pipeline, memory, push_constants) if groups.all() else None, [*buffers, args])

    def copy_buffer(self, src, dst, nbytes):
        check_transfer(nbytes, 0, src, dst)
        s, d = src._data, dst._data
        self._queued(lambda: d.__setitem__(slice(0, nbytes), s[:nbytes]), (src, dst))

    def copy_regions(self, src, dst, regions):
        regions = check_regions(src, dst, regions).astype(np.int64)
        s, d = src._data, dst._data

        def run():
            for at, to, n in regions:
                d[to: to + n] = s[at: at + n]
        self._queued(run, (src, dst))

    def fill_buffer(self, buf, offset, nbytes, word):
        check_transfer(nbytes, offset, buf)
        words = buf._data[offset: offset + nbytes].view(np.uint32)
        self._queued(lambda: words.fill(np.uint32(word)), (buf,))

    def begin_capture(self):
        if self._capture is not None:
            raise DeviceError("a capture is being recorded already")
        self._capture = InterpBatch()

    def end_capture(self):
        batch, self._capture = self._capture, None
        if batch is None:
            raise DeviceError("no capture is being recorded")
        return batch

    def run_batch(self, batch):
        """Queue a captured batch's steps again (none inside a capture); False once a buffer it binds was
        released (its steps still hold the memory, but an ndarray released means the capture is done with)."""
        if not isinstance(batch, InterpBatch) or self._capture is not None or \
                any(b.released for b in batch.buffers.values()):
            return False
        self._queue.extend(batch.steps)
        return True

    def sync(self):
        queue, self._queue = self._queue, []
        for run in queue:
            run()

    def close(self):
        self._queue, self._capture = [], None


class InterpBatch:
    """Captured steps (launches, copies, fills) in order, and the buffers they use (by id)."""

    def __init__(self):
        self.steps, self.buffers = [], {}

    def release(self):
        self.steps, self.buffers = [], {}


def _run(pipeline, memory, push):
    """One launch: the push constants unpacked into scalars and shapes, each binding viewed as its array."""
    prog = pipeline.program
    kernel = prog.kernel
    values = struct.unpack(prog.push_format, push) if prog.push_size else ()
    scalars, shapes = [None] * len(kernel.scalars), [None] * len(kernel.arrays)
    extents = {}
    for f, v in zip(prog.push_fields, values):
        if f[0] == "scalar":
            scalars[f[1]] = bool(v) if f[2].is_bool else v
        else:
            extents.setdefault(f[1], []).append(v)
    for ai in {ai for ai, _ in prog.bindings} | set(extents):   # a 0-d array has no extents
        shapes[ai] = tuple(extents.get(ai, ()))
    buffers = {}
    for (ai, field), mem in zip(prog.bindings, memory):
        dtype = np.dtype(T.storage_np_dtype(kernel.arrays[ai].dtype))
        n = math.prod(shapes[ai])
        buffers[(ai, field)] = mem[: n * dtype.itemsize].view(dtype).reshape(shapes[ai])
    flags = memory[prog.flag_binding].view(np.uint32) if prog.flag_binding is not None else None
    prints = memory[prog.print_binding].view(np.uint32) if prog.print_binding is not None else None
    try:
        run_task(kernel, prog.task, buffers, scalars, shapes, flags, pipeline.capacities, prints)
    except InterpError as e:
        raise DeviceError(f"kernel {pipeline.name} ({prog.task.name}) on the interpreter: {e}") from None

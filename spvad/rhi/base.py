"""The RHI: the small interface the runtime uses to run compiled kernels on a device.

A backend (``rhi/vulkan``, ``rhi/metal``) implements three classes:

- ``Device``: owns the driver objects; creates buffers and pipelines, records launches, syncs.
- ``Buffer``: device memory the host can also see (persistently mapped); read and written through
  ``view(dtype)`` after ``Device.sync()``.
- ``Pipeline``: one compiled compute kernel (SPIR-V entry point) with a fixed binding interface:
  ``num_buffers`` storage buffers at set 0, bindings 0..n-1, and ``push_constant_size`` bytes of
  push constants (the kernel's scalar arguments).

Execution model: ``launch`` only records; nothing runs until ``sync``. Launches run in the order they
were recorded, each one seeing the writes of the previous ones. After ``sync`` returns, host reads see
every device write. Host writes through a view are seen by launches recorded afterwards *and* by
launches recorded earlier but not yet synced (memory is shared; the batch runs at sync), so a caller
that overwrites a buffer an unsynced launch still uses must call ``sync`` first.

Errors: ``DeviceError`` for device/driver failures, ``PipelineCreationError`` when the driver refuses a
kernel (the device stays usable). Backends are imported lazily: importing ``spvad.rhi`` loads no driver.
"""
from abc import ABC, abstractmethod

import numpy as np

from ..errors import DeviceError


class Buffer(ABC):
    """A storage buffer in host-visible memory. ``nbytes`` is the size requested at creation.

    ``addressed``: past the device's ``max_storage_buffer_range`` (or ``max_memory_allocation_size``) a backend
    may hand out a buffer that kernels reach by address (its binding holds an address table, spirv/lower_memory.py); the compiler lowers the
    bindings that hold one accordingly. Its memory may be in several blocks: ``pieces`` views them in order."""

    nbytes: int
    addressed = False
    blocks = 1   # memory blocks (an addressed buffer's may be several)

    @abstractmethod
    def view(self, dtype):
        """A zero-copy numpy array of ``nbytes // itemsize`` elements over the mapping.
        Valid until ``release()`` or the device's ``close()``; sync before reading device results."""

    def pieces(self, dtype):
        """Zero-copy numpy arrays over consecutive parts of the buffer, together ``nbytes // itemsize``
        elements: one ``view`` unless the memory is in several blocks."""
        return [self.view(dtype)]

    @property
    @abstractmethod
    def released(self):
        """True once ``release()`` was called (or the device closed)."""

    @abstractmethod
    def release(self):
        """Free the buffer (deferred until the next sync if recorded launches may still use it).
        Idempotent. Views must not be used afterwards."""


def check_transfer(nbytes, offset, *buffers):
    """The checks copy_buffer and fill_buffer share: whole words, live buffers, inside every buffer."""
    if nbytes % 4 or offset % 4 or nbytes < 0 or offset < 0:
        raise DeviceError(f"transfers take whole 32-bit words: offset {offset}, {nbytes} bytes")
    for b in buffers:
        if b.released:
            raise DeviceError("transfer with a released buffer")
        if offset + nbytes > b.nbytes:
            raise DeviceError(f"transfer of {nbytes} bytes at offset {offset} past the end of {b!r}")


def check_regions(src, dst, regions):
    """check_transfer for copy_regions: (n, 3) uint64 rows of (offset in src, offset in dst, bytes), whole
    words, inside both buffers. Returns the non-empty regions as a C-ordered uint64 array."""
    regions = np.ascontiguousarray(regions, np.uint64).reshape(-1, 3)
    if src.released or dst.released:
        raise DeviceError("transfer with a released buffer")
    if len(regions) <= 8:   # (the usual few rows: Python's integers are quicker than numpy's reductions)
        bits, src_end, dst_end, empty = 0, 0, 0, False
        for at, to, n in regions.tolist():
            bits |= at | to | n
            src_end, dst_end, empty = max(src_end, at + n), max(dst_end, to + n), empty or not n
        words, ends = not bits & 3, (src_end, dst_end)
    else:
        words = not (regions % 4).any()
        ends = (int((regions[:, 0] + regions[:, 2]).max()), int((regions[:, 1] + regions[:, 2]).max()))
        empty = not regions[:, 2].all()
    if not words:
        raise DeviceError("transfers take whole 32-bit words: a region's offset or size is not a multiple of 4")
    for end, b in zip(ends, (src, dst)):
        if end > b.nbytes:
            raise DeviceError(f"copy region past the end of {b!r}")
    return regions[regions[:, 2] > 0] if empty else regions   # (Vulkan refuses empty regions)


class Pipeline(ABC):
    """A compiled compute kernel: ``name``, ``num_buffers``, ``push_constant_size`` (bytes)."""

    name: str
    num_buffers: int
    push_constant_size: int

    @abstractmethod
    def release(self):
        """Destroy the pipeline (deferred until the next sync if launches may use it). Idempotent."""


class Device(ABC):
    """One device of one backend. Use ``close()`` (or ``with``) to free everything it created."""

    interrupted = False   # a Ctrl-C stopped a sync while launches were still running
    forked = False        # set aside in a forked child (set_aside)

    def set_aside(self):
        """In a forked child: this is the parent's device. Mark it closed without one driver call, so nothing
        in the child ever uses, frees or closes it (its driver objects belong to the parent)."""
        self._closed = self.forked = True

    def busy(self):
        """Whether submitted launches are still running (does not wait). Backends that can tell override it."""
        return False

    @property
    @abstractmethod
    def info(self):
        """dict: backend, name, driver, device_type, api_version,
        limits {max_workgroup_count, max_workgroup_invocations, max_workgroup_size,
        max_push_constants_size, max_storage_buffer_range, max_storage_buffers_per_stage (Vulkan), subgroup_size},
        features {float64, int64, atomic_float32_add, buffer_device_address (Vulkan: addressed buffers)}."""

    @abstractmethod
    def validation_messages(self):
        """Return and clear the WARNING/ERROR messages the validation layer or driver reported
        (loader chatter excluded) since the last call. Empty when everything was valid."""

    @abstractmethod
    def create_buffer(self, nbytes):
        """A zero-initialised, persistently mapped storage buffer of at least ``nbytes`` bytes; past
        ``limits["max_storage_buffer_range"]`` an addressed one (see Buffer), or DeviceError."""

    @abstractmethod
    def create_pipeline(self, spirv, *, name, num_buffers, push_constant_size,
                        spec_constants=None, entry="main", fast_math=True):
        """Build a compute pipeline from SPIR-V bytes. ``spec_constants`` maps SpecId to an int,
        float or bool (4-byte values). ``fast_math`` False: the backend's compiler must not use fast
        math (Metal's fastMathEnabled); on Vulkan the SPIR-V itself says it (NoContraction).
        Raises PipelineCreationError naming ``name``, the backend, the driver result and the driver's
        messages; the device stays usable."""

    @abstractmethod
    def launch(self, pipeline, buffers, push_constants, groups):
        """Record one dispatch of ``groups`` = (x, y, z) workgroups with ``buffers`` bound to
        bindings 0..n-1 and ``push_constants`` bytes. Asynchronous: runs at the next ``sync``.
        Raises DeviceError if a group count exceeds the device limit (fold into 2-D first)."""

    def prepare_launch(self, pipeline, buffers, groups):
        """A callable that records ``launch(pipeline, buffers, push_constants, groups)`` when called with
        ``push_constants``: a replayed dispatch. Backends may check and look up once what every such launch
        needs (Vulkan: the descriptor set). Raises what ``launch`` raises for these groups."""
        return lambda push_constants: self.launch(pipeline, buffers, push_constants, groups)

    def prepare_launch_indirect(self, pipeline, buffers, args, offset):
        """``prepare_launch`` for ``launch_indirect``."""
        return lambda push_constants: self.launch_indirect(pipeline, buffers, push_constants, args, offset)

    def launch_indirect(self, pipeline, buffers, push_constants, args, offset):
        """Record one dispatch like ``launch`` whose group counts (x, y, z: three u32) are read from buffer
        ``args`` at byte ``offset`` when it runs, after the writes of the launches recorded before it (a
        count only the device knows: ir/thread_count.py). A count of zero runs nothing. Asynchronous."""
        raise DeviceError(f"kernel '{pipeline.name}': the {self.info['backend']} backend has no indirect "
                          "dispatch, which a parallel loop whose bounds are read from arrays needs")

    @abstractmethod
    def copy_buffer(self, src, dst, nbytes):
        """Record a copy of the first ``nbytes`` bytes (a multiple of 4) of ``src`` into ``dst``, ordered
        with the launches around it like a launch. Asynchronous: runs at the next ``sync``."""

    @abstractmethod
    def copy_regions(self, src, dst, regions):
        """Record copies of byte ranges of ``src`` into ``dst`` (distinct buffers), ordered like one launch:
        ``regions`` is an (n, 3) array of (offset in src, offset in dst, bytes), all multiples of 4, the
        ranges in ``dst`` not overlapping (see check_regions). Asynchronous: runs at the next ``sync``."""

    @abstractmethod
    def fill_buffer(self, buf, offset, nbytes, word):
        """Record writing the 32-bit ``word`` over ``nbytes`` bytes of ``buf`` from ``offset`` (both
        multiples of 4), ordered like a launch. Asynchronous: runs at the next ``sync``."""

    def fill_buffers(self, fills):
        """``fill_buffer`` for each (buf, offset, nbytes, word) of ``fills``, ordered together like one launch
        (the fills must not overlap): a Tape's gradient clears and seed. Backends may record them at once."""
        for buf, offset, nbytes, word in fills:
            self.fill_buffer(buf, offset, nbytes, word)

    def record_batch(self, launches, fills=()):
        """A batch of `fills` (as `fill_buffers` takes them) then `launches` ((pipeline, buffers, push
        constants, groups) each, as `launch` takes them, or with groups an indirect (buffer, byte offset))
        recorded once, for `run_batch` to run again as they are; None where a backend has no such thing
        (then the caller launches one by one)."""
        return None

    def run_batch(self, batch):
        """Record running a batch of `record_batch`, ordered like its launches one by one; False (nothing
        recorded) when something it binds was freed or re-made since."""
        return False

    def begin_capture(self):
        """Record the launches, copies and fills that follow into a capture instead of running them, until
        `end_capture` (sp.capture(): launch/capture.py). What was recorded before stays before it. A backend
        that cannot raises DeviceError."""
        raise DeviceError(f"the {self.info['backend']} backend cannot capture launches (sp.capture()); launch "
                          "them one by one")

    def end_capture(self):
        """Stop capturing: the batch of everything recorded since `begin_capture`, for `run_batch` (which
        returns False once a buffer or pipeline it binds was released)."""
        raise DeviceError(f"the {self.info['backend']} backend has no capture to end")

    def submit(self):
        """Start running what is recorded, without waiting (a hint: a Tape's forward runs while its backward
        is recorded). Backends that record batches override it."""

    @abstractmethod
    def sync(self):
        """Run everything recorded and wait for it; afterwards host reads see device writes."""

    @abstractmethod
    def close(self):
        """Wait for the device and destroy everything it created. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

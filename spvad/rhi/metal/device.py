"""MetalDevice: the RHI on Apple GPUs through pyobjc (`pyobjc-framework-Metal`, imported lazily). Buffers are
shared MTLBuffers viewed by numpy in place; launches go into one serial compute encoder (each dispatch sees the
writes before it); `sync` commits and waits. Pipelines (program.py) come from SPIR-V translated to MSL."""

import sys
from contextlib import nullcontext

import numpy as np

from ...errors import DeviceError
from ..base import Buffer, Device, check_regions, check_transfer
from .program import ProgramMixin, error_text
from .translate import METAL_FEATURES, MSL_VERSION

MAX_GROUPS = (65535, 65535, 65535)  # the grid the runtime folds launches into (Metal itself allows more)
PUSH_LIMIT = 4096                   # setBytes:length:atIndex: takes at most 4 KiB
APPLE_SIMD_WIDTH = 32               # threadExecutionWidth of Apple GPUs (a pipeline reports the true one)


def import_metal():
    """The pyobjc `Metal` module, or DeviceError saying how to get it."""
    try:
        import Metal
    except ImportError as exc:
        where = "" if sys.platform == "darwin" else " (Metal exists only on macOS)"
        raise DeviceError(f"metal backend unavailable{where}: cannot import pyobjc's Metal ({exc}); "
                          "install it with `pip install pyobjc-framework-Metal` (or `spvad[metal]`)") from exc
    return Metal


def select_device(names, selector, default_index=0):
    """Index into `names` chosen by `selector`: None = default_index, an int = that index, a string =
    the first name containing it (case-insensitive). DeviceError listing the devices otherwise."""
    if selector is None:
        index = default_index
    elif isinstance(selector, int) and not isinstance(selector, bool):
        index = selector if 0 <= selector < len(names) else None
    else:
        index = next((i for i, n in enumerate(names) if str(selector).lower() in n.lower()), None)
    if index is None or not 0 <= index < len(names):
        listing = "; ".join(f"[{i}] {n}" for i, n in enumerate(names)) or "none"
        raise DeviceError(f"no Metal device matches {selector!r}; devices: {listing}")
    return index


def make_info(name, unified_memory, max_threads, max_buffer_length, max_threadgroup_memory):
    """The Device.info dict of a Metal device (`max_threads` = maxThreadsPerThreadgroup as (w, h, d))."""
    return {
        "backend": "metal", "name": name, "driver": f"Metal, MSL {MSL_VERSION // 10000}.{MSL_VERSION // 100 % 100}"
                                                    " via SPIRV-Cross",
        "device_type": "integrated_gpu" if unified_memory else "discrete_gpu",
        "api_version": f"MSL {MSL_VERSION // 10000}.{MSL_VERSION // 100 % 100}",
        "limits": {
            "max_workgroup_count": MAX_GROUPS,
            "max_workgroup_invocations": max(max_threads),
            "max_workgroup_size": tuple(max_threads),
            "max_push_constants_size": PUSH_LIMIT,
            "max_storage_buffer_range": max_buffer_length,
            "max_shared_memory_size": max_threadgroup_memory,
            "max_memory_allocation_size": max_buffer_length,
            "subgroup_size": APPLE_SIMD_WIDTH,
        },
        "features": dict(METAL_FEATURES),
    }


class MetalBuffer(Buffer):
    """A shared-storage MTLBuffer; `_memory` is a writable memoryview over its contents."""

    def __init__(self, device, mtl, nbytes, size):
        self._device, self._mtl, self.nbytes, self._size = device, mtl, nbytes, size
        self._memory = mtl.contents().as_buffer(size)

    def view(self, dtype):
        if self._mtl is None:
            raise DeviceError("view of a released buffer")
        dtype = np.dtype(dtype)
        return np.frombuffer(self._memory, dtype=dtype, count=self.nbytes // dtype.itemsize)

    @property
    def released(self):
        return self._mtl is None

    def release(self):
        # Command buffers retain the MTLBuffers they use: recorded launches stay valid.
        if self._mtl is not None:
            self._device._buffers.discard(self)
            self._mtl = self._memory = None

    def __repr__(self):
        return f"<MetalBuffer {self.nbytes} bytes{' released' if self._mtl is None else ''}>"



class MetalDevice(ProgramMixin, Device):
    """A Metal compute device with the methods of VulkanDevice (see base.Device for the contract)."""

    flush_every = 1024   # dispatches per command buffer before an early commit (no wait)

    def __init__(self, selector=None, validation=False, pipeline_cache_dir=None):   # Metal keeps no pipeline cache
        self._closed = False
        self.validation = bool(validation)   # Metal's API validation is enabled by MTL_DEBUG_LAYER=1
        self._buffers, self._pipelines, self._translations = set(), set(), {}
        self._cmd = self._enc = None
        self._committed, self._recorded = [], 0
        self._mtl = Metal = import_metal()
        devices = list(Metal.MTLCopyAllDevices() or [])
        default = Metal.MTLCreateSystemDefaultDevice()
        if not devices and default is not None:
            devices = [default]
        if not devices:
            raise DeviceError("no Metal device found")
        default_index = next((i for i, d in enumerate(devices)
                              if default is not None and d.registryID() == default.registryID()), 0)
        self._device = devices[select_device([str(d.name()) for d in devices], selector, default_index)]
        self._queue = self._device.newCommandQueue()
        size = self._device.maxThreadsPerThreadgroup()
        self._info = make_info(str(self._device.name()), bool(self._device.hasUnifiedMemory()),
                               (int(size.width), int(size.height), int(size.depth)),
                               int(self._device.maxBufferLength()),
                               int(self._device.maxThreadgroupMemoryLength()))

    @property
    def info(self):
        return self._info

    def validation_messages(self):
        return []   # Metal reports through exceptions and command-buffer errors, raised where they occur

    def _check_open(self):
        if self._closed:
            raise DeviceError("the Metal device is closed")

    def _pool(self):
        try:
            import objc
        except ImportError:
            return nullcontext()
        return objc.autorelease_pool()

    def create_buffer(self, nbytes):
        self._check_open()
        nbytes = int(nbytes)
        size = max(16, (nbytes + 15) & ~15)   # never zero-sized; whole words for the shaders
        if size > self._info["limits"]["max_memory_allocation_size"]:
            raise DeviceError(f"buffer of {nbytes} bytes exceeds maxBufferLength "
                              f"{self._info['limits']['max_memory_allocation_size']}")
        mtl = self._device.newBufferWithLength_options_(size, self._mtl.MTLResourceStorageModeShared)
        if mtl is None:
            raise DeviceError(f"cannot allocate a Metal buffer of {size} bytes")
        buf = MetalBuffer(self, mtl, nbytes, size)
        np.frombuffer(buf._memory, np.uint8).fill(0)
        self._buffers.add(buf)
        return buf

    def _encoder(self):
        """The open compute encoder (a new command buffer when none is open or the current one is full)."""
        if self._enc is not None and self._recorded >= self.flush_every:
            self._flush()
        if self._enc is None:
            self._cmd = self._queue.commandBuffer()
            self._enc = self._cmd.computeCommandEncoder()
            self._recorded = 0
        return self._enc

    def _flush(self):
        """End the encoder and commit its command buffer without waiting (a queue runs them in order)."""
        self._enc.endEncoding()
        self._cmd.commit()
        self._committed.append(self._cmd)
        self._cmd = self._enc = None

    def _blit(self, record):
        """Record one blit command in a command buffer of its own (the queue keeps launch order)."""
        self._check_open()
        with self._pool():
            if self._enc is not None:
                self._flush()
            cmd = self._queue.commandBuffer()
            blit = cmd.blitCommandEncoder()
            record(blit)
            blit.endEncoding()
            cmd.commit()
            self._committed.append(cmd)

    def copy_buffer(self, src, dst, nbytes):
        """See base.Device.copy_buffer."""
        check_transfer(nbytes, 0, src, dst)
        if nbytes:
            self._blit(lambda b: b.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(
                src._mtl, 0, dst._mtl, 0, nbytes))

    def copy_regions(self, src, dst, regions):
        """See base.Device.copy_regions: one blit per region, in one command buffer."""
        regions = check_regions(src, dst, regions).tolist()
        if regions:
            self._blit(lambda b: [b.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(
                src._mtl, at, dst._mtl, to, n) for at, to, n in regions])

    def fill_buffer(self, buf, offset, nbytes, word):
        """See base.Device.fill_buffer. A blit fills bytes; other words are copied from a staging buffer."""
        check_transfer(nbytes, offset, buf)
        word &= 0xFFFFFFFF
        if not nbytes:
            return
        if word in (0, 0xFFFFFFFF):
            self._blit(lambda b: b.fillBuffer_range_value_(buf._mtl, (offset, nbytes), word & 0xFF))
            return
        staging = self.create_buffer(nbytes)
        staging.view(np.uint32)[:] = word
        self._blit(lambda b: b.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(
            staging._mtl, 0, buf._mtl, offset, nbytes))
        staging.release()   # the command buffer retains the MTLBuffer

    def submit(self):
        """See base.Device.submit: commit the open command buffer."""
        with self._pool():
            if self._enc is not None:
                self._flush()

    def sync(self):
        self._check_open()
        with self._pool():
            if self._enc is not None:
                self._flush()
            committed, self._committed = self._committed, []
            for cmd in committed:
                cmd.waitUntilCompleted()
            failed = [cmd for cmd in committed if cmd.status() == self._mtl.MTLCommandBufferStatusError]
            if failed:
                raise DeviceError(f"a Metal command buffer failed: {error_text(failed[0].error())}")

    def close(self):
        if self._closed:
            return
        try:
            if self._enc is not None:
                self._flush()
            for cmd in self._committed:
                cmd.waitUntilCompleted()
        except Exception:  # noqa: BLE001 - a failed device must still be torn down
            pass
        self._closed = True
        for buf in list(self._buffers):
            buf.release()
        for pipe in list(self._pipelines):
            pipe.release()
        self._committed, self._translations = [], {}
        self._cmd = self._enc = self._queue = self._device = None

    def __repr__(self):
        return f"<MetalDevice {self._info.get('name', '?')!r}{' closed' if self._closed else ''}>" \
            if hasattr(self, "_info") else "<MetalDevice>"

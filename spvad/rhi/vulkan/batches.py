"""Recorded batches: launches recorded once into a secondary command buffer and run again by a single
vkCmdExecuteCommands, as a hand-written Vulkan program records a fixed sequence once (a Tape's backward pass
that repeats the previous one's: spvad/tape/planned_backward.py).

A batch holds handles, so it runs only while every descriptor set and pipeline it recorded is still the one
the device holds: a buffer freed drops its sets, a pipeline released clears its handle, and either makes the
batch stale (`run_batch` then returns False and records nothing).

A capture (sp.capture(): spvad/launch/capture.py) makes a batch of whatever is launched, copied and filled
between `begin_capture` and `end_capture`: the device records into a secondary command buffer instead of its
primary one. For as long as it lasts, a few recording methods of the device are the capture's (instance
attributes over the class's: nothing costs more outside a capture): they note the pipelines, descriptor sets
and buffers recorded, never submit, and refuse to run a batch inside it.
"""
import weakref

from ...errors import DeviceError
from .program import (BIND_COMPUTE, PIPE_COMPUTE, PIPE_INDIRECT, PIPE_TRANSFER, STAGE_COMPUTE, ProgramMixin,
                      fill_parts)
from .vkapi import NULL, check, ffi, lib


class Batch:
    """A secondary command buffer and what it binds: the descriptor sets (key -> the cache entry recorded),
    the pipelines, the buffers it names directly (filled ones, indirect arguments), the number of commands
    and the kernels' names."""
    __slots__ = ("_cmds", "sets", "pipelines", "buffers", "count", "names", "broken", "_free", "__weakref__")

    def __init__(self, cmds, sets, pipelines, buffers, count, names, broken=False):
        self._cmds, self.sets, self.pipelines, self.buffers = cmds, sets, pipelines, buffers
        self.count, self.names = count, names
        self.broken = broken   # something it binds went away while it was captured: it never runs

    def release(self):
        """Free the command buffer once no submitted work uses it (also when the batch is collected)."""
        self._free()


class BatchMixin:
    """`record_batch` / `run_batch` for VulkanDevice (uses PipelineMixin's sets, ProgramMixin's barriers and
    recording state)."""

    def _secondary(self):
        """A secondary command buffer, allocated and begun for simultaneous use (a batch may run twice
        before either run finished)."""
        self._check_open()
        cmds = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(self._device, ffi.new("VkCommandBufferAllocateInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self._cmd_pool,
            "level": lib.VK_COMMAND_BUFFER_LEVEL_SECONDARY, "commandBufferCount": 1}), cmds),
            "vkAllocateCommandBuffers")
        inheritance = ffi.new("VkCommandBufferInheritanceInfo *",
                              {"sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO})
        begin = ffi.new("VkCommandBufferBeginInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": lib.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, "pInheritanceInfo": inheritance})
        r = lib.vkBeginCommandBuffer(cmds[0], begin)
        if r < 0:
            lib.vkFreeCommandBuffers(self._device, self._cmd_pool, 1, cmds)
            check(r, "vkBeginCommandBuffer")
        return cmds

    def _batch(self, cmds, sets, pipelines, buffers, count, names, broken=False):
        """A Batch of the ended command buffer `cmds`, freed (at a sync) once it is collected."""
        batch = Batch(cmds, sets, pipelines, buffers, count, names, broken)
        batch._free = weakref.finalize(batch, self._free_batch_later, cmds)
        return batch

    def record_batch(self, launches, fills=()):
        """A Batch of `fills` (as fill_buffers takes them) then `launches`, each (pipeline, buffers, push
        constants, groups) with groups an (x, y, z) or an indirect (buffer, byte offset), recorded with the
        barriers fill_buffers, `launch` and `launch_indirect` put around them."""
        parts = fill_parts(fills)
        cmds = self._secondary()
        cmd, device, pool = cmds[0], self._device, self._cmd_pool
        sets, pipelines, named, names, bound = {}, {}, {}, set(), (None, None)
        try:
            if parts:
                self._between_transfer_barriers(cmd, lambda c: [lib.vkCmdFillBuffer(c, *part) for part in parts])
                named.update((id(buf), buf) for buf, *_ in fills)
            for pipeline, buffers, push, groups in launches:
                if pipeline._handle is None:
                    raise DeviceError(f"kernel '{pipeline.name}': pipeline released or its device closed")
                entry = self._set_entry(pipeline, buffers)
                if buffers:
                    sets[tuple([b._uid for b in buffers])] = entry
                pipelines[id(pipeline)] = pipeline
                if bound[0] is not pipeline:
                    lib.vkCmdBindPipeline(cmd, BIND_COMPUTE, pipeline._handle)
                if buffers and (bound[0] is not pipeline or bound[1] is not entry):
                    lib.vkCmdBindDescriptorSets(cmd, BIND_COMPUTE, pipeline._layout, 0, 1, entry[0], 0, NULL)
                bound = (pipeline, entry)
                if pipeline.push_constant_size:
                    data = push if len(push) == pipeline.push_constant_size else pipeline._padded(push)
                    lib.vkCmdPushConstants(cmd, pipeline._layout, STAGE_COMPUTE, 0, len(data),
                                           ffi.from_buffer(data))
                if len(groups) == 2:   # indirect: (arguments buffer, byte offset)
                    args, offset = groups
                    named[id(args)] = args
                    lib.vkCmdPipelineBarrier(cmd, PIPE_COMPUTE | PIPE_TRANSFER, PIPE_INDIRECT, 0, 1,
                                             self._mb_c2i_ptr, 0, NULL, 0, NULL)
                    lib.vkCmdDispatchIndirect(cmd, args._handle, offset)
                else:
                    lib.vkCmdDispatch(cmd, *groups)
                lib.vkCmdPipelineBarrier(cmd, PIPE_COMPUTE, PIPE_COMPUTE, 0, 1, self._mb_c2c_ptr, 0, NULL, 0, NULL)
                names.add(pipeline.name)
            check(lib.vkEndCommandBuffer(cmd), "vkEndCommandBuffer")
        except BaseException:
            lib.vkFreeCommandBuffers(device, pool, 1, cmds)
            raise
        return self._batch(cmds, list(sets.items()), list(pipelines.values()), list(named.values()),
                           len(launches) + bool(parts), names)

    def _free_batch_later(self, cmds):
        """At the next sync, never at once: the collector may run this in any thread, and the command pool
        must not be used by two threads at a time."""
        if self._device is not None and not self._closed:
            device, pool = self._device, self._cmd_pool
            self._deferred.append(lambda: lib.vkFreeCommandBuffers(device, pool, 1, cmds))

    def batch_stale(self, batch):
        """Whether `batch` binds a descriptor set, pipeline or buffer the device no longer holds as recorded."""
        cache = self._sets
        return self._device is None or batch.broken or any(cache.get(key) is not entry or entry[0] is None
                                           for key, entry in batch.sets) or \
            any(p._handle is None for p in batch.pipelines) or any(b._handle is None for b in batch.buffers)

    def run_batch(self, batch):
        """Record running `batch` in launch order, like its launches one by one; False (nothing recorded) when
        it is stale."""
        if self.batch_stale(batch):
            return False
        cmd = self._cmd if self._cmd is not None else self._begin()
        lib.vkCmdExecuteCommands(cmd, 1, batch._cmds)
        self._bound = None   # (the primary's bindings are undefined after a secondary)
        self._frame.kernels.update(batch.names)
        self._recorded += batch.count
        if self._recorded >= self.flush_every:
            self._flush()
        return True

    # -- captures (sp.capture()) ----------------------------------------------------------------------
    _capture = None   # the _Capture being recorded

    def begin_capture(self):
        """See base.Device.begin_capture: what was recorded so far is submitted, then everything recorded goes
        into a secondary command buffer (the capture stands in for the current frame)."""
        if self._capture is not None:
            raise DeviceError("a capture is being recorded already")
        if self._cmd is not None:
            self._flush()   # (before the capture's methods: this one submits)
        cmds = self._secondary()
        capture = self._capture = _Capture(cmds)
        self._cmd, self._frame, self._recorded, self._bound = cmds[0], capture, 0, None
        for name in _CAPTURING:
            setattr(self, name, getattr(self, "_capturing_" + name.lstrip("_")))

    def end_capture(self):
        """See base.Device.end_capture: the secondary command buffer ended, as a Batch of what it binds."""
        capture, count = self._capture, self._recorded
        if capture is None:
            raise DeviceError("no capture is being recorded")
        for name in _CAPTURING:
            delattr(self, name)
        self._capture, self._cmd, self._frame, self._recorded, self._bound = None, None, None, 0, None
        if self._inflight:   # what was released meanwhile waits for the work submitted before
            self._inflight[-1].retired.extend(capture.retired)
        else:
            for destroy in capture.retired:
                destroy()
        cmds = capture.cmds
        r = lib.vkEndCommandBuffer(cmds[0])
        if r < 0:
            lib.vkFreeCommandBuffers(self._device, self._cmd_pool, 1, cmds)
            check(r, "vkEndCommandBuffer")
        # the cached entry of each descriptor set it bound; one no longer cached was freed with a buffer
        entries = {id(entry[0]): (key, entry) for key, entry in self._sets.items() if entry[0] is not None}
        found = [entries.get(k) for k in capture.sets]
        return self._batch(cmds, [f for f in found if f is not None], list(capture.pipelines.values()),
                           list(capture.buffers.values()), count, capture.kernels, broken=None in found)

    def _capturing_flush(self):
        """A capture submits nothing: end_capture ends its command buffer."""

    def _capturing_bind(self, pipeline, sets, push_constants):
        capture = self._capture
        capture.pipelines[id(pipeline)] = pipeline
        if sets is not None:
            capture.sets[id(sets)] = sets
        return ProgramMixin._bind(self, pipeline, sets, push_constants)

    def _capturing_run_batch(self, batch):
        return False   # (a secondary command buffer cannot execute another: the caller launches one by one)

    def _capturing_launch_indirect(self, pipeline, buffers, push_constants, args, offset):
        self._capture.buffers[id(args)] = args
        ProgramMixin.launch_indirect(self, pipeline, buffers, push_constants, args, offset)

    def _capturing_copy_buffer(self, src, dst, nbytes):
        self._capture.buffers.update({id(src): src, id(dst): dst})
        ProgramMixin.copy_buffer(self, src, dst, nbytes)

    def _capturing_copy_regions(self, src, dst, regions):
        self._capture.buffers.update({id(src): src, id(dst): dst})
        ProgramMixin.copy_regions(self, src, dst, regions)

    def _capturing_fill_buffers(self, fills):
        self._capture.buffers.update((id(buf), buf) for buf, *_ in fills)
        ProgramMixin.fill_buffers(self, fills)


# the device methods a capture stands in for while it records (BatchMixin._capturing_<name>)
_CAPTURING = ("_flush", "_bind", "run_batch", "launch_indirect", "copy_buffer", "copy_regions", "fill_buffers")


class _Capture:
    """A capture being recorded: its command buffer and what it binds (descriptor sets by id, pipelines,
    buffers named directly); it stands in for the device's frame (`kernels`, `retired`)."""

    def __init__(self, cmds):
        self.cmds, self.sets, self.pipelines, self.buffers = cmds, {}, {}, {}
        self.kernels, self.retired = set(), []

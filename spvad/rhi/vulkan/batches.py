"""Recorded batches: launches recorded once into a secondary command buffer and run again by a single
vkCmdExecuteCommands, as a hand-written Vulkan program records a fixed sequence once (a Tape's backward pass
that repeats the previous one's: spvad/tape/planned_backward.py).

A batch holds handles, so it runs only while every descriptor set and pipeline it recorded is still the one
the device holds: a buffer freed drops its sets, a pipeline released clears its handle, and either makes the
batch stale (`run_batch` then returns False and records nothing).
"""
import weakref

from ...errors import DeviceError
from .program import BIND_COMPUTE, PIPE_COMPUTE, PIPE_INDIRECT, PIPE_TRANSFER, STAGE_COMPUTE, fill_parts
from .vkapi import NULL, check, ffi, lib


class Batch:
    """A secondary command buffer and what it binds: the descriptor sets (key -> the cache entry recorded),
    the pipelines, the buffers it names directly (filled ones, indirect arguments), the number of commands
    and the kernels' names."""
    __slots__ = ("_cmds", "sets", "pipelines", "buffers", "count", "names", "_free", "__weakref__")

    def __init__(self, cmds, sets, pipelines, buffers, count, names):
        self._cmds, self.sets, self.pipelines, self.buffers = cmds, sets, pipelines, buffers
        self.count, self.names = count, names

    def release(self):
        """Free the command buffer once no submitted work uses it (also when the batch is collected)."""
        self._free()


class BatchMixin:
    """`record_batch` / `run_batch` for VulkanDevice (uses PipelineMixin's sets, ProgramMixin's barriers and
    recording state)."""

    def record_batch(self, launches, fills=()):
        """A Batch of `fills` (as fill_buffers takes them) then `launches`, each (pipeline, buffers, push
        constants, groups) with groups an (x, y, z) or an indirect (buffer, byte offset), recorded with the
        barriers fill_buffers, `launch` and `launch_indirect` put around them."""
        self._check_open()
        cmds = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(self._device, ffi.new("VkCommandBufferAllocateInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": self._cmd_pool,
            "level": lib.VK_COMMAND_BUFFER_LEVEL_SECONDARY, "commandBufferCount": 1}), cmds),
            "vkAllocateCommandBuffers")
        cmd, device, pool = cmds[0], self._device, self._cmd_pool
        inheritance = ffi.new("VkCommandBufferInheritanceInfo *",
                              {"sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO})
        begin = ffi.new("VkCommandBufferBeginInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            "flags": lib.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, "pInheritanceInfo": inheritance})
        sets, pipelines, named, names, bound = {}, {}, {}, set(), (None, None)
        parts = fill_parts(fills)
        try:
            check(lib.vkBeginCommandBuffer(cmd, begin), "vkBeginCommandBuffer")
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
        batch = Batch(cmds, list(sets.items()), list(pipelines.values()), list(named.values()),
                      len(launches) + bool(parts), names)
        batch._free = weakref.finalize(batch, self._free_batch_later, cmds)
        return batch

    def _free_batch_later(self, cmds):
        """At the next sync, never at once: the collector may run this in any thread, and the command pool
        must not be used by two threads at a time."""
        if self._device is not None and not self._closed:
            device, pool = self._device, self._cmd_pool
            self._deferred.append(lambda: lib.vkFreeCommandBuffers(device, pool, 1, cmds))

    def batch_stale(self, batch):
        """Whether `batch` binds a descriptor set, pipeline or buffer the device no longer holds as recorded."""
        cache = self._sets
        return self._device is None or any(cache.get(key) is not entry or entry[0] is None
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

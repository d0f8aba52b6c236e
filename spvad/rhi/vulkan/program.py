"""Vulkan launch recording: the command buffers launches and transfers are recorded into, and their submission.

`ProgramMixin` is mixed into `VulkanDevice` (device.py owns the instance, buffers, fences and sync;
pipelines.py (`PipelineMixin`) the pipelines, their layouts and the descriptor sets; this file owns the
command buffers a launch records into, the barriers between launches and transfers, and their submission).
Why the hot path looks the way it does: building one struct through the `vulkan` package costs 10-40 us, so
`launch` builds none. It calls the raw cffi functions in `lib` with handles and pre-built structs (the
barriers are built once, in `_init_programs`), and reuses descriptor sets cached per tuple of buffers
(pipelines.py): a repeated launch is a dict lookup plus five cffi calls.
"""
from ...errors import DeviceError
from ..base import check_regions, check_transfer
from .pipelines import STAGE_COMPUTE
from .vkapi import NULL, check, ffi, lib, vk

BIND_COMPUTE = lib.VK_PIPELINE_BIND_POINT_COMPUTE
PIPE_COMPUTE = lib.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
PIPE_TRANSFER = lib.VK_PIPELINE_STAGE_TRANSFER_BIT
PIPE_INDIRECT = lib.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT
ANY_WRITE = lib.VK_ACCESS_SHADER_WRITE_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT
TRANSFER_ACCESS = lib.VK_ACCESS_TRANSFER_READ_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT
ANY_ACCESS = TRANSFER_ACCESS | lib.VK_ACCESS_SHADER_READ_BIT | lib.VK_ACCESS_SHADER_WRITE_BIT
MAX_IN_FLIGHT = 3              # early-submitted batches before recording waits for the oldest
IDLE_CHECK_EVERY = 16          # launches between looks at whether the device finished what it was given


class _Frame:
    """One command buffer with its fence and pre-built submit info (reused batch after batch)."""

    def __init__(self, dev, pool):   # (raw structs: a process's first launch makes one)
        self._cmds = ffi.new("VkCommandBuffer[1]")   # kept: the submit info points at it
        check(lib.vkAllocateCommandBuffers(dev, ffi.new("VkCommandBufferAllocateInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": pool,
            "level": lib.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1}), self._cmds),
            "vkAllocateCommandBuffers")
        self.cmd = self._cmds[0]
        fence = ffi.new("VkFence *")
        check(lib.vkCreateFence(dev, ffi.new("VkFenceCreateInfo *", {"sType": lib.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}),
                                NULL, fence), "vkCreateFence")
        self.fence = fence[0]
        self.submit_ptr = ffi.new("VkSubmitInfo *", {"sType": lib.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                                     "commandBufferCount": 1, "pCommandBuffers": self._cmds})
        self.kernels = set()   # names of the kernels launched in this batch (for a timeout's message)
        self.retired = []      # destroys of objects released while this batch (or one before it) could use
        #                        them: run once it finished (device._wait), so memory stays flat without syncs


class ProgramMixin:
    """Command-buffer recording and submission, `launch` and transfers for VulkanDevice.

    Expects from the device: `_device`, `_queue`, `_cmd_pool`, `_collector`, `_limits_groups`,
    `_compiles_at_dispatch`, `flush_every`, `_check_open()`, `_wait(frames)`, `_idle()`, the command state
    (`_cmd`, `_frame`, `_recorded`, `_frames`, `_free_frames`, `_inflight`), PipelineMixin's `_set_entry` and
    descriptor-set state, and the state set up by `_init_programs()`."""

    def _init_programs(self):
        self._init_pipelines()     # PipelineMixin's layouts, pools and descriptor-set cache
        # Reused by every launch: the COMPUTE->COMPUTE barrier that orders consecutive launches.
        self._mb_c2c = vk.VkMemoryBarrier(
            srcAccessMask=lib.VK_ACCESS_SHADER_WRITE_BIT,
            dstAccessMask=lib.VK_ACCESS_SHADER_READ_BIT | lib.VK_ACCESS_SHADER_WRITE_BIT)
        self._mb_c2c_ptr = ffi.addressof(self._mb_c2c)
        # Before an indirect dispatch: the launches' and transfers' writes of its arguments, to the indirect read.
        self._mb_c2i = vk.VkMemoryBarrier(srcAccessMask=ANY_WRITE,
                                          dstAccessMask=lib.VK_ACCESS_INDIRECT_COMMAND_READ_BIT)
        self._mb_c2i_ptr = ffi.addressof(self._mb_c2i)
        self._bound = None         # (pipeline, descriptor set) bound in the current command buffer
        self._mb_c2h = vk.VkMemoryBarrier(srcAccessMask=ANY_WRITE, dstAccessMask=lib.VK_ACCESS_HOST_READ_BIT)
        # Around a transfer (copy_buffer, fill_buffer): launches and transfers before it, then after it.
        self._mb_to_transfer = vk.VkMemoryBarrier(srcAccessMask=ANY_WRITE, dstAccessMask=TRANSFER_ACCESS)
        self._mb_to_transfer_ptr = ffi.addressof(self._mb_to_transfer)
        self._mb_from_transfer = vk.VkMemoryBarrier(srcAccessMask=lib.VK_ACCESS_TRANSFER_WRITE_BIT,
                                                    dstAccessMask=ANY_ACCESS)
        self._mb_from_transfer_ptr = ffi.addressof(self._mb_from_transfer)
        self._copy_region = ffi.new("VkBufferCopy *")
        self._mb_c2h_ptr = ffi.addressof(self._mb_c2h)
        self._begin_info = vk.VkCommandBufferBeginInfo(
            flags=lib.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        self._begin_ptr = ffi.addressof(self._begin_info)

    def _destroy_programs(self):
        """Destroy what the device's launches hold (PipelineMixin's pools, layouts and set layouts); called
        by close()."""
        self._destroy_pipelines()

    # -- command buffers ------------------------------------------------------------------------------
    def _begin(self):
        """Start recording into a free command buffer (waiting for the oldest batch if none)."""
        self._check_open()
        if not self._free_frames and len(self._inflight) >= MAX_IN_FLIGHT:
            self._wait(self._inflight[:1])
        if self._free_frames:
            frame = self._free_frames.pop()
        else:
            frame = _Frame(self._device, self._cmd_pool)
            self._frames.append(frame)
        check(lib.vkBeginCommandBuffer(frame.cmd, self._begin_ptr), "vkBeginCommandBuffer")
        self._frame, self._cmd, self._recorded, self._bound = frame, frame.cmd, 0, None
        frame.kernels.clear()
        return frame.cmd

    def _flush(self):
        """End the current command buffer with a COMPUTE->HOST barrier and submit it (no wait)."""
        frame, cmd, self._recorded = self._frame, self._cmd, 0
        # In flight from here on: an object released meanwhile (an ndarray's __del__ run by the garbage
        # collector inside this very call) is then destroyed once this batch finished, never while the batch
        # that uses it is being submitted (_retire destroys at once when nothing is recorded or in flight).
        self._inflight.append(frame)
        self._frame = self._cmd = self._bound = None
        lib.vkCmdPipelineBarrier(cmd, PIPE_COMPUTE | PIPE_TRANSFER, lib.VK_PIPELINE_STAGE_HOST_BIT, 0,
                                 1, self._mb_c2h_ptr, 0, NULL, 0, NULL)
        mark = self._collector.mark()
        fn_name, r = "vkEndCommandBuffer", lib.vkEndCommandBuffer(cmd)
        if r >= 0:
            fn_name, r = "vkQueueSubmit", lib.vkQueueSubmit(self._queue, 1, frame.submit_ptr,
                                                             frame.fence)
        if r < 0:
            self._inflight.remove(frame)
            self._free_frames.append(frame)
            msgs = "\n  ".join(self._collector.take_since(mark))
            check(r, fn_name, context="submitting launches" + (f" ({msgs})" if msgs else "") + ": ")

    def submit_alone(self, pipeline, groups):
        """Dispatch `pipeline` (no buffers, no push constants) in a command buffer of its own that no sync
        waits for (the driver warm-up, warm_up.py: a host write right after sp.init must not wait for it).
        The device's close waits for it, then frees the command buffer and the pipeline."""
        frame = _Frame(self._device, self._cmd_pool)
        self._frames.append(frame)   # (never reused: its fence goes at close)
        cmd = frame.cmd
        check(lib.vkBeginCommandBuffer(cmd, self._begin_ptr), "vkBeginCommandBuffer")
        lib.vkCmdBindPipeline(cmd, BIND_COMPUTE, pipeline._handle)
        lib.vkCmdDispatch(cmd, *groups)
        check(lib.vkEndCommandBuffer(cmd), "vkEndCommandBuffer")
        check(lib.vkQueueSubmit(self._queue, 1, frame.submit_ptr, frame.fence), "vkQueueSubmit")

    # -- the hot path -------------------------------------------------------------------------------
    def launch(self, pipeline, buffers, push_constants, groups):
        """See base.Device.launch. Builds no Vulkan struct once the buffer tuple has been seen."""
        gx, gy, gz = groups
        mx, my, mz = self._limits_groups
        if not (0 <= gx <= mx and 0 <= gy <= my and 0 <= gz <= mz):
            raise self._groups_error(pipeline, groups)
        cmd = self._bind(pipeline, self._set_entry(pipeline, buffers)[0], push_constants)
        lib.vkCmdDispatch(cmd, gx, gy, gz)
        self._after_dispatch(cmd, pipeline)

    def prepare_launch(self, pipeline, buffers, groups):
        """See base.Device.prepare_launch: the groups checked and the descriptor set looked up once."""
        gx, gy, gz = groups
        mx, my, mz = self._limits_groups
        if not (0 <= gx <= mx and 0 <= gy <= my and 0 <= gz <= mz):
            raise self._groups_error(pipeline, groups)
        return PreparedLaunch(self, pipeline, list(buffers), self._set_entry(pipeline, buffers), (gx, gy, gz))

    def _groups_error(self, pipeline, groups):
        return DeviceError(f"kernel '{pipeline.name}': groups {tuple(groups)} exceed "
                           f"maxComputeWorkGroupCount {self._limits_groups} (fold into 2-D)")

    def launch_indirect(self, pipeline, buffers, push_constants, args, offset):
        """See base.Device.launch_indirect (vkCmdDispatchIndirect; `args` was created with the indirect usage
        every buffer has). A barrier first makes the earlier launches' writes of `args` visible to the read."""
        if offset % 4 or offset + 12 > args.nbytes or getattr(args, "_device", None) is not self or \
                args._handle is None:
            raise DeviceError(f"kernel '{pipeline.name}': indirect arguments at byte {offset} of {args!r}")
        cmd = self._bind(pipeline, self._set_entry(pipeline, buffers)[0], push_constants)
        lib.vkCmdPipelineBarrier(cmd, PIPE_COMPUTE | PIPE_TRANSFER, PIPE_INDIRECT, 0, 1, self._mb_c2i_ptr,
                                 0, NULL, 0, NULL)
        lib.vkCmdDispatchIndirect(cmd, args._handle, offset)
        self._after_dispatch(cmd, pipeline)

    def _bind(self, pipeline, sets, push_constants):
        """Bind the pipeline, descriptor set `sets` (None: none) and the push constants in the command buffer
        being recorded (begun if none is); returns it."""
        handle = pipeline._handle
        if handle is None:
            raise DeviceError(f"kernel '{pipeline.name}': pipeline released or its device closed")
        cmd = self._cmd
        if cmd is None:
            cmd = self._begin()
        layout = pipeline._layout
        bound = self._bound
        if bound is None or bound[0] is not pipeline:
            lib.vkCmdBindPipeline(cmd, BIND_COMPUTE, handle)
            bound = None
        if sets is not None and (bound is None or bound[1] is not sets):
            lib.vkCmdBindDescriptorSets(cmd, BIND_COMPUTE, layout, 0, 1, sets, 0, NULL)
        self._bound = (pipeline, sets)
        pcs = pipeline.push_constant_size
        if pcs:
            if len(push_constants) != pcs:
                push_constants = pipeline._padded(push_constants)
            lib.vkCmdPushConstants(cmd, layout, STAGE_COMPUTE, 0, pcs, ffi.from_buffer(push_constants))
        elif push_constants:
            raise DeviceError(f"kernel '{pipeline.name}' declares no push constants, got "
                              f"{len(push_constants)} bytes")
        return cmd

    def _after_dispatch(self, cmd, pipeline):
        self._frame.kernels.add(pipeline.name)
        # Orders this launch's writes before the next launch's reads and writes (RAW and WAW).
        lib.vkCmdPipelineBarrier(cmd, PIPE_COMPUTE, PIPE_COMPUTE, 0, 1, self._mb_c2c_ptr,
                                 0, NULL, 0, NULL)
        self._recorded += 1
        # A pipeline's first dispatch: lavapipe compiles it when the dispatch runs, on its queue's thread.
        # Submitted at once, that compile overlaps the host's next work (the next kernel's compile: MPM's
        # first forward in a fresh process took 350 ms instead of 480).
        first = not pipeline.dispatched
        pipeline.dispatched = True
        if self._recorded >= self.flush_every or (first and self._compiles_at_dispatch) or \
                (not self._recorded % IDLE_CHECK_EVERY and self._idle()):
            self._flush()

    # -- transfers (the Tape's checkpoints and gradient clears) ----------------------------------------
    def _transfer(self, record):
        """Record one transfer command between barriers that order it with every launch and transfer."""
        cmd = self._cmd if self._cmd is not None else self._begin()
        self._between_transfer_barriers(cmd, record)
        self._recorded += 1
        if self._recorded >= self.flush_every or (not self._recorded % IDLE_CHECK_EVERY and self._idle()):
            self._flush()

    def _between_transfer_barriers(self, cmd, record):
        """`record(cmd)`, transfer commands, in `cmd` after the launches' and transfers' writes and before their
        next reads and writes (a batch records its fills so too: batches.py)."""
        stages = PIPE_COMPUTE | PIPE_TRANSFER
        lib.vkCmdPipelineBarrier(cmd, stages, PIPE_TRANSFER, 0, 1, self._mb_to_transfer_ptr, 0, NULL, 0, NULL)
        record(cmd)
        lib.vkCmdPipelineBarrier(cmd, PIPE_TRANSFER, stages, 0, 1, self._mb_from_transfer_ptr, 0, NULL, 0, NULL)

    def copy_buffer(self, src, dst, nbytes):
        """See base.Device.copy_buffer (vkCmdCopyBuffer)."""
        check_transfer(nbytes, 0, src, dst)
        if not nbytes:
            return
        region = self._copy_region
        if not (src.addressed or dst.addressed):
            region.srcOffset, region.dstOffset, region.size = 0, 0, nbytes
            self._transfer(lambda cmd: lib.vkCmdCopyBuffer(cmd, src._handle, dst._handle, 1, region))
            return
        self._transfer(lambda cmd: _copy_segments(cmd, region, src, dst, nbytes))

    def copy_regions(self, src, dst, regions):
        """See base.Device.copy_regions: one vkCmdCopyBuffer with every region (VkBufferCopy is three
        VkDeviceSize, the layout of the regions' rows), or region by region into an addressed buffer's blocks."""
        regions = check_regions(src, dst, regions)
        if not len(regions):
            return
        if not (src.addressed or dst.addressed):
            copies = ffi.from_buffer("VkBufferCopy[]", regions)   # read when the command is recorded
            self._transfer(lambda cmd: lib.vkCmdCopyBuffer(cmd, src._handle, dst._handle, len(regions), copies))
            return
        self._transfer(lambda cmd: [_copy_segments(cmd, self._copy_region, src, dst, int(n), int(at), int(to))
                                    for at, to, n in regions])

    def fill_buffer(self, buf, offset, nbytes, word):
        """See base.Device.fill_buffer (vkCmdFillBuffer)."""
        self.fill_buffers(((buf, offset, nbytes, word),))

    def fill_buffers(self, fills):
        """See base.Device.fill_buffers: every vkCmdFillBuffer between one pair of barriers."""
        parts = fill_parts(fills)
        if parts:
            self._transfer(lambda cmd: [lib.vkCmdFillBuffer(cmd, *part) for part in parts])


def fill_parts(fills):
    """The vkCmdFillBuffer arguments (handle, offset, size, word) of (buffer, offset, nbytes, word) fills: one
    per memory block of an addressed buffer."""
    parts = []
    for buf, offset, nbytes, word in fills:
        check_transfer(nbytes, offset, buf)
        if nbytes:
            parts += [(h, at, n, word & 0xFFFFFFFF) for h, at, n in buf.segments(offset, nbytes)]
    return parts




class PreparedLaunch:
    """One dispatch checked once (ProgramMixin.prepare_launch): a replay calls it with each launch's push
    constants. Its descriptor set is looked up again only after a buffer it binds was released, and then
    refused as `launch` refuses it."""
    __slots__ = ("device", "pipeline", "buffers", "entry", "groups")

    def __init__(self, device, pipeline, buffers, entry, groups):
        self.device, self.pipeline, self.buffers, self.entry, self.groups = device, pipeline, buffers, entry, groups

    def __call__(self, push_constants):
        dev, pipeline, sets = self.device, self.pipeline, self.entry[0]
        if sets is None and self.buffers:
            self.entry = dev._set_entry(pipeline, self.buffers)
            sets = self.entry[0]
        cmd = dev._bind(pipeline, sets, push_constants)
        lib.vkCmdDispatch(cmd, *self.groups)
        dev._after_dispatch(cmd, pipeline)


def _copy_segments(cmd, region, src, dst, nbytes, at=0, to=0):
    """Copy `nbytes` bytes of `src` from `at` into `dst` from `to`, piece by piece where either is in several
    memory blocks."""
    done = to
    for s_handle, s_at, s_len in src.segments(at, nbytes):
        for d_handle, d_at, d_len in dst.segments(done, s_len):
            region.srcOffset, region.dstOffset, region.size = s_at, d_at, d_len
            lib.vkCmdCopyBuffer(cmd, s_handle, d_handle, 1, region)
            s_at, done = s_at + d_len, done + d_len

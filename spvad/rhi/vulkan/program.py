"""Vulkan compute pipelines, descriptor sets and launch recording.

`ProgramMixin` is mixed into `VulkanDevice` (device.py owns the instance, buffers, fences and sync;
this file owns what a launch needs: pipelines, descriptor sets, the command buffers it records into
and their submission). Why the hot path looks the way it does:
building one struct through the `vulkan` package costs 10-40 us, so `launch` builds none. It calls the
raw cffi functions in `lib` with handles and pre-built structs, and reuses descriptor sets cached per
tuple of buffers: a repeated launch is a dict lookup plus five cffi calls.

Sharing: one descriptor set layout per buffer count and one pipeline layout per (buffer count,
push-constant size), so descriptor sets (keyed by the buffers alone) are reused across kernels that
bind the same buffers, e.g. a forward kernel and its gradient kernel.
"""
import struct

from ...errors import DeviceError, PipelineCreationError
from ..base import Pipeline, check_regions, check_transfer
from .vkapi import NULL, VK_ERRORS, WHOLE_SIZE, check, ffi, lib, result_of, vk

BIND_COMPUTE = lib.VK_PIPELINE_BIND_POINT_COMPUTE
STAGE_COMPUTE = lib.VK_SHADER_STAGE_COMPUTE_BIT
PIPE_COMPUTE = lib.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
PIPE_TRANSFER = lib.VK_PIPELINE_STAGE_TRANSFER_BIT
PIPE_INDIRECT = lib.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT
ANY_WRITE = lib.VK_ACCESS_SHADER_WRITE_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT
TRANSFER_ACCESS = lib.VK_ACCESS_TRANSFER_READ_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT
ANY_ACCESS = TRANSFER_ACCESS | lib.VK_ACCESS_SHADER_READ_BIT | lib.VK_ACCESS_SHADER_WRITE_BIT
STORAGE_BUFFER = lib.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
SPIRV_MAGIC = 0x07230203
MAX_IN_FLIGHT = 3              # early-submitted batches before recording waits for the oldest
IDLE_CHECK_EVERY = 16          # launches between looks at whether the device finished what it was given
SETS_PER_POOL = 256            # a new pool is added when these run out (pools grow, never fail)
DESCRIPTORS_PER_POOL = 1024


class VulkanPipeline(Pipeline):
    """A compute pipeline. `_handle`/`_layout` are read directly by `launch` (no property cost)."""

    def __init__(self, device, handle, layout, name, num_buffers, push_constant_size):
        self._device = device
        self._handle = handle
        self._layout = layout
        self.name = name
        self.num_buffers = num_buffers
        self.push_constant_size = push_constant_size   # rounded up to a multiple of 4
        self.dispatched = False   # recorded into a command buffer yet (see _after_dispatch)

    def release(self):
        if self._handle is not None:
            dev, handle = self._device, self._handle
            self._handle = None
            dev._pipelines.discard(self)
            # Recorded launches may still use it: destroyed now if idle, else after the next sync.
            dev._retire(lambda: vk.vkDestroyPipeline(dev._device, handle, None))

    def _padded(self, data):
        """Push-constant bytes padded with zeros to the declared size (cold path)."""
        if len(data) > self.push_constant_size:
            raise DeviceError(f"kernel '{self.name}': {len(data)} bytes of push constants for a "
                              f"pipeline declared with {self.push_constant_size}")
        return bytes(data) + bytes(self.push_constant_size - len(data))

    def __repr__(self):
        state = "released" if self._handle is None else "live"
        return f"<VulkanPipeline {self.name!r} buffers={self.num_buffers} " \
               f"push={self.push_constant_size} {state}>"


def pack_spec_constants(spec_constants):
    """(map entries, data bytes) for VkSpecializationInfo: 4 bytes per constant, in SpecId order.
    bool -> u32 0/1, int -> u32 (or i32 when negative), float -> f32."""
    entries, data = ffi.new("VkSpecializationMapEntry[]", len(spec_constants)), bytearray()
    for offset, (spec_id, value) in enumerate(sorted(spec_constants.items())):
        if isinstance(value, bool):
            packed = struct.pack("<I", int(value))
        elif isinstance(value, int):
            if not -2**31 <= value < 2**32:
                raise DeviceError(f"spec constant {spec_id}={value} does not fit in 32 bits")
            packed = struct.pack("<i" if value < 0 else "<I", value)
        elif isinstance(value, float):
            packed = struct.pack("<f", value)
        else:
            raise DeviceError(f"spec constant {spec_id}: unsupported value {value!r}")
        entries[offset].constantID, entries[offset].offset, entries[offset].size = spec_id, 4 * offset, 4
        data += packed
    return entries, bytes(data)


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


class ProgramMixin:
    """Pipeline creation, descriptor sets and `launch` for VulkanDevice.

    Expects from the device: `_device`, `_queue`, `_cmd_pool`, `_collector`, `_pipeline_cache`,
    `_limits_groups`, `info`, `flush_every`, `_check_open()`, `_wait(frames)`, `_idle()`, `_retire(fn)`, the
    command state (`_cmd`, `_frame`, `_recorded`, `_frames`, `_free_frames`, `_inflight`),
    `_pipelines` (set), and the state set up by `_init_programs()`."""

    def _init_programs(self):
        self._set_layouts = {}     # num_buffers -> VkDescriptorSetLayout
        self._layouts = {}         # (num_buffers, push size) -> VkPipelineLayout
        self._pools = []           # [VkDescriptorPool, sets left, descriptors left]
        self._sets = {}            # tuple of buffer uids -> [VkDescriptorSet[1], pool record] (_set_entry)
        self._sets_of_buffer = {}  # buffer uid -> keys of cached sets that bind it
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

    # -- layouts (cached for the device's lifetime, destroyed in close) ---------------------------
    def _set_layout(self, n):
        dsl = self._set_layouts.get(n)
        if dsl is None:
            bindings = ffi.new("VkDescriptorSetLayoutBinding[]", max(n, 1))
            for i in range(n):
                b = bindings[i]
                b.binding, b.descriptorType, b.descriptorCount, b.stageFlags = i, STORAGE_BUFFER, 1, STAGE_COMPUTE
            info = ffi.new("VkDescriptorSetLayoutCreateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "bindingCount": n,
                "pBindings": bindings if n else NULL})
            dsl = self._created(lib.vkCreateDescriptorSetLayout, "VkDescriptorSetLayout *", info)
            self._set_layouts[n] = dsl
        return dsl

    def _pipeline_layout(self, n, pc_size):
        layout = self._layouts.get((n, pc_size))
        if layout is None:
            dsls = ffi.new("VkDescriptorSetLayout[1]", [self._set_layout(n)])
            ranges = ffi.new("VkPushConstantRange *", {"stageFlags": STAGE_COMPUTE, "offset": 0, "size": pc_size})
            info = ffi.new("VkPipelineLayoutCreateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": dsls,
                "pushConstantRangeCount": 1 if pc_size else 0, "pPushConstantRanges": ranges if pc_size else NULL})
            layout = self._created(lib.vkCreatePipelineLayout, "VkPipelineLayout *", info)
            self._layouts[(n, pc_size)] = layout
        return layout

    def _created(self, create, handle_type, info):
        """The handle a raw vkCreate* call makes from `info` (struct pointers, not the `vulkan` package's
        structs: the layouts and descriptor sets are made in every process's first launch)."""
        out = ffi.new(handle_type)
        check(create(self._device, info, NULL, out), create.__name__)
        return out[0]

    # -- pipelines ----------------------------------------------------------------------------------
    def create_pipeline(self, spirv, *, name, num_buffers, push_constant_size,
                        spec_constants=None, entry="main", fast_math=True):
        """See base.Device.create_pipeline. The shader module lives only during creation; exact float
        semantics (fast_math False) are NoContraction decorations in the SPIR-V, nothing to set here."""
        self._check_open()
        spirv = bytes(spirv)
        where = f"kernel '{name}' (backend vulkan): "
        # Cheap guards: the driver/layer crash the process on such modules (REPORT Q3).
        if len(spirv) < 20 or len(spirv) % 4 or struct.unpack_from("<I", spirv)[0] != SPIRV_MAGIC:
            raise PipelineCreationError(where + f"not a SPIR-V module ({len(spirv)} bytes)")
        limit = self.info["limits"]["max_push_constants_size"]
        pc_size = (int(push_constant_size) + 3) & ~3
        if pc_size > limit:
            raise PipelineCreationError(where + f"{pc_size} bytes of push constants exceed the "
                                        f"device limit of {limit}")
        limit = self.info["limits"]["max_storage_buffers_per_stage"]
        if num_buffers > limit:   # past it lavapipe computes wrong values or crashes (found with 17 and 18 arrays)
            raise PipelineCreationError(where + f"it binds {num_buffers} storage buffers (its arrays, their .grad or "
                                        f".dual, spvad's own buffers), more than this device's "
                                        f"maxPerStageDescriptorStorageBuffers ({limit}); split the kernel, or "
                                        "pack arrays into fewer (e.g. rows of one array)")
        layout = self._pipeline_layout(int(num_buffers), pc_size)
        # Raw cffi structs (the package's cost 0.05-0.3 ms a pipeline); the calls stay the package's, whose
        # exceptions name the result (and which tests/driver_refusal.py replaces on drivers that accept anything).
        # Every struct a pointer refers to is a local here, alive until the calls return.
        code, entry_name, spec = ffi.from_buffer("uint32_t[]", spirv), ffi.new("char[]", entry.encode()), NULL
        if spec_constants:
            entries, data = pack_spec_constants(spec_constants)
            data = ffi.from_buffer(data)
            spec = ffi.new("VkSpecializationInfo *", {"mapEntryCount": len(entries), "pMapEntries": entries,
                                                      "dataSize": len(data), "pData": data})
        dev, col = self._device, self._collector
        mark = col.mark()  # messages from here on explain a failure (Mesa sends its reason)
        module = handle = None
        fn_name = "vkCreateShaderModule"
        try:
            module = vk.vkCreateShaderModule(dev, ffi.new("VkShaderModuleCreateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(spirv), "pCode": code}),
                None)
            info = ffi.new("VkComputePipelineCreateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "layout": layout,
                "stage": {"sType": lib.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, "stage": STAGE_COMPUTE,
                          "module": module, "pName": entry_name, "pSpecializationInfo": spec}})
            fn_name = "vkCreateComputePipelines"
            # The package returns the whole VkPipeline[1] array, not the handle.
            handle = vk.vkCreateComputePipelines(dev, self._pipeline_cache, 1, info, None)[0]
        except VK_ERRORS as exc:
            msgs = col.take_since(mark)
            code, result = result_of(exc)
            text = (where + f"the driver refused the pipeline: {fn_name} returned {result}"
                    + (f" ({code})" if code is not None else ""))
            if msgs:
                text += "; driver messages:\n  " + "\n  ".join(msgs)
            err = PipelineCreationError(text)
            err.kernel, err.backend, err.result, err.driver_messages = name, "vulkan", result, msgs
            raise err from None
        finally:
            if module is not None:  # a pipeline does not need its module after creation
                vk.vkDestroyShaderModule(dev, module, None)
        pipe = VulkanPipeline(self, handle, layout, name, int(num_buffers), pc_size)
        self._pipelines.add(pipe)
        return pipe

    # -- descriptor sets ----------------------------------------------------------------------------
    def _alloc_set(self, n):
        """A descriptor set for n storage buffers, from the first pool with room (new pool if none)."""
        dsl = self._set_layout(n)
        for rec in self._pools:
            if rec[1] >= 1 and rec[2] >= n:
                break
        else:
            rec = self._new_pool(max(DESCRIPTORS_PER_POOL, n))
        dsls, sets = ffi.new("VkDescriptorSetLayout[1]", [dsl]), ffi.new("VkDescriptorSet[1]")
        for attempt in range(2):
            info = ffi.new("VkDescriptorSetAllocateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": rec[0],
                "descriptorSetCount": 1, "pSetLayouts": dsls})
            r = lib.vkAllocateDescriptorSets(self._device, info, sets)
            if r not in (lib.VK_ERROR_OUT_OF_POOL_MEMORY, lib.VK_ERROR_FRAGMENTED_POOL) or attempt:
                check(r, "vkAllocateDescriptorSets")
                break
            rec = self._new_pool(max(DESCRIPTORS_PER_POOL, n))  # our counts say yes, the pool says no
        rec[1] -= 1
        rec[2] -= n
        return sets, rec  # `sets` is a VkDescriptorSet[1]: exactly what vkCmdBindDescriptorSets takes

    def _new_pool(self, descriptors):
        size = ffi.new("VkDescriptorPoolSize *", {"type": STORAGE_BUFFER, "descriptorCount": descriptors})
        info = ffi.new("VkDescriptorPoolCreateInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
            "flags": lib.VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,   # sets die with buffers
            "maxSets": SETS_PER_POOL, "poolSizeCount": 1, "pPoolSizes": size})
        rec = [self._created(lib.vkCreateDescriptorPool, "VkDescriptorPool *", info), SETS_PER_POOL, descriptors]
        self._pools.append(rec)
        return rec

    def _make_set(self, key, buffers):
        """Allocate, write and cache the descriptor set binding `buffers` (cold path); returns its entry."""
        limit = self.info["limits"]["max_storage_buffer_range"]
        for b in buffers:
            if getattr(b, "_device", None) is not self or b._handle is None:
                raise DeviceError(f"launch: {b!r} is released or belongs to another device")
            if b._size > limit:
                raise DeviceError(f"launch: a buffer of {b._size} bytes exceeds this device's "
                                  f"maxStorageBufferRange ({limit} bytes) and cannot be bound")
        sets, rec = self._alloc_set(len(buffers))
        n = len(buffers)
        infos, writes = ffi.new("VkDescriptorBufferInfo[]", n), ffi.new("VkWriteDescriptorSet[]", n)
        for i, b in enumerate(buffers):
            infos[i].buffer, infos[i].range = b._handle, WHOLE_SIZE
            w = writes[i]
            w.sType, w.dstSet, w.dstBinding = lib.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, sets[0], i
            w.descriptorCount, w.descriptorType, w.pBufferInfo = 1, STORAGE_BUFFER, infos + i
        lib.vkUpdateDescriptorSets(self._device, n, writes, 0, NULL)
        entry = self._sets[key] = [sets, rec]
        for uid in set(key):
            self._sets_of_buffer.setdefault(uid, []).append(key)
        return entry

    def _forget_buffer(self, uid):
        """Drop the cached sets that bind buffer `uid`; they are freed once no batch can use them."""
        for key in self._sets_of_buffer.pop(uid, ()):
            entry = self._sets.pop(key, None)
            if entry is not None:
                sets, rec = entry
                entry[0] = None   # a PreparedLaunch holding it looks the set up again (and is refused)
                self._retire(lambda s=sets, r=rec, n=len(key): self._free_set(s, r, n))

    def _free_set(self, sets, rec, n):
        if any(r is rec for r in self._pools):  # the pool may be gone (close)
            vk.vkFreeDescriptorSets(self._device, rec[0], 1, sets)
            rec[1] += 1
            rec[2] += n

    def _destroy_programs(self):
        """Destroy pools (freeing their sets), layouts and set layouts; called by close()."""
        d = self._device
        for rec in self._pools:
            vk.vkDestroyDescriptorPool(d, rec[0], None)
        for layout in self._layouts.values():
            vk.vkDestroyPipelineLayout(d, layout, None)
        for dsl in self._set_layouts.values():
            vk.vkDestroyDescriptorSetLayout(d, dsl, None)
        for entry in self._sets.values():
            entry[0] = None
        self._pools, self._layouts, self._set_layouts = [], {}, {}
        self._sets, self._sets_of_buffer = {}, {}

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
        # collector inside this very call) is then destroyed after the next sync, never while the batch
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

    def _set_entry(self, pipeline, buffers):
        """The cached [descriptor set, pool record] binding `buffers` ([None, None] for no buffer), made on first
        use. Its set becomes None when a buffer it binds is released (_forget_buffer)."""
        n = pipeline.num_buffers
        if len(buffers) != n:
            raise DeviceError(f"kernel '{pipeline.name}' binds {n} buffers, got {len(buffers)}")
        if not n:
            return _NO_SET
        key = tuple([b._uid for b in buffers])
        entry = self._sets.get(key)
        return entry if entry is not None else self._make_set(key, buffers)

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


_NO_SET = [None, None]   # the entry of a pipeline that binds no buffer


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


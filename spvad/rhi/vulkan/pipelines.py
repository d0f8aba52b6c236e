"""Vulkan compute pipelines, their layouts and the descriptor sets that launches bind.

`PipelineMixin` is mixed into `VulkanDevice` beside `ProgramMixin` (device.py owns the instance, buffers, fences
and sync; program.py records the launches into command buffers and submits them; this file owns what a launch
binds: pipelines, pipeline and descriptor set layouts, descriptor pools and sets). Why the hot path looks the way
it does: building one struct through the `vulkan` package costs 10-40 us, so `launch` builds none. Its part here
is `_set_entry`: descriptor sets are cached per tuple of buffers, so a repeated launch finds its set with a dict
lookup; the layouts and sets are made (cold path) with raw cffi structs.

Sharing: one descriptor set layout per buffer count and one pipeline layout per (buffer count,
push-constant size), so descriptor sets (keyed by the buffers alone) are reused across kernels that
bind the same buffers, e.g. a forward kernel and its gradient kernel.
"""
import struct

from ...errors import DeviceError, PipelineCreationError
from ..base import Pipeline
from .vkapi import NULL, VK_ERRORS, WHOLE_SIZE, check, ffi, lib, result_of, vk

STAGE_COMPUTE = lib.VK_SHADER_STAGE_COMPUTE_BIT
STORAGE_BUFFER = lib.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
SPIRV_MAGIC = 0x07230203
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


class PipelineMixin:
    """Pipeline creation, their layouts and the descriptor sets for VulkanDevice.

    Expects from the device: `_device`, `_collector`, `_pipeline_cache`, `info`, `_check_open()`, `_retire(fn)`,
    `_pipelines` (set), and the state set up by `_init_pipelines()` (called by ProgramMixin._init_programs)."""

    def _init_pipelines(self):
        self._set_layouts = {}     # num_buffers -> VkDescriptorSetLayout
        self._layouts = {}         # (num_buffers, push size) -> VkPipelineLayout
        self._pools = []           # [VkDescriptorPool, sets left, descriptors left]
        self._sets = {}            # tuple of buffer uids -> [VkDescriptorSet[1], pool record] (_set_entry)
        self._sets_of_buffer = {}  # buffer uid -> keys of cached sets that bind it

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

    def _destroy_pipelines(self):
        """Destroy pools (freeing their sets), layouts and set layouts; called by close() (through
        ProgramMixin._destroy_programs)."""
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


_NO_SET = [None, None]   # the entry of a pipeline that binds no buffer

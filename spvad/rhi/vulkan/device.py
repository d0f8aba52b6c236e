"""VulkanDevice: instance, device selection, features, buffers, sync and teardown.

Pipelines and descriptor sets live in pipelines.py (`PipelineMixin`), command-buffer recording and `launch` in
program.py (`ProgramMixin`), recorded batches of launches in batches.py (`BatchMixin`); every workaround for the
`vulkan` package lives in vkapi.py. Execution model: launches are recorded into a command buffer; `sync()`
submits it and waits on fences. The batch is submitted early (without waiting) into a small ring of command
buffers when the device has finished what it was given (looked at every 16 launches) or after `flush_every`
launches, so the device works while Python records. Objects released while recorded work may still use them are
destroyed once the batch that may use them finished, sync or no sync (memory stays flat over 100k launches);
recorded batches' command buffers are freed at the next sync.
"""
import os
import time


from ...errors import DeviceError, PipelineCreationError
from ...spirv.lower import LOOP_ITERATION_CAP
from ..base import Device
from . import pipeline_cache, warm_up
from .batches import BatchMixin
from .buffers import BufferMixin, chunk_bytes, free_allocations
from .loader import no_driver_hint
from .pipelines import PipelineMixin
from .program import ProgramMixin
from .vkapi import (SEV_ERROR, SEV_WARNING, TYPE_GENERAL, TYPE_PERFORMANCE, TYPE_VALIDATION,
                    VK_ERRORS, Collector, call, check, enumerate_names, ffi, lib, make_version,
                    messenger_info, version_string, vk)

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
EXT_DEBUG_UTILS = "VK_EXT_debug_utils"
EXT_PORTABILITY_ENUM = "VK_KHR_portability_enumeration"
EXT_PORTABILITY_SUBSET = "VK_KHR_portability_subset"
EXT_ATOMIC_FLOAT = "VK_EXT_shader_atomic_float"
LLVMPIPE = "llvmpipe"
DEVICE_TYPES = {lib.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete_gpu",
                lib.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated_gpu",
                lib.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual_gpu",
                lib.VK_PHYSICAL_DEVICE_TYPE_CPU: "cpu", lib.VK_PHYSICAL_DEVICE_TYPE_OTHER: "other"}
PREFERENCE = ["discrete_gpu", "integrated_gpu", "virtual_gpu", "cpu", "other"]
HOST_VISIBLE = lib.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | lib.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
DEVICE_LOCAL = lib.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
VK_TIMEOUT = 2
VK_NOT_READY = 1


def cpu_workers():
    """lavapipe's worker threads: one per CPU, or LP_NUM_THREADS, at most 32 (Mesa's default, override and
    LP_MAX_THREADS)."""
    try:
        n = int(os.environ.get("LP_NUM_THREADS", "").strip() or os.cpu_count() or 1)
    except ValueError:
        n = os.cpu_count() or 1
    return min(max(n, 1), 32)


SUBGROUP_REDUCE_OPS = (lib.VK_SUBGROUP_FEATURE_BASIC_BIT | lib.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
                       | lib.VK_SUBGROUP_FEATURE_BALLOT_BIT)


def subgroup_reduce(props):
    """Whether compute shaders have subgroup election and arithmetic (VkPhysicalDeviceSubgroupProperties
    `props`) and SPVAD_SUBGROUP_REDUCE is not "0" (which keeps every atomic as it is, for comparisons)."""
    if os.environ.get("SPVAD_SUBGROUP_REDUCE", "").strip() == "0":
        return False
    return bool(props.supportedStages & lib.VK_SHADER_STAGE_COMPUTE_BIT) and \
        props.supportedOperations & SUBGROUP_REDUCE_OPS == SUBGROUP_REDUCE_OPS


def sync_timeout_from_env(default):
    """Seconds a sync waits before raising: SPVAD_SYNC_TIMEOUT (0 or "none": wait as long as it takes)."""
    text = os.environ.get("SPVAD_SYNC_TIMEOUT", "").strip().lower()
    if not text:
        return default
    if text in ("0", "none", "inf"):
        return 0
    try:
        value = float(text)
    except ValueError:
        raise DeviceError(f"SPVAD_SYNC_TIMEOUT={text!r}: expected seconds (e.g. 600) or 0 for no limit") from None
    if value < 0:
        raise DeviceError(f"SPVAD_SYNC_TIMEOUT={text!r}: expected seconds >= 0")
    return value


def _timeout_message(seconds, frames, device_name):
    kernels = sorted({name for f in frames for name in f.kernels})
    shown = ", ".join(kernels[:6]) + (f" and {len(kernels) - 6} more" if len(kernels) > 6 else "")
    return (f"device work did not finish within {seconds:g} s on {device_name}; it is still running, and the "
            f"next sync waits for it again. Unfinished launches: {shown or 'unknown'}. A long kernel (many "
            "threads or iterations; on a CPU driver such as lavapipe also a first launch that compiles large "
            "per-thread arrays) can take this long; set SPVAD_SYNC_TIMEOUT=<seconds> (0: no limit) to wait "
            "longer")


class VulkanDevice(BufferMixin, PipelineMixin, ProgramMixin, BatchMixin, Device):
    """A Vulkan compute device. See base.Device for the contract of each method."""

    flush_every = 1024        # launches per command buffer before an early submit
    sync_timeout_s = 120.0    # lavapipe compiles at first dispatch; huge private arrays take long

    def __init__(self, selector=None, validation=False, pipeline_cache_dir=None):
        self._closed = False
        self.sync_timeout_s = sync_timeout_from_env(self.sync_timeout_s)
        self._pipeline_cache_dir = pipeline_cache_dir   # VkPipelineCache data persists here across runs
        self._instance = self._messenger = self._device = self._pipeline_cache = None
        self._cmd_pool = None
        self._frames, self._free_frames, self._inflight = [], [], []
        self._cmd, self._frame, self._recorded = None, None, 0
        self._buffers, self._pipelines = {}, set()
        self._deferred = []   # frees of recorded batches' command buffers, run at the next sync (batches.py)
        self._next_uid = 1
        self._collector = Collector()
        self.validation = bool(validation)
        self._init_programs()
        try:
            self._create_instance()
            self._pick_physical_device(selector)
            self._create_device()
        except BaseException:
            self.close()
            raise
        # lavapipe compiles a pipeline at its first dispatch, on its queue's thread (a GPU driver at creation)
        self._compiles_at_dispatch = self._info["device_type"] == "cpu"
        if self._info["device_type"] == "cpu" and warm_up.wanted():   # (a GPU compiles at pipeline creation)
            try:
                warm_up.warm_up(self)
            except (DeviceError, PipelineCreationError):   # only a head start: the first kernel pays it then
                pass

    # -- construction -------------------------------------------------------------------------------
    def _create_instance(self):
        if vk.vkEnumerateInstanceVersion() < make_version(1, 1):
            raise DeviceError("the Vulkan loader is 1.0; spvad needs Vulkan 1.1")
        avail = enumerate_names(vk.vkEnumerateInstanceExtensionProperties(None), "extensionName")
        layers, exts, flags = [], [], 0
        if self.validation:
            have = enumerate_names(vk.vkEnumerateInstanceLayerProperties(), "layerName")
            if VALIDATION_LAYER not in have:
                raise DeviceError(f"validation requested but {VALIDATION_LAYER} is not installed "
                                  f"(layers found: {sorted(have)})")
            layers.append(VALIDATION_LAYER)
            avail |= enumerate_names(vk.vkEnumerateInstanceExtensionProperties(VALIDATION_LAYER),
                                     "extensionName")
        if EXT_PORTABILITY_ENUM in avail:  # required to see MoltenVK (macOS); harmless elsewhere
            exts.append(EXT_PORTABILITY_ENUM)
            flags |= lib.VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
        chain = self._keep = []   # every struct of the pNext chain stays referenced while used
        pnext = None
        if EXT_DEBUG_UTILS in avail:
            exts.append(EXT_DEBUG_UTILS)
            if self.validation:
                sev, types = SEV_WARNING | SEV_ERROR, TYPE_GENERAL | TYPE_VALIDATION | TYPE_PERFORMANCE
            else:  # Mesa explains refused pipelines as ERROR/GENERAL even without the layer
                sev, types = SEV_ERROR, TYPE_GENERAL
            # Chained into the create-info, it also sees vkCreateInstance / vkDestroyInstance.
            pnext = self._messenger_ci = messenger_info(self._collector, sev, types)
            chain.append(pnext)
        if self.validation:
            pnext = vk.VkValidationFeaturesEXT(pNext=pnext, pEnabledValidationFeatures=[
                lib.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT])
            chain.append(pnext)
        app = vk.VkApplicationInfo(pApplicationName="spvad", pEngineName="spvad",
                                   apiVersion=make_version(1, 3))
        info = vk.VkInstanceCreateInfo(pNext=pnext, flags=flags, pApplicationInfo=app,
                                       ppEnabledLayerNames=layers or None,
                                       ppEnabledExtensionNames=exts or None)
        try:
            self._instance = call(vk.vkCreateInstance, info, None, collector=self._collector,
                                  context="creating the Vulkan instance: ")
        except DeviceError as exc:   # the loader's answer when it found no driver ("Found no drivers!")
            if not isinstance(exc.__context__, vk.VkErrorIncompatibleDriver):
                raise
            raise DeviceError(f"no Vulkan driver found; {no_driver_hint()}. Details: {exc}") from None
        if pnext is not None and EXT_DEBUG_UTILS in exts:
            create = vk.vkGetInstanceProcAddr(self._instance, "vkCreateDebugUtilsMessengerEXT")
            self._destroy_messenger = vk.vkGetInstanceProcAddr(
                self._instance, "vkDestroyDebugUtilsMessengerEXT")
            self._messenger = call(create, self._instance, self._messenger_ci, None)

    def _pick_physical_device(self, selector):
        try:
            physical = vk.vkEnumeratePhysicalDevices(self._instance)
        except VK_ERRORS:
            physical = []
        found = [(p, vk.vkGetPhysicalDeviceProperties(p)) for p in physical]
        listing = "; ".join(f"[{i}] {pr.deviceName} ({DEVICE_TYPES.get(pr.deviceType, 'other')})"
                            for i, (_, pr) in enumerate(found)) or "none"
        if not found:
            raise DeviceError(f"no Vulkan device found (the installed drivers report none); {no_driver_hint()}.")
        if selector is None:
            rank = {t: r for r, t in enumerate(PREFERENCE)}
            index = min(range(len(found)),
                        key=lambda i: (rank[DEVICE_TYPES.get(found[i][1].deviceType, "other")], i))
        elif isinstance(selector, int) and not isinstance(selector, bool):
            index = selector if 0 <= selector < len(found) else None
        else:
            index = next((i for i, (_, pr) in enumerate(found)
                          if str(selector).lower() in pr.deviceName.lower()), None)
        if index is None:
            raise DeviceError(f"no Vulkan device matches {selector!r}; devices: {listing}")
        self._physical, props = found[index]
        if props.apiVersion < make_version(1, 1):
            raise DeviceError(f"{props.deviceName} supports Vulkan "
                              f"{version_string(props.apiVersion)}; spvad needs 1.1")
        self._props = props
        self._device_exts = enumerate_names(
            vk.vkEnumerateDeviceExtensionProperties(self._physical, None), "extensionName")

    def _query(self):
        """Features and properties (through the 1.1 *2 queries); returns (features, info dict)."""
        p, props = self._physical, self._props
        atomic = vk.VkPhysicalDeviceShaderAtomicFloatFeaturesEXT() \
            if EXT_ATOMIC_FLOAT in self._device_exts else None
        # 64-bit buffer atomics (the compare-exchange loop of f64 atomic add/max/min needs them)
        int64_atomic = vk.VkPhysicalDeviceShaderAtomicInt64Features(pNext=atomic) \
            if self._has_int64_atomics_struct() else None
        # buffer device addresses reach arrays past maxStorageBufferRange (buffers.py); core in Vulkan 1.2
        address = vk.VkPhysicalDeviceBufferDeviceAddressFeatures(pNext=int64_atomic or atomic) \
            if props.apiVersion >= make_version(1, 2) else None
        feats = vk.VkPhysicalDeviceFeatures2(pNext=address or int64_atomic or atomic)
        vk.vkGetPhysicalDeviceFeatures2(p, feats)   # fills `feats` and the chained structs in place
        has_driver = props.apiVersion >= make_version(1, 2) or \
            "VK_KHR_driver_properties" in self._device_exts
        driver = vk.VkPhysicalDeviceDriverProperties() if has_driver else None
        maint4 = vk.VkPhysicalDeviceMaintenance4Properties(pNext=driver) \
            if props.apiVersion >= make_version(1, 3) else None
        maint3 = vk.VkPhysicalDeviceMaintenance3Properties(pNext=maint4 or driver)
        subgroup = vk.VkPhysicalDeviceSubgroupProperties(pNext=maint3)
        props2 = vk.VkPhysicalDeviceProperties2(pNext=subgroup)
        vk.vkGetPhysicalDeviceProperties2(p, props2)
        if driver is not None:
            name = ffi.string(driver.driverName).decode(errors="replace")
            text = ffi.string(driver.driverInfo).decode(errors="replace")
            driver_text = f"{name} {text}".strip()
        else:
            driver_text = f"driverVersion {props.driverVersion:#x}"
        lim = props.limits
        features = {
            "float64": bool(feats.features.shaderFloat64),
            "int64": bool(feats.features.shaderInt64),
            # a stray index reads 0 / writes nothing instead of touching other memory (debug=True checks and
            # reports indices itself; this guards everything else). llvmpipe bounds-checks every storage
            # buffer access anyway (tests/rhi/test_robust_access.py passes without the feature), and
            # enabling it there made small dispatches 1-5 us slower: GPUs only
            "robust_buffer_access": bool(feats.features.robustBufferAccess) and LLVMPIPE not in props.deviceName,
            "atomic_float32_add": bool(atomic is not None and atomic.shaderBufferFloat32AtomicAdd),
            "int64_atomics": bool(int64_atomic is not None and int64_atomic.shaderBufferInt64Atomics
                                  and feats.features.shaderInt64),
            # llvmpipe (gallivm) silently ends every loop of an invocation after 65,535 iterations in total
            # (LP_MAX_TGSI_LOOP_ITERATIONS): kernels then count their iterations and report it at sync
            "loop_iteration_cap": LLVMPIPE in props.deviceName,
            # workgroup width chosen per launch (a spec constant): lavapipe runs every lane of a group,
            # so a 64-thread launch in a 512-wide group costs 8x its work
            "adaptive_local_size": props.deviceType == lib.VK_PHYSICAL_DEVICE_TYPE_CPU,
            # kernels reach arrays past maxStorageBufferRange by address (buffers.py); without, they are refused
            "buffer_device_address": bool(address is not None and address.bufferDeviceAddress),
            # same-address atomics reduced across the subgroup first (spirv/lower_reduce.py)
            "subgroup_reduce": subgroup_reduce(subgroup),
        }
        # bytes per memory block of such an array
        self.address_chunk_bytes = chunk_bytes(maint3.maxMemoryAllocationSize,
                                               maint4.maxBufferSize if maint4 else maint3.maxMemoryAllocationSize)
        info = {
            "backend": "vulkan", "name": props.deviceName, "driver": driver_text,
            "device_type": DEVICE_TYPES.get(props.deviceType, "other"),
            # threads per workgroup for parallel tasks: lavapipe runs a 16M-element kernel ~1.5x faster
            # with 512 than with 128 (benchmarks/peers.py elementwise); GPUs keep a common 128
            "preferred_local_size": 512 if props.deviceType == lib.VK_PHYSICAL_DEVICE_TYPE_CPU else 128,
            # the threads a CPU driver runs a dispatch's workgroups on (launch/group_width.py)
            "workers": cpu_workers() if props.deviceType == lib.VK_PHYSICAL_DEVICE_TYPE_CPU else 1,
            "api_version": version_string(props.apiVersion),
            "limits": {
                "max_workgroup_count": tuple(lim.maxComputeWorkGroupCount),
                "max_workgroup_invocations": lim.maxComputeWorkGroupInvocations,
                "max_workgroup_size": tuple(lim.maxComputeWorkGroupSize),
                "max_push_constants_size": lim.maxPushConstantsSize,
                "max_storage_buffer_range": lim.maxStorageBufferRange,
                "max_storage_buffers_per_stage": lim.maxPerStageDescriptorStorageBuffers,
                "max_shared_memory_size": lim.maxComputeSharedMemorySize,
                "max_memory_allocation_size": maint3.maxMemoryAllocationSize,
                "subgroup_size": subgroup.subgroupSize,
                "max_loop_iterations": LOOP_ITERATION_CAP if LLVMPIPE in props.deviceName else 0,
            },
            "features": features,
        }
        return features, atomic, info

    def _has_int64_atomics_struct(self):
        return self._props.apiVersion >= make_version(1, 2) or "VK_KHR_shader_atomic_int64" in self._device_exts

    def _create_device(self):
        features, atomic, self._info = self._query()
        dev_exts = [EXT_PORTABILITY_SUBSET] if EXT_PORTABILITY_SUBSET in self._device_exts else []
        en_atomic = None
        if features["atomic_float32_add"]:
            dev_exts.append(EXT_ATOMIC_FLOAT)
            en_atomic = vk.VkPhysicalDeviceShaderAtomicFloatFeaturesEXT(
                shaderBufferFloat32Atomics=atomic.shaderBufferFloat32Atomics,
                shaderBufferFloat32AtomicAdd=1)
        core = vk.VkPhysicalDeviceFeatures(shaderFloat64=int(features["float64"]),
                                           shaderInt64=int(features["int64"]),
                                           robustBufferAccess=int(features["robust_buffer_access"]))
        en_int64 = None
        if features["int64_atomics"]:
            if self._props.apiVersion < make_version(1, 2):
                dev_exts.append("VK_KHR_shader_atomic_int64")
            en_int64 = vk.VkPhysicalDeviceShaderAtomicInt64Features(pNext=en_atomic, shaderBufferInt64Atomics=1)
        en_address = vk.VkPhysicalDeviceBufferDeviceAddressFeatures(pNext=en_int64 or en_atomic, bufferDeviceAddress=1) \
            if features["buffer_device_address"] else None
        enable = vk.VkPhysicalDeviceFeatures2(pNext=en_address or en_int64 or en_atomic, features=core)
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self._physical)
        qfi = next((i for i, q in enumerate(families)
                    if q.queueFlags & lib.VK_QUEUE_COMPUTE_BIT), None)
        if qfi is None:
            raise DeviceError(f"{self._info['name']} has no compute queue")
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=qfi, queueCount=1, pQueuePriorities=[1.0])
        dci = vk.VkDeviceCreateInfo(pNext=enable, pQueueCreateInfos=[qci],
                                    ppEnabledExtensionNames=dev_exts or None)
        self._device = call(vk.vkCreateDevice, self._physical, dci, None,
                            collector=self._collector, context="creating the Vulkan device: ")
        self._queue = vk.vkGetDeviceQueue(self._device, qfi, 0)
        self._cmd_pool = call(vk.vkCreateCommandPool, self._device, vk.VkCommandPoolCreateInfo(
            flags=lib.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=qfi), None)
        self._pipeline_cache = pipeline_cache.create(self._device, self._props, self._pipeline_cache_dir)
        self._limits_groups = self._info["limits"]["max_workgroup_count"]
        mem = vk.vkGetPhysicalDeviceMemoryProperties(self._physical)
        flags = [mem.memoryTypes[i].propertyFlags for i in range(mem.memoryTypeCount)]
        usable = [i for i, f in enumerate(flags) if f & HOST_VISIBLE == HOST_VISIBLE]
        # Prefer a type that is also DEVICE_LOCAL (lavapipe and unified-memory GPUs have one).
        self._memory_types = sorted(usable, key=lambda i: not flags[i] & DEVICE_LOCAL)
        # the most one array may take: the largest heap of those types (lavapipe's says 2 GiB but takes
        # whatever the host has: buffers.py asks the host there)
        self._largest_heap = max((mem.memoryHeaps[mem.memoryTypes[i].heapIndex].size for i in usable), default=0)

    # -- public API ---------------------------------------------------------------------------------
    @property
    def info(self):
        return self._info

    def validation_messages(self):
        return self._collector.take_findings()

    def _check_open(self):
        if self._closed:
            raise DeviceError("the Vulkan device belongs to the parent process (opened before os.fork()); the "
                              "child opens its own with sp.init()" if self.forked else "the Vulkan device is closed")

    def _retire(self, destroy):
        """Run `destroy` now if no recorded or submitted work can use the object, else once the latest batch
        finished (batches finish in submission order: _wait takes them oldest first), sync or no sync."""
        if self._closed:
            return
        frame = self._frame if self._frame is not None else self._inflight[-1] if self._inflight else None
        if frame is None:
            destroy()
        else:
            frame.retired.append(destroy)

    # -- submission -----------------------------------------------------------------------------------
    def _wait(self, frames):
        """Wait for `frames` (a prefix of the in-flight list), then make them reusable."""
        fences = ffi.new("VkFence[]", [f.fence for f in frames])
        start = time.monotonic()
        try:
            while True:  # wait in slices so a huge timeout never overflows or blocks uninterruptibly
                r = lib.vkWaitForFences(self._device, len(frames), fences, 1, 1_000_000_000)
                if r != VK_TIMEOUT:
                    break
                if self.sync_timeout_s and time.monotonic() - start > self.sync_timeout_s:
                    raise DeviceError(_timeout_message(self.sync_timeout_s, frames, self._info["name"]))
        except KeyboardInterrupt:   # Ctrl-C: the work goes on; exiting now must not wait for it
            self.interrupted = True
            raise
        self.interrupted = False
        check(r, "vkWaitForFences", context="waiting for launches: ")
        check(lib.vkResetFences(self._device, len(frames), fences), "vkResetFences")
        del self._inflight[:len(frames)]
        self._free_frames.extend(frames)
        for frame in frames:   # what was released while these batches ran
            retired, frame.retired = frame.retired, []
            for destroy in retired:
                destroy()

    def busy(self):
        """Whether submitted launches are still running (does not wait)."""
        return any(lib.vkGetFenceStatus(self._device, f.fence) == VK_NOT_READY for f in self._inflight)

    def _idle(self):
        """Whether the device finished every submitted batch (retiring them): the launches recorded since are
        then submitted at once (program.py), so the device works while Python records the next ones, and a
        device that is still busy gets them in one larger batch later."""
        if self.busy():
            return False
        if self._inflight:
            self._wait(list(self._inflight))   # all signalled: returns at once
        return True

    def submit(self):
        """See base.Device.submit. Ignored on a CPU device (lavapipe): its threads run on the cores the host
        records on, so the early start buys no overlap, while the extra submission and command buffer cost
        host time (an MPM Tape: 0.1 ms of 3, measured interleaved)."""
        if self._cmd is not None and self._info["device_type"] != "cpu":
            self._flush()

    def sync(self):
        self._check_open()
        if self._cmd is not None:
            self._flush()
        if self._inflight:
            self._wait(list(self._inflight))
        deferred, self._deferred = self._deferred, []
        for destroy in deferred:
            destroy()

    # -- teardown -----------------------------------------------------------------------------------
    def close(self):
        if self._closed:
            return
        self._closed = True
        d = self._device
        if d is not None:
            try:
                vk.vkDeviceWaitIdle(d)
            except VK_ERRORS:
                pass  # a lost device must still be torn down
            for destroy in self._deferred + [d for frame in self._frames for d in frame.retired]:
                destroy()
            for buf in list(self._buffers.values()):
                free_allocations(d, buf._allocations())
                buf._handle = buf._memory = buf._mapped = None
            for pipe in list(self._pipelines):
                vk.vkDestroyPipeline(d, pipe._handle, None)
                pipe._handle = None
            self._destroy_programs()
            for frame in self._frames:
                vk.vkDestroyFence(d, frame.fence, None)
            if self._cmd_pool is not None:
                vk.vkDestroyCommandPool(d, self._cmd_pool, None)   # frees the command buffers
            if self._pipeline_cache is not None:
                pipeline_cache.save(d, self._pipeline_cache, self._props, self._pipeline_cache_dir)
                vk.vkDestroyPipelineCache(d, self._pipeline_cache, None)
            vk.vkDestroyDevice(d, None)
        self._deferred, self._buffers, self._pipelines, self._frames = [], {}, set(), []
        self._free_frames, self._inflight, self._cmd, self._frame, self._device = [], [], None, None, None
        if self._messenger is not None:
            self._destroy_messenger(self._instance, self._messenger, None)
            self._messenger = None
        if self._instance is not None:
            vk.vkDestroyInstance(self._instance, None)
            self._instance = None
        self._collector.detach()   # after vkDestroyInstance: the chained messenger reports until then

    def __repr__(self):
        name = getattr(self, "_info", {}).get("name", "?")
        return f"<VulkanDevice {name!r}{' closed' if self._closed else ''}>"

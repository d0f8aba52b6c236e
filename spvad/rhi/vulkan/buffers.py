"""Vulkan buffers: persistently mapped host-visible storage buffers, and addressed buffers for arrays past
maxStorageBufferRange.

An addressed buffer is device memory in blocks (all but the last of the device's `address_chunk_bytes`, a
power of two at most maxMemoryAllocationSize) that kernels reach through buffer device addresses
(VK_KHR_buffer_device_address, SPIR-V PhysicalStorageBuffer64): its descriptor binds a small table instead
of the data, `u32 last; u32 log2_chunk; u64 block[k]` = the index of its last 32-bit word, log2 of the
block size and each block's address (spirv/lower_addressed.py reads it). Transfers and host views go block
by block (`segments`, `pieces`).
"""
import numpy as np

from ...errors import DeviceError
from ..base import Buffer
from .vkapi import NULL, check, ffi, lib, result_name, vk

STORAGE_USAGE = (lib.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | lib.VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 lib.VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                 lib.VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT)   # launch_indirect's arguments
ADDRESS_USAGE = STORAGE_USAGE | lib.VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT
TABLE_HEADER_BYTES = 8   # u32 last word index, u32 log2 of the block bytes, then the u64 block addresses


class VulkanBuffer(Buffer):
    """A persistently mapped STORAGE_BUFFER; `_uid` keys the descriptor-set cache (handles can be
    reused by the driver after a free, uids never are)."""

    def __init__(self, device, uid, nbytes, size, handle, memory, mapped):
        self._device, self._uid, self.nbytes, self._size = device, uid, nbytes, size
        self._handle, self._memory, self._mapped = handle, memory, mapped

    def view(self, dtype):
        if self._handle is None:
            raise DeviceError("view of a released buffer")
        dtype = np.dtype(dtype)
        return np.frombuffer(self._mapped, dtype=dtype, count=self.nbytes // dtype.itemsize)

    def segments(self, offset, nbytes):
        """[(VkBuffer, offset in it, bytes)] covering `nbytes` bytes from `offset`."""
        return [(self._handle, offset, nbytes)]

    def _allocations(self):
        return [(self._handle, self._memory)]

    @property
    def released(self):
        return self._handle is None

    def release(self):
        if self._handle is not None:
            self._device._release_buffer(self)

    def __repr__(self):
        return f"<VulkanBuffer #{self._uid} {self.nbytes} bytes" \
               f"{' released' if self._handle is None else ''}>"


class AddressedBuffer(VulkanBuffer):
    """Memory in blocks of `chunk` bytes reached by address; `_handle` is its table's (what descriptors bind)."""
    addressed = True

    def __init__(self, device, uid, nbytes, table, blocks, chunk):
        handle, memory, mapped, size = table
        super().__init__(device, uid, nbytes, size, handle, memory, mapped)
        self._blocks, self.chunk = blocks, chunk   # [(VkBuffer, VkDeviceMemory, mapping, bytes)]

    @property
    def blocks(self):
        return len(self._blocks)

    def view(self, dtype):
        if len(self._blocks) > 1:
            raise DeviceError(f"a buffer of {self.nbytes:,} bytes in {len(self._blocks)} memory blocks has no "
                              "single host view; read it by pieces")
        return self.pieces(dtype)[0]

    def pieces(self, dtype):
        if self._handle is None:
            raise DeviceError("view of a released buffer")
        dtype = np.dtype(dtype)
        out, left = [], self.nbytes
        for _, _, mapped, size in self._blocks:
            used = min(size, left)
            out.append(np.frombuffer(mapped, dtype=dtype, count=used // dtype.itemsize))
            left -= used
        return out

    def segments(self, offset, nbytes):
        out, end = [], offset + nbytes
        for k, (handle, _, _, size) in enumerate(self._blocks):
            lo, hi = max(offset, k * self.chunk), min(end, k * self.chunk + size)
            if lo < hi:
                out.append((handle, lo - k * self.chunk, hi - lo))
        return out

    def _allocations(self):
        return [(self._handle, self._memory)] + [(b[0], b[1]) for b in self._blocks]

    def __repr__(self):
        return f"<AddressedBuffer #{self._uid} {self.nbytes} bytes in {len(self._blocks)} blocks" \
               f"{' released' if self._handle is None else ''}>"


def free_allocations(d, allocations):
    for handle, memory in allocations:
        vk.vkUnmapMemory(d, memory)
        vk.vkDestroyBuffer(d, handle, None)
        vk.vkFreeMemory(d, memory, None)


def host_available_bytes():
    """MemAvailable of /proc/meminfo (Linux), else None (unknown: the allocation itself decides)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def chunk_bytes(max_allocation, max_buffer):
    """Bytes of each block of an addressed buffer: the largest power of two a block may hold (Vulkan
    guarantees 2**30 for both limits), so a kernel splits an index with a shift and a mask."""
    return 1 << (min(max_allocation, max_buffer).bit_length() - 1)


class BufferMixin:
    """create_buffer / release for VulkanDevice. Expects `_device`, `_info`, `_memory_types`, `_buffers`,
    `_next_uid`, `address_chunk_bytes`, `_check_open()`, `_retire(fn)`."""

    def create_buffer(self, nbytes):
        """A plain storage buffer, or past maxStorageBufferRange (or the largest allocation, NVIDIA's being
        a little smaller) an addressed one: kernels bind its table."""
        self._check_open()
        nbytes = int(nbytes)
        size = max(16, (nbytes + 15) & ~15)   # never zero-sized; whole words for the shaders
        limits = self._info["limits"]
        if size > min(limits["max_storage_buffer_range"], limits["max_memory_allocation_size"]):
            return self._create_addressed(nbytes, size)
        return self._register(lambda uid: VulkanBuffer(self, uid, nbytes, size, *self._allocate(size)))

    def _create_addressed(self, nbytes, size):
        chunk = self.address_chunk_bytes
        if not self._info["features"]["buffer_device_address"]:
            limit = self._info["limits"]["max_storage_buffer_range"]
            raise DeviceError(f"a buffer of {nbytes:,} bytes is past this device's maxStorageBufferRange ({limit:,} "
                              "bytes), and the device lacks bufferDeviceAddress, which spvad uses beyond it")
        self._check_room(nbytes, size)
        blocks, table, table_bytes = [], None, TABLE_HEADER_BYTES + 8 * -(-size // chunk)
        try:
            for start in range(0, size, chunk):
                block = min(chunk, size - start)
                blocks.append(self._allocate(block, ADDRESS_USAGE) + (block,))
            table = self._allocate(table_bytes)
            np.frombuffer(table[2], np.uint32, count=2)[:] = nbytes // 4 - 1, chunk.bit_length() - 1
            np.frombuffer(table[2], np.uint64)[1:] = [self._address_of(b[0]) for b in blocks]
        except BaseException:
            free_allocations(self._device, [b[:2] for b in blocks] + ([table[:2]] if table else []))
            raise
        return self._register(lambda uid: AddressedBuffer(self, uid, nbytes, table + (table_bytes,), blocks, chunk))

    def _check_room(self, nbytes, size):
        """DeviceError unless the memory the device has can hold `size` more bytes: its largest heap, or for a
        CPU driver (lavapipe, which allocates past its heap) the host's available memory."""
        cpu = self._info["device_type"] == "cpu"
        room = host_available_bytes() if cpu else self._largest_heap
        if room is not None and size > room:
            where = "the host has" if cpu else f"{self._info['name']}'s largest memory heap holds"
            raise DeviceError(f"an array of {nbytes:,} bytes does not fit in memory: {where} {room:,} bytes")

    def _address_of(self, handle):
        # the package's wrapper returns its argument, not the address: the loader's function itself
        info = vk.VkBufferDeviceAddressInfo(buffer=handle)
        return lib.vkGetBufferDeviceAddress(self._device, ffi.addressof(info))

    def _register(self, make):
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        buf = self._buffers[uid] = make(uid)
        return buf

    def _allocate(self, size, usage=STORAGE_USAGE):
        """(VkBuffer, VkDeviceMemory, zeroed mapping) of `size` bytes of host-visible memory. Raw cffi structs and
        calls: the `vulkan` package's wrappers cost ~0.1 ms of every array's creation."""
        d, out = self._device, ffi.new("VkBuffer *")
        check(lib.vkCreateBuffer(d, ffi.new("VkBufferCreateInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": size, "usage": usage,
            "sharingMode": lib.VK_SHARING_MODE_EXCLUSIVE}), NULL, out), "vkCreateBuffer",
            context=f"creating a buffer of {size} bytes: ")
        handle, req = out[0], ffi.new("VkMemoryRequirements *")
        lib.vkGetBufferMemoryRequirements(d, handle, req)
        flags = ffi.new("VkMemoryAllocateFlagsInfo *", {
            "sType": lib.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
            "flags": lib.VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT}) \
            if usage & lib.VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT else NULL
        memory, result = ffi.new("VkDeviceMemory *"), None
        for t in (t for t in self._memory_types if req.memoryTypeBits & (1 << t)):
            # a smaller device-local+host-visible heap (BAR) may be full: try the next type
            result = lib.vkAllocateMemory(d, ffi.new("VkMemoryAllocateInfo *", {
                "sType": lib.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "pNext": flags,
                "allocationSize": req.size, "memoryTypeIndex": t}), NULL, memory)
            if result >= 0:
                break
        if result is None or result < 0:
            lib.vkDestroyBuffer(d, handle, NULL)
            raise DeviceError(f"cannot allocate {req.size:,} bytes of host-visible memory on {self._info['name']}"
                              f" ({result_name(result) if result is not None else 'no suitable memory type'})")
        memory, mapped = memory[0], ffi.new("void **")
        check(lib.vkBindBufferMemory(d, handle, memory, 0), "vkBindBufferMemory")
        check(lib.vkMapMemory(d, memory, 0, req.size, 0, mapped), "vkMapMemory")
        mapped = ffi.buffer(mapped[0], req.size)   # numpy views it in place
        np.frombuffer(mapped, np.uint8).fill(0)    # Vulkan does not zero allocations
        return handle, memory, mapped

    def _release_buffer(self, buf):
        allocations, d = buf._allocations(), self._device
        buf._handle = buf._memory = buf._mapped = None
        self._buffers.pop(buf._uid, None)
        self._forget_buffer(buf._uid)
        self._retire(lambda: free_allocations(d, allocations))

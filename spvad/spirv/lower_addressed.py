"""Arrays reached by address: the bindings that hold an addressed buffer (an array past the device's
maxStorageBufferRange, rhi/vulkan/buffers.py) are its table `u32 last; u32 log2_chunk; u64 block[]` (the
index of the array's last 32-bit word; log2 of the bytes of every block but the last; their addresses).
Element i of an array of `T` is element i & mask of block i >> shift, through a PhysicalStorageBuffer64
pointer; the device picks the block size, so the module is the same on every device.

Such pointers have no robust buffer access, so the index is first clamped to the last element: a stray
index reads or writes inside the array, never other memory (debug=True reports it, lower_bounds.py).
Most such arrays are one block: a launch says which bindings hold several (`several_blocks` marks in the
addressed set: a module variant of their own), and the others' block address is read once, at the top of main,
not per access. lavapipe reads a table entry lane by lane: per access, that made the batch workload's kernels on
270 MB arrays ~30% slower than on plain bindings (benchmarks/workloads/batch.py).
Small arrays never come here: their modules are what they were without this file.
"""
from .. import types as T
from .spec import GLSL, AddressingModel, Capability, Decoration, MemoryAccess, MemoryModel, Op, StorageClass

EXTENSION = "SPV_KHR_physical_storage_buffer"


def several_blocks(key):
    """The mark, in a lowering's set of addressed bindings, of binding `key` holding memory in several blocks."""
    return ("several blocks",) + tuple(key)


class AddressTables:
    """The address tables of one module: declared with Memory's buffers, their headers read at the top of
    main (`load_limits`), and the element pointers of global accesses."""

    def __init__(self, L, mem):
        self.L, self.mem = L, mem
        self.tables = {}   # binding key -> (table variable, element type id, PSB pointer-to-block type id)
        self.limits = {}   # binding key -> u32 ids (last element index, log2 elements per block, mask)
        self.first = {}    # binding key of one block -> its block's pointer

    def declare(self, key, elem, binding, name):
        """The table variable of binding `key` (elements of storage type `elem`)."""
        L, m = self.L, self.L.m
        if not L.features.get("buffer_device_address"):
            raise L.error(f"array {name} is past this device's largest storage buffer binding and the device "
                          "has no buffer device addresses")
        m.capability(Capability.PhysicalStorageBufferAddresses)
        m.extension(EXTENSION)
        m.memory_model(AddressingModel.PhysicalStorageBuffer64, MemoryModel.GLSL450)
        u32 = m.type_int(32, False)
        block = m.type_struct([self.mem.runtime_array(elem)], unique=True)   # struct { T data[]; }
        m.decorate(block, Decoration.Block)
        m.member_decorate(block, 0, Decoration.Offset, 0)
        block_ptr = m.type_pointer(StorageClass.PhysicalStorageBuffer, block)
        pointers = m.type_runtime_array(block_ptr)
        m.decorate(pointers, Decoration.ArrayStride, 8)
        table = m.type_struct([u32, u32, pointers], unique=True)
        m.decorate(table, Decoration.Block)
        for member, offset in ((0, 0), (1, 4), (2, 8)):
            m.member_decorate(table, member, Decoration.Offset, offset)
            m.member_decorate(table, member, Decoration.NonWritable)
        var = m.variable(m.type_pointer(StorageClass.StorageBuffer, table), StorageClass.StorageBuffer)
        m.decorate(var, Decoration.DescriptorSet, 0)
        m.decorate(var, Decoration.Binding, binding)
        m.name(var, name + "_addresses")
        self.tables[key] = (var, elem, block_ptr)
        return var

    def item_bytes(self, elem):
        return self.L.m.type_info(elem)[1] // 8

    def load_limits(self):
        """At the top of main, per table: its last element (last word >> log2(words per element)); for an array
        in several blocks, log2 of the elements per block (log2_chunk - log2(element bytes)) and the mask of an
        index within a block; for an array of one block, its block's address."""
        L, f = self.L, self.L.f
        u32 = L.m.type_int(32, False)
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, u32)
        def word(var, k):
            return f.emit(Op.OpLoad, u32, f.emit(Op.OpAccessChain, ptr_t, var, L.i32c(k)))
        for key, (var, elem, block_ptr) in self.tables.items():
            log2_item = self.item_bytes(elem).bit_length() - 1
            last = f.emit(Op.OpShiftRightLogical, u32, word(var, 0), L.u32c(log2_item - 2))
            if several_blocks(key) in self.mem.lay.addressed:
                shift = f.emit(Op.OpISub, u32, word(var, 1), L.u32c(log2_item))
                mask = f.emit(Op.OpISub, u32, f.emit(Op.OpShiftLeftLogical, u32, L.u32c(1), shift), L.u32c(1))
                self.limits[key] = (last, shift, mask)
            else:
                self.limits[key] = (last, None, None)
                self.first[key] = f.emit(Op.OpLoad, block_ptr, self._slot(var, block_ptr, L.u32c(0)))

    def element_ptr(self, key, idx):
        """PhysicalStorageBuffer pointer to element `idx` (an i32 id) of the array bound at `key`."""
        L, f, m = self.L, self.L.f, self.L.m
        var, elem, block_ptr = self.tables[key]
        last, shift, mask = self.limits[key]
        u32 = m.type_int(32, False)
        i = L.glsl(GLSL.UMin, T.u32, L.emit(Op.OpBitcast, T.u32, idx), last)
        if key in self.first:   # one block: i is within it
            base, within = self.first[key], i
        else:
            block = f.emit(Op.OpShiftRightLogical, u32, i, shift)
            base = f.emit(Op.OpLoad, block_ptr, self._slot(var, block_ptr, block))
            within = f.emit(Op.OpBitwiseAnd, u32, i, mask)
        return f.emit(Op.OpAccessChain, m.type_pointer(StorageClass.PhysicalStorageBuffer, elem), base, L.i32c(0),
                      within)

    def _slot(self, var, block_ptr, block):
        """The table's entry of `block` (a u32 id): a pointer to its block's address."""
        L = self.L
        return L.f.emit(Op.OpAccessChain, L.m.type_pointer(StorageClass.StorageBuffer, block_ptr), var, L.i32c(2),
                        block)

    def access(self, key):
        """Memory operands of a plain load or store through such a pointer (SPIR-V requires the alignment)."""
        if key not in self.tables:
            return ()
        return (MemoryAccess.Aligned, self.item_bytes(self.tables[key][1]))

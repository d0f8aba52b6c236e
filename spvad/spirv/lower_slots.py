"""Vector and matrix locals indexed at run time (nodes.SlotSelect / SlotStore, ir/slot_arrays.py): each group
of slots becomes one Function-scope array, its slots the array's elements, so a runtime index costs one
indexed load or store instead of a select per component. The array has one element more than the group:
a store whose index is out of range writes there (nothing the kernel reads), a load reads element 0 —
the semantics of the select form derivative kernels use."""
from .. import types as T
from ..ir.slot_arrays import slot_groups
from .spec import Op, StorageClass


class SlotArrays:
    def __init__(self, L, task):
        self.L = L
        self.member = {}   # slot -> (group, position)
        self.arrays = {}   # group -> Function array variable
        for group in slot_groups(task.body):
            for j, slot in enumerate(group):
                if self.member.setdefault(slot, (group, j)) != (group, j):
                    raise L.error(f"slot {slot.name or slot.id} belongs to two slot groups")

    def pointer(self, slot):
        """The Function pointer standing for `slot` (an element of its group's array), or None when the slot
        is in no group. Emitted where the slot's Alloca runs, which comes before every use of it."""
        place = self.member.get(slot)
        if place is None:
            return None
        group, j = place
        return self._element(group, self.L.i32c(j))

    def load(self, s):
        """slots[index], or slots[0] out of range."""
        L = self.L
        index = L.emit(Op.OpSelect, T.i32, self._in_range(s), L.value(s.index), L.i32c(0))
        return L.emit(Op.OpLoad, s.dtype, self._element(s.slots, index))

    def store(self, s):
        """slots[index] = value, into the spare element out of range."""
        L = self.L
        index = L.emit(Op.OpSelect, T.i32, self._in_range(s), L.value(s.index), L.i32c(len(s.slots)))
        L.f.emit_void(Op.OpStore, self._element(s.slots, index), L.value(s.value))

    def _in_range(self, s):
        L = self.L
        as_u32 = L.emit(Op.OpBitcast, T.u32, L.value(s.index))   # negatives become large: one compare
        return L.emit(Op.OpULessThan, T.u1, as_u32, L.u32c(len(s.slots)))

    def _element(self, group, index):
        L, m = self.L, self.L.m
        elem = L.ty(group[0].dtype)
        array = self.arrays.get(group)
        if array is None:
            array = self.arrays[group] = L.f.local_variable(
                m.type_pointer(StorageClass.Function, m.type_array(elem, len(group) + 1)))
            name = group[0].name.rsplit("_", 1)[0] if group[0].name else ""
            if name:
                m.name(array, name)
        return L.f.emit(Op.OpAccessChain, m.type_pointer(StorageClass.Function, elem), array, index)

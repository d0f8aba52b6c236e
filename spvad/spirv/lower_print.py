"""Lowering of `Print` statements: append one record to the print buffer with plain stores and atomics (no
debug-printf extension, so it runs on any Vulkan driver and through SPIRV-Cross on Metal).

    cur = atomic load cursor
    if cur + size <= capacity:            (a full buffer stops growing its cursor, so it never wraps)
        start = atomic add cursor, size
        won = start + size <= capacity
    if won: store id, value words at HEADER_WORDS + start ..
    else:   atomic add dropped, 1
Layout and the id: ir/print_format.py. Within a thread, records follow program order (one cursor).
"""
from .. import types as T
from ..ir.print_format import CAPACITY, CURSOR, DROPPED, HEADER_WORDS, id_of, record_words
from .spec import Op, SelectionControl, StorageClass


def lower_print(L, s):
    """Emit the record of Print `s` (L: the _Lowerer; the buffer variable is L.mem.prints)."""
    f, mem, u32 = L.f, L.mem, L.mem.u32
    words = [L.u32c(id_of(s))]
    for v in s.values:
        words += _value_words(L, L.value(v), v.dtype)
    size = L.u32c(record_words([v.dtype for v in s.values]))
    cursor, dropped = _word(L, L.i32c(CURSOR)), _word(L, L.i32c(DROPPED))
    cap = f.emit(Op.OpLoad, u32, _word(L, L.i32c(CAPACITY)))
    cur = f.emit(Op.OpAtomicLoad, u32, cursor, mem.scope, mem.relaxed)
    room = L.emit(Op.OpULessThanEqual, T.u1, f.emit(Op.OpIAdd, u32, cur, size), cap)

    pre = L.cur_label
    then, merge = f.new_label(), f.new_label()
    f.emit_void(Op.OpSelectionMerge, merge, SelectionControl.NONE)
    f.emit_void(Op.OpBranchConditional, room, then, merge)
    L.begin(then)
    start = f.emit(Op.OpAtomicIAdd, u32, cursor, mem.scope, mem.relaxed, size)
    fits = L.emit(Op.OpULessThanEqual, T.u1, f.emit(Op.OpIAdd, u32, start, size), cap)
    f.emit_void(Op.OpBranch, merge)
    L.begin(merge)
    won = f.emit(Op.OpPhi, L.ty(T.u1), fits, then, L.const(T.u1, False), pre)
    first = f.emit(Op.OpPhi, u32, start, then, L.u32c(0), pre)

    def store():
        base = f.emit(Op.OpIAdd, u32, first, L.u32c(HEADER_WORDS))
        for k, w in enumerate(words):
            at = f.emit(Op.OpIAdd, u32, base, L.u32c(k)) if k else base
            f.emit_void(Op.OpStore, _word(L, at), w)

    def count_dropped():
        f.emit(Op.OpAtomicIAdd, u32, dropped, mem.scope, mem.relaxed, L.u32c(1))

    L.when(won, store)
    L.when(L.emit(Op.OpLogicalNot, T.u1, won), count_dropped)


def _word(L, index):
    ptr = L.m.type_pointer(StorageClass.StorageBuffer, L.mem.u32)
    return L.f.emit(Op.OpAccessChain, ptr, L.mem.prints, L.i32c(0), index)


def _value_words(L, v, dtype):
    """The u32 words of a value's bits (ir/print_format.value_bits): f64 low word first, bool 0/1."""
    f, u32 = L.f, L.mem.u32
    if dtype.is_bool:
        return [f.emit(Op.OpSelect, u32, v, L.u32c(1), L.u32c(0))]
    if dtype.nbytes == 8:
        pair = f.emit(Op.OpBitcast, L.m.type_vector(u32, 2), v)
        return [f.emit(Op.OpCompositeExtract, u32, pair, k) for k in (0, 1)]
    return [v if dtype == T.u32 else f.emit(Op.OpBitcast, u32, v)]


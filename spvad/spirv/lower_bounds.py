"""Bounds checks of global accesses, compiled in under `sp.init(debug=True)`.

A load, store or atomic of an array with axes checks every index against the shape (0 <= idx < shape[axis]:
one unsigned compare per axis, so a negative index fails too). Out of bounds, a load yields 0 (it reads
element 0, which every buffer has, and selects 0), a store or atomic is skipped, and the thread goes on; its
first violation is kept in Function variables and written to the flag buffer when the thread ends. The
host raises it at the next sync (compiler.CompiledTask.check_flags).

The record (flag words after the loop-cut word; `axes` = the most axes of any checked array of the task):
    bounds_word                        site + 1 of the recorded violation, or 0. Set by compare-exchange
                                       from 0, so one thread wins per launch and later launches keep it
    bounds_word + 1 .. + axes          the winner's index on each axis (i32 bits)
    bounds_word + 1 + axes .. + 2 axes the array's shape on each axis
Only the winner writes the index and shape words, so no two threads race on them.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.interp import access_kind
from .spec import Op, SelectionControl, StorageClass


def checked_accesses(task):
    """The accesses a debug build checks, in walk order (their position is the site number): every global
    access of an array with axes (a 0-d array has one element and nothing to check)."""
    return [s for s in N.walk(task.body) if type(s).ACCESSES_ARRAY and s.array.ndim >= 1]


def site_of(s):
    """What the host needs to report site `s`: (what, array name, field, axes, Loc or None). Plain values
    (and an IR Loc), so lowered tasks stay storable in the compile cache."""
    return access_kind(s), s.array.name, s.field, s.array.ndim, s.loc


def record_words(axes):
    """Flag words the record takes: the site word, then index and shape words."""
    return 1 + 2 * axes


def read_violation(lowered, words):
    """The recorded violation in the flag `words` of a launch of `lowered`: (site, index, shape) with site
    as site_of gives it, or None when every access was in bounds."""
    b = lowered.bounds_word
    if b is None or not words[b]:
        return None
    site = lowered.bounds_sites[int(words[b]) - 1]
    axes, ndim = lowered.bounds_axes, site[3]
    index = tuple(int(v) for v in words[b + 1: b + 1 + ndim].view("i4"))
    shape = tuple(int(v) for v in words[b + 1 + axes: b + 1 + axes + ndim])
    return site, index, shape


class BoundsChecks:
    """Guards the global accesses of one module (L: the _Lowerer, mem: its Memory, lay: its Layout).

    No branch is taken per access to record a violation (a branch in a loop body cost the integrator's
    gradient 1.4x on lavapipe): each check folds "first violation of this thread" into Function variables
    with selects, and the thread writes the flag words once, at its end (`finish`)."""

    def __init__(self, L, mem, layout):
        self.L, self.mem, self.lay = L, mem, layout
        self.first = None   # Function u32: the thread's first violating site + 1, or 0
        self.words = []     # Function u32 each: its index, then shape words (as in the record)

    def declare(self):
        """The per-thread record variables (entry block of main), zero-initialised."""
        if not self.lay.bounds_sites:
            return
        L, m, u32 = self.L, self.L.m, self.mem.u32
        ptr = m.type_pointer(StorageClass.Function, u32)
        self.first = L.f.local_variable(ptr, L.u32c(0))
        m.name(self.first, "oob_site")
        self.words = [L.f.local_variable(ptr, L.u32c(0)) for _ in range(2 * self.lay.bounds_axes)]

    def guarded(self, s, access):
        """`access(ok)` emits the access and returns its value id (None for a store); `ok` is the in-bounds
        condition (None: unchecked). A load reads from a clamped address (Memory.element_ptr: element 0 when
        not ok, which every buffer has) and yields 0 by a select; a store or an atomic runs under `if ok`,
        a skipped atomic's value is 0."""
        site = self.lay.site_index.get(s)
        L, f = self.L, self.L.f
        guard = L.value(s.guard) if isinstance(s, N.GlobalLoad) and s.guard is not None else None
        if site is None:
            if guard is None:
                return access(None)
            return L.emit(Op.OpSelect, s.dtype, guard, access(guard), L.const(s.dtype, 0))
        index = [L.value(i) for i in s.indices]
        shape = [L.push_values[("shape", s.array.index, axis)] for axis in range(s.array.ndim)]
        ok = None
        for i, n in zip(index, shape):   # unsigned: a negative i32 index is a huge u32 one
            inside = L.emit(Op.OpULessThan, T.u1, i, n)
            ok = inside if ok is None else L.emit(Op.OpLogicalAnd, T.u1, ok, inside)
        if guard is not None:   # a guarded load that does not run is no access: nothing to report
            self.note(L.emit(Op.OpLogicalOr, T.u1, ok, L.emit(Op.OpLogicalNot, T.u1, guard)), site, index, shape)
            ok = L.emit(Op.OpLogicalAnd, T.u1, ok, guard)
        else:
            self.note(ok, site, index, shape)
        if isinstance(s, N.GlobalLoad):
            return L.emit(Op.OpSelect, s.dtype, ok, access(ok), L.const(s.dtype, 0))
        pre, then, merge = L.cur_label, f.new_label(), f.new_label()
        f.emit_void(Op.OpSelectionMerge, merge, SelectionControl.NONE)
        f.emit_void(Op.OpBranchConditional, ok, then, merge)
        L.begin(then)
        value = access(None)
        then_end = L.cur_label   # an atomic's compare-exchange loop ends in a block of its own
        f.emit_void(Op.OpBranch, merge)
        L.begin(merge)
        if value is None:
            return None
        return L.emit(Op.OpPhi, s.dtype, value, then_end, L.const(s.dtype, 0), pre)

    def note(self, ok, site, index, shape):
        """fresh = !ok && first == 0; first = fresh ? site + 1 : first; likewise each index and shape word."""
        L, f, u32 = self.L, self.L.f, self.mem.u32
        first = f.emit(Op.OpLoad, u32, self.first)
        fresh = L.emit(Op.OpLogicalAnd, T.u1, L.emit(Op.OpLogicalNot, T.u1, ok),
                       L.emit(Op.OpIEqual, T.u1, first, L.u32c(0)))
        f.emit_void(Op.OpStore, self.first, f.emit(Op.OpSelect, u32, fresh, L.u32c(site + 1), first))
        axes = self.lay.bounds_axes
        pairs = list(zip(self.words, index)) + list(zip(self.words[axes:], shape))
        for var, v in pairs:   # indices and pushed shapes are i32
            word = f.emit(Op.OpBitcast, u32, v)
            f.emit_void(Op.OpStore, var, f.emit(Op.OpSelect, u32, fresh, word, f.emit(Op.OpLoad, u32, var)))

    def finish(self):
        """At the end of the thread: if first != 0 and compare_exchange(flags[bounds_word], 0 -> first) == 0
        (the launch's first record), write the index and shape words."""
        L, f, mem = self.L, self.L.f, self.mem
        if self.first is None or not f.in_block:
            return
        first = f.emit(Op.OpLoad, mem.u32, self.first)

        def record():
            old = f.emit(Op.OpAtomicCompareExchange, mem.u32, self.word(self.lay.bounds_word), mem.scope,
                         mem.relaxed, mem.relaxed, first, L.u32c(0))
            L.when(L.emit(Op.OpIEqual, T.u1, old, L.u32c(0)), write)

        def write():
            for k, var in enumerate(self.words):
                f.emit_void(Op.OpStore, self.word(self.lay.bounds_word + 1 + k), f.emit(Op.OpLoad, mem.u32, var))
        L.when(L.emit(Op.OpINotEqual, T.u1, first, L.u32c(0)), record)

    def word(self, k):
        L = self.L
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, self.mem.u32)
        return L.f.emit(Op.OpAccessChain, ptr_t, self.mem.flag, L.i32c(0), L.i32c(k))

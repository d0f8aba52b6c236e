"""Memory side of the IR -> SPIR-V lowering: the task's layout (bindings, push constants, adstack homes, flag
words), storage buffers, global loads/stores, atomics (native or compare-exchange loops) and the flags.

The flag buffer (u32 words, bound after the arrays when a task has adstacks, checked loops or bounds
checks): word 0 adstack overflow bits, then one depth word per adstack, the loop-cut word, then under
debug the bounds-violation record (lower_bounds.py).

Scalars and the array extents a task reads (axes 1.. of every array it indexes: row-major addressing) are
push constants. Where they would pass Vulkan's guaranteed 128 bytes (many arrays of many dimensions), the
extents move to the runtime's shape table instead (launch/shape_table.py), bound last: the push constants
then hold the scalars and the offset of the launch's extents in that table. Scalars that do not fit either
(many parameters; a vector or matrix by value is one per component) go to the runtime's scalar table
(launch/scalar_table.py), bound after the shape table: the push constants keep those that fit (and the
extents when they fit beside them) and end with the position of the launch's entry in that ring.

Float atomics without a native instruction are compare-exchange loops on the element's bit pattern. The
simplest valid way to get an integer pointer to a float element is to declare that binding's runtime array
with the same-width unsigned integer type (a "word view": u32 for f32, u64 for f64); plain loads and
stores of such a binding bitcast. No two variables alias one binding, which keeps SPIRV-Cross happy.
"""
import functools
import struct
from dataclasses import dataclass, field

from .. import types as T
from ..ir import nodes as N
from .lower_addressed import AddressTables
from .lower_adstack import BUFFER, FUNCTION, HOMES, StackHeap, stack_shapes, stacks_with_adjoint
from .lower_bounds import BoundsChecks, checked_accesses, record_words, site_of
from .lower_coarse import WIDTH, coarsenable
from .lower_ops import ATOMIC_LOWER
from .lower_reduce import reducible_atomics, subgroup_atomic
from .lower_vectors import component, element_width, leading, plan_block, vector_bindings
from .spec import Capability, Decoration, LoopControl, Op, StorageClass

SCOPE_DEVICE, RELAXED = 1, 0
PUSH_FORMAT = {"f32": "f", "f64": "d", "i32": "i", "u32": "I", "u1": "I"}
PUSH_BUDGET_BYTES = 128   # maxPushConstantsSize every Vulkan device offers; past it extents, then scalars, go to tables
SCALAR_RING_WORDS = 1 << 16   # u32 words of the scalar table's ring (a power of two: positions are masked)
MAX_FLAG_BIT = 31   # word 0 has 32 bits: stacks k >= 31 all set bit 31 (their depth words still tell apart)


# ---- layout: what the task uses, decided before anything is emitted -------------------------------------
@dataclass
class Layout:
    bindings: list = field(default_factory=list)      # (array_index, field) in first-use order
    word_view: set = field(default_factory=set)       # bindings declared as integer words (float CAS)
    addressed: frozenset = frozenset()                # bindings holding an address table (lower_addressed.py)
    reduced: frozenset = frozenset()                  # atomics reduced across the subgroup (lower_reduce.py)
    per_thread: int = 1                               # elements per thread (lower_coarse.py: 4, vec4 views)
    vectors: frozenset = frozenset()                  # bindings viewed as vectors (lower_vectors.py)
    push_fields: list = field(default_factory=list)
    push_offsets: list = field(default_factory=list)
    push_format: str = "<"
    push_size: int = 0
    adstacks: list = field(default_factory=list)
    homes: tuple = ()                                 # home of each adstack ("function" / "buffer")
    adjoint_stacks: set = field(default_factory=set)  # adstacks that need an adjoint array
    heap: object = None                               # StackHeap when some stack lives in the buffer
    loop_check: bool = False                          # flag loops the driver cut short (see lower.py)
    site_index: dict = field(default_factory=dict)    # bounds-checked access -> its site number
    bounds_sites: tuple = ()                          # lower_bounds.site_of of each site, in site order
    bounds_axes: int = 0                              # most axes of a checked array (record size)
    prints: bool = False                              # the task prints: the print buffer is bound last
    spilled_shapes: tuple = ()                        # ("shape", a, axis, i32) read from the shape table
    spilled_scalars: tuple = ()                       # ("scalar", i, dtype) read from the scalar table

    @property
    def flag_binding(self):
        return len(self.bindings) if self.adstacks or self.loop_check or self.bounds_sites else None

    @property
    def print_binding(self):
        """Binding of the print buffer (lower_print.py), after the arrays, flags and stack heap; or None."""
        if not self.prints:
            return None
        return len(self.bindings) + (self.flag_binding is not None) + (self.heap is not None)

    @property
    def shape_binding(self):
        """Binding of the shape table (extents past the push-constant budget), after the print buffer; or None."""
        if not self.spilled_shapes:
            return None
        return len(self.bindings) + (self.flag_binding is not None) + (self.heap is not None) + self.prints

    @property
    def scalar_binding(self):
        """Binding of the scalar table (scalars past the push-constant budget), after the shape table; or None."""
        if not self.spilled_scalars:
            return None
        return len(self.bindings) + (self.flag_binding is not None) + (self.heap is not None) + self.prints + (
            self.shape_binding is not None)

    @property
    def loop_cut_word(self):
        """Flag word left non-zero when the driver cut a loop short (lower_loop_cut.py; after the depth words)."""
        return N.FLAG_WORDS_HEADER + len(self.adstacks)

    @property
    def bounds_word(self):
        """First word of the bounds-violation record, or None when nothing is checked."""
        return self.loop_cut_word + 1 if self.bounds_sites else None

    @property
    def flag_words(self):
        """Words of the flag buffer (the layout above; overflow bits, depths and loop-cut word always)."""
        return self.loop_cut_word + 1 + (record_words(self.bounds_axes) if self.bounds_sites else 0)


def needs_cas(s, features):
    """True when AtomicRMW `s` on a float array has no native instruction on this device."""
    dt, native = s.array.dtype, ATOMIC_LOWER[s.op].f32
    if not dt.is_float:
        return False
    return not (dt == T.f32 and native is not None and features.get(native.feature))


def plan_layout(kernel, task, features, homes=None, bounds_check=False, coarsen=False, addressed=frozenset(),
                vectors=True):
    """`homes`: one of "function"/"buffer" per adstack (adstacks_of order); None: all "function".
    `bounds_check`: check every global access against its array's shape (debug builds). `addressed`: the
    (array index, field) bindings that hold an addressed buffer (lower_addressed.py). `vectors`: view
    vector / matrix elements as vectors where they qualify (lower_vectors.py)."""
    lay = Layout(adstacks=N.adstacks_of(task), addressed=frozenset(addressed))
    lay.homes = tuple(homes) if homes is not None else (FUNCTION,) * len(lay.adstacks)
    if len(lay.homes) != len(lay.adstacks) or not set(lay.homes) <= set(HOMES):
        raise ValueError(f"task {task.name}: homes {lay.homes!r} for {len(lay.adstacks)} adstacks")
    lay.adjoint_stacks = stacks_with_adjoint(task)
    lay.reduced = reducible_atomics(task, features)
    lay.per_thread = WIDTH if coarsen and not addressed and coarsenable(task, bounds_check, lay.reduced) else 1
    if vectors and lay.per_thread == 1:
        lay.vectors = vector_bindings(task) - lay.addressed
    lay.prints = any(isinstance(s, N.Print) for s in N.walk(task.body))
    lay.loop_check = bool(features.get("loop_iteration_cap")) and any(N.loops_in(task.body))
    scalars, shapes = set(), set()
    if bounds_check:   # every axis of a checked array's shape is pushed (row-major addressing needs 1..)
        sites = checked_accesses(task)
        lay.site_index = {s: k for k, s in enumerate(sites)}
        lay.bounds_sites = tuple(site_of(s) for s in sites)
        lay.bounds_axes = max((s.array.ndim for s in sites), default=0)
        shapes.update((s.array.index, axis) for s in sites for axis in range(s.array.ndim))
    for s in list(N.walk(task.header)) + list(N.walk(task.body)):
        if type(s).ACCESSES_ARRAY:
            key = (s.array.index, s.field)
            if key not in lay.bindings:
                lay.bindings.append(key)
            # row-major addressing reads the extents of axes 1..: of the element's row under a vector view
            axes = leading(s.array) if key in lay.vectors else s.array.ndim
            shapes.update((s.array.index, axis) for axis in range(1, axes))
            if isinstance(s, N.AtomicRMW) and needs_cas(s, features):
                lay.word_view.add(key)
        elif isinstance(s, N.ArrayShape):
            shapes.add((s.array.index, s.axis))
        elif isinstance(s, N.ScalarArg):
            scalars.add(s.param.index)
    # 8-byte scalars first, so no padding is ever needed; then 4-byte scalars; then shapes.
    by_index = {p.index: p for p in kernel.scalars}
    wide = [i for i in sorted(scalars) if by_index[i].dtype.nbytes == 8]
    narrow = [i for i in sorted(scalars) if by_index[i].dtype.nbytes != 8]
    lay.push_fields = [("scalar", i, by_index[i].dtype) for i in wide + narrow]
    extents = [("shape", a, axis, T.i32) for a, axis in sorted(shapes)]
    if _nbytes(lay.push_fields) + 4 * bool(extents) > PUSH_BUDGET_BYTES:   # too many scalars: spill the last
        if _nbytes(extents) + 4 > PUSH_BUDGET_BYTES:
            lay.spilled_shapes, extents = tuple(extents), [("shape_table", T.u32)]
        room, keep = PUSH_BUDGET_BYTES - _nbytes(extents) - 4, 0
        while _nbytes(lay.push_fields[:keep + 1]) <= room and keep < len(lay.push_fields):
            keep += 1
        lay.spilled_scalars, lay.push_fields = tuple(lay.push_fields[keep:]), lay.push_fields[:keep]
        extents = extents + [("scalar_table", T.u32)]
    elif extents and sum(pf[-1].nbytes for pf in lay.push_fields + extents) > PUSH_BUDGET_BYTES:
        lay.spilled_shapes, extents = tuple(extents), [("shape_table", T.u32)]
    lay.push_fields += extents
    offset, fmt = 0, "<"
    for pf in lay.push_fields:
        dt = pf[-1]
        size = 8 if dt == T.f64 else 4
        if offset % size:   # unreachable with the ordering above; kept so the format stays honest
            fmt += f"{size - offset % size}x"
            offset += size - offset % size
        lay.push_offsets.append(offset)
        fmt += PUSH_FORMAT[dt.name]
        offset += size
    lay.push_format, lay.push_size = fmt, offset
    assert struct.calcsize(fmt) == offset
    if BUFFER in lay.homes:   # after the arrays and the flag buffer
        parts = [p for p, h in zip(stack_shapes(task), lay.homes) if h == BUFFER]
        lay.heap = StackHeap(len(lay.bindings) + 1, tuple(parts))
    return lay


def _nbytes(fields):
    return sum(8 if f[-1] == T.f64 else 4 for f in fields)


# ---- declarations ---------------------------------------------------------------------------------------
class Memory:
    """Buffer and push-constant variables of one module, and the per-statement memory lowerings."""

    def __init__(self, L, layout):
        self.L, self.lay = L, layout
        m = L.m
        self.u32, self.i32 = m.type_int(32, False), m.type_int(32, True)
        self.scope, self.relaxed = L.u32c(SCOPE_DEVICE), L.u32c(RELAXED)
        self._structs = {}     # element type id -> Block struct id
        self._strided = set()  # runtime array types already decorated with their ArrayStride
        self.buffers = {}      # (array_index, field) -> (variable id, element type id)
        self.vector_types = {}  # vector-viewed binding -> its vector type id (lower_vectors.py)
        self.plan, self.ready = {}, {}   # lower_vectors.plan_block's actions; values a vector load gave
        self.tables = AddressTables(L, self)
        arrays = {a.index: a for a in L.kernel.arrays}
        for binding, key in enumerate(layout.bindings):
            a = arrays[key[0]]
            elem = self.word_type(a.dtype) if key in layout.word_view else L.storage_ty(a.dtype)
            name = a.name + ("" if key[1] == "primal" else "." + key[1])
            if key in layout.addressed:
                self.buffers[key] = (self.tables.declare(key, elem, binding, name), elem)
                continue
            # a coarsened task views its arrays as vec4s (lower_coarse.py); vector elements as vectors
            declared = elem
            if layout.per_thread > 1:
                declared = m.type_vector(elem, WIDTH)
            elif key in layout.vectors:
                declared = self.vector_types[key] = m.type_vector(elem, element_width(a))
            self.buffers[key] = (self.buffer_variable(declared, binding, name), elem)
        if layout.flag_binding is not None:
            self.flag = self.buffer_variable(self.u32, layout.flag_binding, "adstack_flags")
        if layout.heap is not None:
            self.heap = self.buffer_variable(self.u32, layout.heap.binding, "adstack_heap")
        if layout.print_binding is not None:
            self.prints = self.buffer_variable(self.u32, layout.print_binding, "print_buffer")
        if layout.shape_binding is not None:
            self.shape_table = self.buffer_variable(self.u32, layout.shape_binding, "shape_table")
        if layout.scalar_binding is not None:
            self.scalar_table = self.buffer_variable(self.u32, layout.scalar_binding, "scalar_table")
        self.push_var = None
        if layout.push_fields:
            members = [L.storage_ty(pf[-1]) for pf in layout.push_fields]
            st = m.type_struct(members, unique=True)
            m.decorate(st, Decoration.Block)
            for k, off in enumerate(layout.push_offsets):
                m.member_decorate(st, k, Decoration.Offset, off)
            m.name(st, "Push")
            self.push_var = m.variable(m.type_pointer(StorageClass.PushConstant, st),
                                       StorageClass.PushConstant)
            m.name(self.push_var, "push")
        self.bounds = BoundsChecks(L, self, layout)

    def word_type(self, dt):
        if dt.bits == 64:
            feats = self.L.features   # "int64_atomics" when the device reports it, else "int64"
            if not feats.get("int64_atomics", feats.get("int64")):
                raise self.L.error("f64 atomics need 64-bit integer atomics, which the device lacks")
            self.L.m.capability(Capability.Int64Atomics)
        return self.L.m.type_int(dt.bits, False)

    def runtime_array(self, elem):
        """`elem[]`, decorated with its stride once (buffers and address-table blocks share it)."""
        m = self.L.m
        rta = m.type_runtime_array(elem)
        if rta not in self._strided:
            self._strided.add(rta)
            info = m.type_info(elem)   # a scalar's bit width, or a vector's (component type, count)
            stride = info[2] * m.type_info(info[1])[1] // 8 if info[0] == "vector" else info[1] // 8
            m.decorate(rta, Decoration.ArrayStride, stride)
        return rta

    def buffer_variable(self, elem, binding, name):
        m = self.L.m
        st = self._structs.get(elem)
        if st is None:
            st = m.type_struct([self.runtime_array(elem)], unique=True)
            m.decorate(st, Decoration.Block)
            m.member_decorate(st, 0, Decoration.Offset, 0)
            self._structs[elem] = st
        var = m.variable(m.type_pointer(StorageClass.StorageBuffer, st), StorageClass.StorageBuffer)
        m.decorate(var, Decoration.DescriptorSet, 0)
        m.decorate(var, Decoration.Binding, binding)
        m.name(var, name)
        return var

    def load_launch_values(self):
        """At the top of main: every pushed field, loaded once ({("scalar", i) | ("shape", a, axis): id}), and
        the address tables' limits."""
        L, out = self.L, {}
        self.tables.load_limits()
        for k, pf in enumerate(self.lay.push_fields):
            dt = pf[-1]
            st = L.storage_ty(dt)
            ptr = L.f.emit(Op.OpAccessChain, L.m.type_pointer(StorageClass.PushConstant, st), self.push_var,
                           L.i32c(k))
            v = L.f.emit(Op.OpLoad, st, ptr)
            out[pf[:-1]] = L.emit(Op.OpINotEqual, T.u1, v, L.u32c(0)) if dt.is_bool else v
        for k, pf in enumerate(self.lay.spilled_shapes):   # the launch's extents, from its table entry
            word_t = L.m.type_pointer(StorageClass.StorageBuffer, self.u32)
            at = L.f.emit(Op.OpIAdd, self.u32, out[("shape_table",)], L.u32c(k))
            word = L.f.emit(Op.OpLoad, self.u32, L.f.emit(Op.OpAccessChain, word_t, self.shape_table, L.i32c(0), at))
            out[pf[:-1]] = L.emit(Op.OpBitcast, T.i32, word)
        if self.lay.spilled_scalars:   # the launch's entry in the scalar table's ring (u32 words, low first)
            word_t, at = L.m.type_pointer(StorageClass.StorageBuffer, self.u32), 0
            base = L.f.emit(Op.OpBitwiseAnd, self.u32, out[("scalar_table",)], L.u32c(SCALAR_RING_WORDS - 1))
            for pf in self.lay.spilled_scalars:
                n, dt = 2 if pf[-1] == T.f64 else 1, pf[-1]
                v = [L.f.emit(Op.OpLoad, self.u32, L.f.emit(Op.OpAccessChain, word_t, self.scalar_table, L.i32c(0),
                                                            L.f.emit(Op.OpIAdd, self.u32, base, L.u32c(at + w))))
                     for w in range(n)]
                v, at = v[0] if n == 1 else L.f.emit(Op.OpCompositeConstruct, L.m.type_vector(self.u32, 2), *v), at + n
                out[pf[:-1]] = L.emit(Op.OpINotEqual, T.u1, v, L.u32c(0)) if dt.is_bool else \
                    v if dt == T.u32 else L.emit(Op.OpBitcast, dt, v)
        return out

    # ---- global memory ----
    def row_index(self, s, ok=None):
        """Index of the element `s` (GlobalLoad/GlobalStore/AtomicRMW) addresses in its binding's runtime
        array, row-major (over the element's leading axes under a vector view); 0 where the bounds-check
        condition `ok` (when given) is false."""
        L = self.L
        axes = leading(s.array) if (s.array.index, s.field) in self.lay.vectors else s.array.ndim
        idx = L.value(s.indices[0]) if axes else L.i32c(0)   # a 0-d array has one element
        for axis in range(1, axes):
            dim = L.push_values[("shape", s.array.index, axis)]
            idx = L.f.emit(Op.OpIAdd, self.i32, L.f.emit(Op.OpIMul, self.i32, idx, dim),
                           L.value(s.indices[axis]))
        if ok is not None:
            idx = L.f.emit(Op.OpSelect, self.i32, ok, idx, L.i32c(0))
        return idx

    def element_ptr(self, s, ok=None):
        """(pointer to the scalar `s` addresses, its storage type); see row_index."""
        L = self.L
        key = (s.array.index, s.field)
        var, elem = self.buffers[key]
        idx = self.row_index(s, ok)
        if key in self.lay.addressed:
            return self.tables.element_ptr(key, idx), elem
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, elem)
        if key in self.vector_types:   # a component of the element's vector
            return L.f.emit(Op.OpAccessChain, ptr_t, var, L.i32c(0), idx, L.i32c(component(s))), elem
        if self.lay.per_thread > 1:   # a component of the vec4 view: [idx / 4][idx % 4]
            quad = L.f.emit(Op.OpShiftRightArithmetic, self.i32, idx, L.i32c(2))
            lane = L.f.emit(Op.OpBitwiseAnd, self.i32, idx, L.i32c(3))
            return L.f.emit(Op.OpAccessChain, ptr_t, var, L.i32c(0), quad, lane), elem
        return L.f.emit(Op.OpAccessChain, ptr_t, var, L.i32c(0), idx), elem

    def vector_ptr(self, s, quad):
        """(pointer to vec4 number `quad` of `s`'s array, the vec4 type, the scalar storage type)."""
        L = self.L
        var, elem = self.buffers[(s.array.index, s.field)]
        vec = L.m.type_vector(elem, WIDTH)
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, vec)
        return L.f.emit(Op.OpAccessChain, ptr_t, var, L.i32c(0), quad), vec, elem

    def from_storage(self, dt, elem, v):
        """A loaded element (storage type `elem`) as a value of `dt`."""
        L = self.L
        if dt.is_bool:
            return L.emit(Op.OpINotEqual, T.u1, v, L.u32c(0))
        if elem != L.ty(dt):
            return L.emit(Op.OpBitcast, dt, v)
        return v

    def to_storage(self, dt, elem, v):
        L = self.L
        if dt.is_bool:
            return L.f.emit(Op.OpSelect, self.u32, v, L.u32c(1), L.u32c(0))
        if elem != L.ty(dt):
            return L.f.emit(Op.OpBitcast, elem, v)
        return v

    # Under debug each access is guarded by its bounds check (lower_bounds.py); without, guarded() is access().
    def global_load(self, s):
        action = self.plan.get(s)
        if action is None:
            return self.bounds.guarded(s, lambda ok: self._load(s, ok))
        if action[0] == "load":
            self._load_vector(action[1])
        return self.ready.pop(s)

    def global_store(self, s):
        action = self.plan.get(s)
        if action is None:
            self.bounds.guarded(s, lambda ok: self._store(s))
        elif action[0] == "store":
            self._store_vector(action[1])

    # ---- whole elements of vector-viewed bindings (lower_vectors.py) ----
    def plan_block(self, block):
        """Plan the whole-element loads and stores among `block`'s statements (not under debug: there every
        access keeps its own bounds check)."""
        if self.lay.vectors and not self.lay.site_index:
            self.plan.update(plan_block(block.stmts, self.lay.vectors))

    def _vector_ptr(self, s, ok=None):
        L, key = self.L, (s.array.index, s.field)
        vec = self.vector_types[key]
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, vec)
        return L.f.emit(Op.OpAccessChain, ptr_t, self.buffers[key][0], L.i32c(0), self.row_index(s, ok)), vec

    def _load_vector(self, members):
        """One load of the element `members` (loads of its components, one guard) read; their values."""
        L, first = self.L, members[0]
        elem = self.buffers[(first.array.index, first.field)][1]
        guard = L.value(first.guard) if first.guard is not None else None
        ptr, vec = self._vector_ptr(first, guard)   # element 0 where the guard is false, as _load does
        v = L.f.emit(Op.OpLoad, vec, ptr)
        for m in members:
            x = self.from_storage(m.dtype, elem, L.f.emit(Op.OpCompositeExtract, elem, v, component(m)))
            self.ready[m] = x if guard is None else L.emit(Op.OpSelect, m.dtype, guard, x, L.const(m.dtype, 0))

    def _store_vector(self, members):
        """One store of the element `members` (a store of each of its components) write."""
        L, first = self.L, members[0]
        elem = self.buffers[(first.array.index, first.field)][1]
        ptr, vec = self._vector_ptr(first)
        parts = sorted((component(m), self.to_storage(m.array.dtype, elem, L.value(m.value))) for m in members)
        L.f.emit_void(Op.OpStore, ptr, L.f.emit(Op.OpCompositeConstruct, vec, *(p for _, p in parts)))

    def atomic(self, s):
        if s in self.lay.reduced:   # one atomic per subgroup, of their values' reduction (lower_reduce.py)
            return self.bounds.guarded(s, lambda ok: subgroup_atomic(self.L, s, lambda v: self.plain_atomic(s, v)))
        return self.bounds.guarded(s, lambda ok: self.plain_atomic(s))

    def _load(self, s, ok=None):
        ptr, elem = self.element_ptr(s, ok)
        access = self.tables.access((s.array.index, s.field))
        return self.from_storage(s.dtype, elem, self.L.f.emit(Op.OpLoad, elem, ptr, *access))

    def _store(self, s):
        ptr, elem = self.element_ptr(s)
        value = self.to_storage(s.array.dtype, elem, self.L.value(s.value))
        self.L.f.emit_void(Op.OpStore, ptr, value, *self.tables.access((s.array.index, s.field)))

    def plain_atomic(self, s, v=None):
        """The atomic of `s`, with value `v` (an id; default: the statement's own value)."""
        L, dt, row = self.L, s.array.dtype, ATOMIC_LOWER[s.op]
        ptr, elem = self.element_ptr(s)
        v = L.value(s.value) if v is None else v
        if dt.is_int:
            return L.f.emit(row.i if dt.kind == "i" else row.u, elem, ptr, self.scope, self.relaxed, v)
        if elem == L.ty(dt):   # native f32 instruction (a word-view binding takes CAS for all its atomics)
            L.m.extension(row.f32.extension)
            L.m.capability(row.f32.capability)
            return L.f.emit(row.f32.opcode, elem, ptr, self.scope, self.relaxed, v)
        return self.cas_loop(row.combine, dt, ptr, elem, v)

    def cas_loop(self, combine, dt, ptr, word, v):
        """old = *ptr; loop { new = combine(old, v); seen = cmpxchg(ptr, old -> new); if seen == old break;
        old = seen }. Returns the old value as `dt`."""
        L, f = self.L, self.L.f
        pre = L.cur_label
        header, body, cont, merge = (f.new_label() for _ in range(4))
        first = f.emit(Op.OpAtomicLoad, word, ptr, self.scope, self.relaxed)
        f.emit_void(Op.OpBranch, header)
        L.begin(header)
        seen = L.m.new_id()
        cur = f.emit(Op.OpPhi, word, first, pre, seen, cont)
        f.emit_void(Op.OpLoopMerge, merge, cont, LoopControl.NONE)
        f.emit_void(Op.OpBranch, body)
        L.begin(body)
        old = L.emit(Op.OpBitcast, dt, cur)
        new = combine(L, dt, old, v)
        f.emit(Op.OpAtomicCompareExchange, word, ptr, self.scope, self.relaxed, self.relaxed,
               L.f.emit(Op.OpBitcast, word, new), cur, result_id=seen)
        f.emit_void(Op.OpBranchConditional, L.emit(Op.OpIEqual, T.u1, seen, cur), merge, cont)
        L.begin(cont)
        f.emit_void(Op.OpBranch, header)
        L.begin(merge)
        return old

    def flag_thread_end(self, overflows, loop_cut):
        """At the thread's end, one branch taken only on error: sets bit k of flag word 0 and raises depth word
        k for each overflowed stack (`overflows`: (k, overflowed, depth)), and the loop-cut word when
        `loop_cut` (lavapipe's loop cap cut a loop: lower_loop_cut.py; None: not checked). Atomics: threads
        race here; with several conditions each operand is selected (an OR of 0 and a max with 0 change
        nothing)."""
        L, f, u32 = self.L, self.L.f, self.u32
        conds = [over for _, over, _ in overflows] + ([loop_cut] if loop_cut is not None else [])
        if not conds:
            return
        pick = (lambda cond, v: v) if len(conds) == 1 else \
            (lambda cond, v: f.emit(Op.OpSelect, u32, cond, v, L.u32c(0)))
        word_t = L.m.type_pointer(StorageClass.StorageBuffer, u32)

        def word(i):
            return f.emit(Op.OpAccessChain, word_t, self.flag, L.i32c(0), L.i32c(i))

        def flag():
            if overflows:
                bits = functools.reduce(lambda a, b: f.emit(Op.OpBitwiseOr, u32, a, b),
                                        [pick(over, L.u32c(1 << min(k, MAX_FLAG_BIT))) for k, over, _ in overflows])
                f.emit(Op.OpAtomicOr, u32, word(0), self.scope, self.relaxed, bits)
            for k, over, depth in overflows:
                f.emit(Op.OpAtomicUMax, u32, word(N.FLAG_WORDS_HEADER + k), self.scope, self.relaxed,
                       pick(over, depth))
            if loop_cut is not None:
                f.emit(Op.OpAtomicOr, u32, word(self.lay.loop_cut_word), self.scope, self.relaxed,
                       pick(loop_cut, L.u32c(1)))

        L.when(functools.reduce(lambda a, b: L.emit(Op.OpLogicalOr, T.u1, a, b), conds), flag)

"""Adstack lowering, in one of two homes per stack: Function-scope arrays ("function": fastest, but drivers
cap private memory and lavapipe compiles long arrays slowly) or per-thread slices of one storage buffer
sized at launch ("buffer"). Both keep the counter in a Function-scope u32 and share the semantics of
ir/interp.py's _AdStack; the launcher picks the homes (`choose_homes`) once capacities are known.
"""
from dataclasses import dataclass
from typing import Optional

from .. import types as T
from ..ir import nodes as N
from .spec import GLSL, Op, StorageClass
from .stack_twins import lockstep_twins

FUNCTION, BUFFER = "function", "buffer"
HOMES = (FUNCTION, BUFFER)

# Budget of Function-scope stack words per thread: the sum over a task's Function-home stacks of
# capacity x arrays (primal, plus adjoint when used) x words per entry. Stacks past it live in the buffer.
# - lavapipe (device_type "cpu") compiles a shader at its first dispatch, in a time that grows steeply with
#   its Function arrays (0.5 s at 1,024 floats, 4 s at 4,096, 90 s at 65,536), while a buffer stack runs
#   only ~25% slower (benchmarks/adstack_depth.py: 1,024 steps compile in 0.46 s vs 0.05 s, run in 6.0 vs
#   7.9 ms): 256 words, so a stack compiles in tens of milliseconds at any depth.
# - GPUs: NVIDIA's driver (H200, 580.159) refused 16 KiB of Function-scope stacks ("failed to validate
#   local memory"), Quadrants saw ~34 KiB refused elsewhere, and Apple's translator rejects large per-thread
#   arrays: 1,024 words (4 KiB). A pipeline refused all the same is retried with every stack in the buffer
#   (launch/device_task.py DeviceTask.variant).
FUNCTION_BUDGET_WORDS = {"cpu": 256}
DEFAULT_FUNCTION_BUDGET_WORDS = 1024
# The largest capacity a stack can have (ad_stack_size's upper bound): capacities, counters and the word
# offsets into a thread's slice are u32, and an entry takes up to 4 words (a 64-bit primal and its
# adjoint), so 4 x capacity must fit 32 bits; a buffer of Vulkan's maxStorageBufferRange (a u32 count of
# bytes) holds no more than 2**30 - 1 words for one thread anyway.
MAX_CAPACITY = 2**30 - 1


def function_budget_words(device_info):
    return FUNCTION_BUDGET_WORDS.get(device_info.get("device_type"), DEFAULT_FUNCTION_BUDGET_WORDS)


def stacks_with_adjoint(task):
    """Stacks whose adjoint entries some statement reads or accumulates into; only they get an adjoint
    array (reverse mode's snapshot stacks never do, which halves their memory)."""
    return {s.stack for s in N.walk(task.body) if isinstance(s, (N.AdStackLoadTopAdj, N.AdStackAccAdjoint))}


def entry_words(dtype):
    """32-bit words per stack entry (bools are i32 / u32 words)."""
    return 2 if dtype.nbytes == 8 else 1


def capacity(default, spec_id, spec):
    return int(spec[spec_id]) if spec_id is not None and spec and spec_id in spec else default


def stack_shapes(task):
    """(default capacity, capacity spec id or None, words per entry x arrays) of each stack of `task`."""
    adj = stacks_with_adjoint(task)
    return [(s.capacity, s.capacity_spec_id, entry_words(s.dtype) * (2 if s in adj else 1))
            for s in N.adstacks_of(task)]


def choose_homes(shapes, spec, budget, mode="auto"):
    """Home of each stack: `mode` when forced; under "auto" the largest stacks move to the buffer until
    the Function-scope rest fits `budget` words."""
    if mode in HOMES:
        return (mode,) * len(shapes)
    words = [capacity(cap, sid, spec) * mult for cap, sid, mult in shapes]
    homes, total = [FUNCTION] * len(words), sum(words)
    for k in sorted(range(len(words)), key=lambda k: -words[k]):
        if total <= budget:
            break
        homes[k], total = BUFFER, total - words[k]
    return tuple(homes)


@dataclass(frozen=True)
class StackHeap:
    """The storage buffer of a task's buffer-home stacks (u32 words at `binding`). Thread t's slice starts
    at word t * words_per_thread; in it each stack has its primal entries, then its adjoint entries if
    used. `parts`: (default capacity, capacity spec id, words per entry x arrays) per stack, in order."""
    binding: int
    parts: tuple

    def bytes_per_thread(self, spec=None):
        return 4 * sum(capacity(cap, sid, spec) * mult for cap, sid, mult in self.parts)


@dataclass(eq=False)
class _Stack:
    k: int                 # flag bit / depth word
    home: str
    elem: int              # element type id (bools are i32)
    wide: bool             # 64-bit entries (two buffer words each)
    n: int                 # capacity id (constant or spec constant)
    last: Optional[int]    # capacity - 1 when known at compile time
    count: int             # Function u32 variable
    peak: Optional[int]    # Function u32 variable: the deepest count a push reached (None for a twin)
    primal: int = None     # Function array variable, or first word of the region (buffer)
    adjoint: int = None    # same, or None when no statement uses the adjoints
    twin: bool = False     # moves in lockstep with an earlier stack: shares its counter (stack_twins.py)


class AdStacks:
    """Declarations and per-statement lowerings of a task's adstacks (L: the _Lowerer, mem: its Memory)."""

    def __init__(self, L, mem, layout):
        self.L, self.mem, self.lay = L, mem, layout
        self.stacks = {}   # AdStackAlloca -> _Stack
        self.twins = lockstep_twins(L.task, layout.adstacks)   # twin -> leader

    def declare(self, tid):
        """Declare every stack (entry block of main; `tid` the thread index as u32): counters and arrays,
        or the buffer regions of this thread's slice."""
        L, m, u32 = self.L, self.L.m, self.mem.u32
        adj, heap = self.lay.adjoint_stacks, []   # heap: (stack, words per entry, arrays)
        for k, (s, home) in enumerate(zip(self.lay.adstacks, self.lay.homes)):
            if s.capacity_spec_id is not None:
                n, last = L.spec_constant(s.capacity_spec_id, s.capacity), None
            else:
                if not isinstance(s.capacity, int) or s.capacity < 1:
                    raise L.error(f"adstack {s.name or s.id} has no capacity (got {s.capacity!r})")
                n, last = L.u32c(s.capacity), L.u32c(s.capacity - 1)
            elem = self.mem.i32 if s.dtype.is_bool else L.ty(s.dtype)
            name = s.name or f"stack{s.id}"
            leader = self.twins.get(s)
            if leader is not None:
                count, peak = self.stacks[leader].count, None
            else:
                count, peak = (L.f.local_variable(m.type_pointer(StorageClass.Function, u32)) for _ in range(2))
                m.name(count, f"{name}.count")
                m.name(peak, f"{name}.peak")
                L.f.emit_void(Op.OpStore, peak, L.u32c(0))
            st = self.stacks[s] = _Stack(k, home, elem, s.dtype.nbytes == 8, n, last, count, peak,
                                         twin=leader is not None)
            if home == BUFFER:
                heap.append(st)
                continue
            # Function arrays carry no ArrayStride: NVIDIA rejects it there.
            ptr = m.type_pointer(StorageClass.Function, m.type_array(elem, length_id=n))
            st.primal = L.f.local_variable(ptr)
            m.name(st.primal, f"{name}.primal")
            if s in adj:
                st.adjoint = L.f.local_variable(ptr)
                m.name(st.adjoint, f"{name}.adjoint")
        if heap:
            self._place_in_heap(heap, tid)

    def _place_in_heap(self, heap, tid):
        """First word of each region: tid * words_per_thread + offset (the layout of StackHeap)."""
        L, f, u32 = self.L, self.L.f, self.mem.u32
        regions = []
        for st in heap:
            size = f.emit(Op.OpIMul, u32, st.n, L.u32c(2 if st.wide else 1))
            regions.append((st, "primal", size))
            if self.lay.adstacks[st.k] in self.lay.adjoint_stacks:
                regions.append((st, "adjoint", size))
        offsets, total = [], L.u32c(0)
        for _, _, size in regions:
            offsets.append(total)
            total = f.emit(Op.OpIAdd, u32, total, size)
        base = f.emit(Op.OpIMul, u32, tid, total)
        for (st, which, _), off in zip(regions, offsets):
            setattr(st, which, f.emit(Op.OpIAdd, u32, base, off))

    # ---- entry access: Function array element, or buffer word(s) ----
    def _word_ptr(self, word):
        L = self.L
        ptr_t = L.m.type_pointer(StorageClass.StorageBuffer, self.mem.u32)
        return L.f.emit(Op.OpAccessChain, ptr_t, self.mem.heap, L.i32c(0), word)

    def _words(self, st, which, index):
        """Pointers to the buffer word(s) of entry `index` of `which` (low word first)."""
        L, f, u32 = self.L, self.L.f, self.mem.u32
        region = getattr(st, which)
        if not st.wide:
            return [self._word_ptr(f.emit(Op.OpIAdd, u32, region, index))]
        lo = f.emit(Op.OpIAdd, u32, region, f.emit(Op.OpIMul, u32, index, L.u32c(2)))
        return [self._word_ptr(lo), self._word_ptr(f.emit(Op.OpIAdd, u32, lo, L.u32c(1)))]

    def _read(self, st, which, index):
        L, f, u32 = self.L, self.L.f, self.mem.u32
        if st.home == FUNCTION:
            ptr = f.emit(Op.OpAccessChain, L.m.type_pointer(StorageClass.Function, st.elem), getattr(st, which),
                         index)
            return f.emit(Op.OpLoad, st.elem, ptr)
        words = [f.emit(Op.OpLoad, u32, p) for p in self._words(st, which, index)]
        if st.wide:   # a 64-bit value is a bitcast of two u32 words, lower-order bits in component 0
            return f.emit(Op.OpBitcast, st.elem, f.emit(Op.OpCompositeConstruct, self._uvec2(), *words))
        return words[0] if st.elem == u32 else f.emit(Op.OpBitcast, st.elem, words[0])

    def _write(self, st, which, index, value):
        L, f, u32 = self.L, self.L.f, self.mem.u32
        if st.home == FUNCTION:
            ptr = f.emit(Op.OpAccessChain, L.m.type_pointer(StorageClass.Function, st.elem), getattr(st, which),
                         index)
            f.emit_void(Op.OpStore, ptr, value)
            return
        ptrs = self._words(st, which, index)
        if st.wide:
            pair = f.emit(Op.OpBitcast, self._uvec2(), value)
            words = [f.emit(Op.OpCompositeExtract, u32, pair, c) for c in (0, 1)]
        else:
            words = [value if st.elem == u32 else f.emit(Op.OpBitcast, u32, value)]
        for p, w in zip(ptrs, words):
            f.emit_void(Op.OpStore, p, w)

    def _uvec2(self):
        return self.L.m.type_vector(self.mem.u32, 2)

    def _stack_in(self, s, v):
        """A value of the stack's dtype in its element type (bools are i32 0/1)."""
        return self.L.f.emit(Op.OpSelect, self.mem.i32, v, self.L.i32c(1), self.L.i32c(0)) \
            if s.stack.dtype.is_bool else v

    def _stack_out(self, s, v):
        return self.L.emit(Op.OpINotEqual, T.u1, v, self.L.i32c(0)) if s.stack.dtype.is_bool else v

    def _last(self, st):
        """N - 1 (of a spec-constant capacity: computed at run time)."""
        return st.last or self.L.f.emit(Op.OpISub, self.mem.u32, st.n, self.L.u32c(1))

    def _top(self, st):
        """Index of the top entry, clamped into the stack: min(count - 1, N - 1) (never out of bounds)."""
        L, u32 = self.L, self.mem.u32
        count = L.f.emit(Op.OpLoad, u32, st.count)
        last = L.f.emit(Op.OpISub, u32, count, L.u32c(1))
        return count, L.f.ext_inst(u32, L.glsl_set, GLSL.UMin, last, self._last(st))

    # ---- statements ----
    def alloca(self, s):
        """count = 0 at the statement (every execution starts an empty stack); a twin's leader does it."""
        if not self.stacks[s].twin:
            self.L.f.emit_void(Op.OpStore, self.stacks[s].count, self.L.u32c(0))

    def push(self, s):
        """primal[min(count, N - 1)] = v (adjoint 0); count += 1; peak = max(peak, count). Branch-free: an
        overflow (peak > N, its entries clamped onto the last) is flagged once at the thread's end
        (`overflows`); a branch with atomics in every push cost lavapipe 7 ms of compile and 40% of the
        integrator gradient's run time."""
        L, f, u32 = self.L, self.L.f, self.mem.u32
        st = self.stacks[s.stack]
        if st.twin:
            return self._push_twin(s, st)
        count = f.emit(Op.OpLoad, u32, st.count)
        slot = f.ext_inst(u32, L.glsl_set, GLSL.UMin, count, self._last(st))
        self._write(st, "primal", slot, self._stack_in(s, L.value(s.value)))
        if st.adjoint is not None:
            self._write(st, "adjoint", slot, L.m.const(st.elem, 0))
        count = f.emit(Op.OpIAdd, u32, count, L.u32c(1))
        f.emit_void(Op.OpStore, st.count, count)
        peak = f.ext_inst(u32, L.glsl_set, GLSL.UMax, f.emit(Op.OpLoad, u32, st.peak), count)
        f.emit_void(Op.OpStore, st.peak, peak)

    def overflows(self):
        """(flag bit / depth word k, overflowed, depth) of each stack with its own counter, read at the
        thread's end: lower_memory.Memory.flag_thread_end raises them."""
        L, f, u32 = self.L, self.L.f, self.mem.u32
        out = []
        for st in self.stacks.values():
            if st.peak is not None:
                peak = f.emit(Op.OpLoad, u32, st.peak)
                out.append((st.k, L.emit(Op.OpUGreaterThan, T.u1, peak, st.n), peak))
        return out

    def _push_twin(self, s, st):
        """The leader has just pushed: write at its top, clamped into the stack like the leader's entry."""
        _, top = self._top(st)
        self._write(st, "primal", top, self._stack_in(s, self.L.value(s.value)))
        if st.adjoint is not None:
            self._write(st, "adjoint", top, self.L.m.const(st.elem, 0))

    def pop(self, s):
        L, st = self.L, self.stacks[s.stack]
        if st.twin:   # the leader has just popped
            return
        count = L.f.emit(Op.OpLoad, self.mem.u32, st.count)
        L.f.emit_void(Op.OpStore, st.count, L.f.emit(Op.OpISub, self.mem.u32, count, L.u32c(1)))

    def load(self, s, which):
        st = self.stacks[s.stack]
        _, top = self._top(st)
        return self._stack_out(s, self._read(st, which, top))

    def acc_adjoint(self, s):
        """adjoint[top] += d (after an overflow the entries are clamped and the launch fails at sync)."""
        L, st = self.L, self.stacks[s.stack]
        _, top = self._top(st)
        add = Op.OpFAdd if s.stack.dtype.is_float else Op.OpIAdd
        self._write(st, "adjoint", top, L.f.emit(add, st.elem, self._read(st, "adjoint", top),
                                                 self._stack_in(s, L.value(s.value))))

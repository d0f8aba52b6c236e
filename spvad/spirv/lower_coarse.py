"""Four elements per thread for elementwise tasks, with vec4 loads and stores.

llvmpipe turns a lane's load into a gather; a vec4 gather moves four times the data, so an elementwise
kernel runs up to ~1.8x faster with four consecutive elements per thread (measured with the hand-written
limit, benchmarks/limit/elementwise_forward.comp). A task qualifies when it is straight-line code whose every
array access is `a[i]`, `i` the thread index of a 1-D parallel loop, on 32-bit data, with the thread index
used for nothing else. Thread t handles elements 4t .. 4t+3 when all four exist, running each statement for
the four lanes in turn (loads and stores as one vec4 each: each element is still read and written only by
its own lane, in program order); a second module, dispatched after it, runs the last n % 4 elements one per
thread, reading components of the vec4 view.
Not under debug (the bounds checks address scalars) and not for a task with adstacks or loops. An atomic at
one address for every thread (`loss[None] += f(x[i])`, lower_reduce.py) is allowed: the thread combines its
four values and the subgroup reduces them (a sum of 16M elements ran ~3x faster on lavapipe than with one
element per thread).
"""
from .. import types as T
from ..ir import nodes as N
from .lower_reduce import combine_lanes, subgroup_atomic
from .spec import Op

WIDTH = 4
_KINDS = (N.Const, N.ScalarArg, N.ArrayShape, N.ThreadIndex, N.Compute, N.GlobalLoad, N.GlobalStore)


def coarsenable(task, bounds_check, reduced=frozenset()):
    """Whether `task` runs four elements per thread (see the module docstring). `reduced`: its atomics that
    lower_reduce.py reduces across the subgroup (their address is the same for all: one per thread runs)."""
    if task.kind != "parallel" or bounds_check:
        return False
    body = task.body.stmts
    if not body or any(type(s) not in _KINDS and s not in reduced for s in body):
        return False
    if any(s.array.dtype.nbytes != 4 for s in body if s in reduced):   # its binding is viewed as vec4s too
        return False
    tids = [s for s in body if isinstance(s, N.ThreadIndex)]
    accesses = [s for s in body if type(s).ACCESSES_ARRAY and s not in reduced]
    if len(tids) != 1 or not accesses:
        return False
    if any(s.array.dtype.nbytes != 4 for s in task.header.stmts if type(s).ACCESSES_ARRAY):
        return False   # a count read from arrays addresses a component of their vec4 views
    tid = tids[0]
    for s in accesses:
        if s.array.ndim != 1 or s.indices != (tid,) or s.field == "final" or s.array.dtype.nbytes != 4 \
                or s.array.dtype.is_bool or (isinstance(s, N.GlobalLoad) and s.guard is not None):
            return False
    return not any(tid in s.operands() for s in body if not type(s).ACCESSES_ARRAY) and not any(
        tid is getattr(s, "value", None) for s in accesses)


def emit(L, n):
    """The whole quads: thread t runs elements 4t .. 4t+3 when 4t + 3 < n (`n`: the element count, an i32
    id). The last n % 4 elements are a second dispatch (`rest_index`): a tail in this module, even one never
    taken, cost lavapipe 25% on the elementwise workload."""
    base = L.emit(Op.OpShiftLeftLogical, T.i32, L.tid, L.i32c(2))
    last = L.emit(Op.OpIAdd, T.i32, base, L.i32c(WIDTH - 1))
    L.when(L.emit(Op.OpSLessThan, T.u1, last, n), lambda: _lanes(L, base))


def rest_index(L, n):
    """The element of thread t in the `rest` module: (n rounded down to a multiple of 4) + t."""
    whole = L.emit(Op.OpBitwiseAnd, T.i32, n, L.i32c(-WIDTH))
    return L.emit(Op.OpIAdd, T.i32, whole, L.tid)


def _lanes(L, base):
    """Four elements, statement by statement: a load or store moves one vec4 of the thread's four."""
    mem, outer = L.mem, L.vals
    lanes = [dict(outer) for _ in range(WIDTH)]
    for s in L.task.body.stmts:
        if isinstance(s, N.ThreadIndex):
            for j, vals in enumerate(lanes):
                vals[s] = L.emit(Op.OpIAdd, T.i32, base, L.i32c(j))
        elif isinstance(s, N.GlobalLoad):
            ptr, vec, elem = mem.vector_ptr(s, L.tid)
            v = L.f.emit(Op.OpLoad, vec, ptr)
            for j, vals in enumerate(lanes):
                vals[s] = mem.from_storage(s.dtype, elem, L.f.emit(Op.OpCompositeExtract, elem, v, j))
        elif isinstance(s, N.GlobalStore):
            ptr, vec, elem = mem.vector_ptr(s, L.tid)
            parts = [mem.to_storage(s.array.dtype, elem, vals[s.value]) for vals in lanes]
            L.f.emit_void(Op.OpStore, ptr, L.f.emit(Op.OpCompositeConstruct, vec, *parts))
        elif isinstance(s, N.AtomicRMW):   # reduced: the thread's four values combined, one reduction
            L.vals = lanes[0]
            value = combine_lanes(L, s, [vals[s.value] for vals in lanes])
            old = subgroup_atomic(L, s, lambda v: mem.plain_atomic(s, v), value)
            for vals in lanes:
                vals[s] = old
        else:
            for vals in lanes:
                L.vals = vals
                getattr(L, "lower_" + type(s).__name__)(s)
    L.vals = outer



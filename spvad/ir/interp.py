"""Reference interpreter of the IR: the semantic oracle that Vulkan results are compared against.

Runs each task's body once per thread, sequentially, on numpy scalars of each statement's dtype (so f32
math stays f32), each op evaluated by scalar_ops.py. Only meant for small test sizes.
"""
import numpy as np

from ..errors import SpvadError, ThreadCountError
from . import nodes as N
from .ops import Op
from .print_format import append_record, id_of, value_bits
from .scalar_ops import EVAL, eval_op, to_scalar  # noqa: F401  (EVAL, the op table, is imported from here too)


class InterpError(SpvadError):
    """The interpreter met undefined behaviour (division by zero, adstack underflow, runaway loop...)."""


class OutOfBoundsError(InterpError, IndexError):
    """A global access outside its array (a debug build's device check reports the same: see
    spirv/lower_bounds.py)."""


def access_kind(s):
    """"load", "store" or "atomic add" (max, min): what a GlobalLoad/GlobalStore/AtomicRMW does, for messages."""
    return "load" if isinstance(s, N.GlobalLoad) else "store" if isinstance(s, N.GlobalStore) else \
        s.op.value.replace("_", " ")


def out_of_bounds_message(array, field, index, shape, loc=None):
    """How the oracle and the device's bounds check name an access outside its array."""
    name = array if field in ("primal", "final") else f"{array}.{field}"   # final: the array's own contents
    where = f"\n    at {loc}" if loc else ""
    return f"{name}[{', '.join(map(str, index))}] is out of bounds for shape {tuple(shape)}{where}"


# ---- headers ------------------------------------------------------------------------------------------
def _eval_header(task, scalars, shapes, buffers=None):
    env = {}
    for s in task.header.stmts:
        if isinstance(s, N.GlobalLoad) and buffers is not None:   # a count read from arrays (ir/thread_count.py)
            env[s] = _header_load(task, s, buffers, [env[i] for i in s.indices])
        elif not type(s).HEADER_OK:
            raise InterpError(f"task {task.name}: {type(s).__name__} is not allowed in a task header evaluated "
                              "without the arrays")
        elif isinstance(s, N.Const):
            env[s] = to_scalar(s.value, s.dtype)
        elif isinstance(s, N.ScalarArg):
            env[s] = to_scalar(scalars[s.param.index], s.dtype)
        elif isinstance(s, N.ArrayShape):
            if shapes[s.array.index] is None:
                raise InterpError(f"task {task.name}: no shape for array {s.array.name}")
            env[s] = to_scalar(shapes[s.array.index][s.axis], s.dtype)
        else:
            env[s] = _header_op(task, s, [env[a] for a in s.args])
    return env


# Integer header arithmetic is exact (Python ints), and a result outside its 32-bit type is refused: the
# device would wrap it, launching fewer threads (or none) than the loop asks for, with no error.
_EXACT_INT = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
              Op.MAX: max, Op.MIN: min, Op.NEG: lambda a: -a, Op.CAST: lambda a: a}


def _header_op(task, s, args):
    exact = _EXACT_INT.get(s.op)
    if exact is None or not s.dtype.is_int or not all(a.dtype.kind in "iu" for a in args):
        return eval_op(s.op, s.dtype, args)
    value = exact(*(int(a) for a in args))
    if not (-2**31 <= value < 2**31 if s.dtype.kind == "i" else 0 <= value < 2**32):
        raise ThreadCountError(
            f"task {task.name}: its thread count needs {value:,} in {s.dtype} (at {s.loc or s.op.value}), "
            "outside 32 bits: a launch holds at most 2**31 - 1 threads; split it into several launches")
    return s.dtype.np.type(value)


def _header_load(task, s, buffers, index):
    buf = buffers[(s.array.index, s.field)]
    index = tuple(int(i) for i in index)
    if len(index) != buf.ndim or any(not 0 <= i < n for i, n in zip(index, buf.shape)):
        raise OutOfBoundsError(f"task {task.name}: out-of-bounds load in its thread count: "
                               + out_of_bounds_message(s.array.name, s.field, index, buf.shape, s.loc))
    return to_scalar(buf[index], s.dtype)


def eval_num_threads(task, scalars, shapes, buffers=None):
    """Number of threads of `task`: a straight-line evaluation of its header (shapes: one tuple per array;
    `buffers` as run_kernel's, for a count read from arrays)."""
    return int(_eval_header(task, scalars, shapes, buffers)[task.num_threads])


# ---- bodies -------------------------------------------------------------------------------------------
_BREAK, _CONTINUE = object(), object()
MAX_WHILE_ITERATIONS = 10_000_000


class _AdStack:
    """Per-thread adstack. Overflow choice (mirrored by the SPIR-V lowering, whose pushes are branch-free):
    `count` always tracks the logical depth, so pushes and pops stay balanced after an overflow; a push
    past the capacity writes the last entry; loads and adjoint accumulations clamp their index to
    capacity-1. The depth that would have been needed is the logical depth (the launch fails at sync)."""

    def __init__(self, stmt, capacities):
        cap = capacities.get(stmt.capacity_spec_id, stmt.capacity)   # a capacity chosen at launch wins
        if not isinstance(cap, int) or cap < 1:
            raise InterpError(f"adstack {stmt.name or stmt.id} has no capacity (got {cap!r})")
        self.cap, self.dtype, self.count = cap, stmt.dtype, 0
        zero = to_scalar(0, stmt.dtype)
        self.primal, self.adjoint = [zero] * self.cap, [zero] * self.cap

    def top(self):
        if self.count < 1:
            raise InterpError("adstack underflow: load/accumulate on an empty stack")
        return min(self.count, self.cap) - 1


class _Thread:
    def __init__(self, run, tid):
        self.run, self.env, self.tid = run, {}, tid
        self.loop_index = {}
        self.stacks = {}

    def idx(self, s):
        buf = self.run.buffer(s.array, s.field)
        idx = tuple(int(self.env[i]) for i in s.indices)
        if len(idx) != buf.ndim or any(not 0 <= i < n for i, n in zip(idx, buf.shape)):
            raise OutOfBoundsError(f"kernel {self.run.kernel.name}: out-of-bounds {access_kind(s)}: "
                                   + out_of_bounds_message(s.array.name, s.field, idx, buf.shape, s.loc))
        return buf, idx

    def block(self, block):
        for s in block.stmts:
            sig = self.stmt(s)
            if sig is not None:
                return sig
        return None

    def loop_body(self, loop):
        """Run one iteration; True when the loop must stop: its exit flag is set as the iteration begins,
        or a Break left it."""
        if loop.exit_flag is not None and self.env[loop.exit_flag]:
            return True
        return self.block(loop.body) is _BREAK

    def stmt(self, s):
        env = self.env
        if isinstance(s, N.Compute):
            try:
                env[s] = eval_op(s.op, s.dtype, [env[a] for a in s.args])
            except (ArithmeticError, ValueError) as e:
                raise InterpError(f"{s.op.value}: {e}" + (f" ({s.loc})" if s.loc else "")) from e
        elif isinstance(s, N.Const):
            env[s] = to_scalar(s.value, s.dtype)
        elif isinstance(s, N.ScalarArg):
            env[s] = to_scalar(self.run.scalars[s.param.index], s.dtype)
        elif isinstance(s, N.ArrayShape):
            env[s] = to_scalar(self.run.shape(s.array)[s.axis], s.dtype)
        elif isinstance(s, N.ThreadIndex):
            env[s] = to_scalar(self.tid, s.dtype)
        elif isinstance(s, N.LoopIndex):
            env[s] = to_scalar(self.loop_index[s.loop], s.dtype)
        elif isinstance(s, N.Alloca):
            env[s] = to_scalar(0, s.dtype)
        elif isinstance(s, N.LocalLoad):
            env[s] = env[s.slot]
        elif isinstance(s, N.LocalStore):
            env[s.slot] = env[s.value]
        elif isinstance(s, N.SlotSelect):   # outside the group: its first slot (ir/slot_arrays.py)
            k = int(env[s.index])
            env[s] = env[s.slots[k if 0 <= k < len(s.slots) else 0]]
        elif isinstance(s, N.SlotStore):
            k = int(env[s.index])
            if 0 <= k < len(s.slots):
                env[s.slots[k]] = to_scalar(env[s.value], s.slots[k].dtype)
        elif isinstance(s, N.GlobalLoad):
            if s.guard is not None and not env[s.guard]:
                env[s] = to_scalar(0, s.dtype)   # a guarded load that does not run reads nothing
            else:
                buf, idx = self.idx(s)
                env[s] = to_scalar(buf[idx], s.dtype)
        elif isinstance(s, N.GlobalStore):
            buf, idx = self.idx(s)
            buf[idx] = env[s.value]
        elif isinstance(s, N.AtomicRMW):
            buf, idx = self.idx(s)
            old = to_scalar(buf[idx], s.dtype)
            buf[idx] = eval_op(s.op, s.dtype, [old, env[s.value]])
            env[s] = old
        elif isinstance(s, N.RangeFor):
            i, end = int(env[s.begin]), int(env[s.end])
            while (i < end) if s.step > 0 else (i > end):
                self.loop_index[s] = i
                if self.loop_body(s):
                    break
                i += s.step
        elif isinstance(s, N.While):
            for _ in range(MAX_WHILE_ITERATIONS):
                if self.loop_body(s):
                    break
            else:
                raise InterpError(f"while loop ran {MAX_WHILE_ITERATIONS} iterations")
        elif isinstance(s, N.If):
            return self.block(s.then_body if env[s.cond] else s.else_body)
        elif isinstance(s, N.Break):
            return _BREAK
        elif isinstance(s, N.Continue):
            return _CONTINUE
        elif isinstance(s, N.Print):
            self.run.print(s, [env[v] for v in s.values])
        else:
            self.adstack(s)
        return None

    def adstack(self, s):
        if isinstance(s, N.AdStackAlloca):
            self.stacks[s] = _AdStack(s, self.run.capacities)
            return
        st = self.stacks[s.stack]
        if isinstance(s, N.AdStackPush):
            k = min(st.count, st.cap - 1)
            st.primal[k] = self.env[s.value]
            st.adjoint[k] = to_scalar(0, st.dtype)
            st.count += 1
            if st.count > st.cap:
                self.run.overflow(s.stack, st.count)
        elif isinstance(s, N.AdStackPop):
            if st.count < 1:
                raise InterpError("adstack underflow: pop on an empty stack")
            st.count -= 1
        elif isinstance(s, N.AdStackLoadTop):
            self.env[s] = st.primal[st.top()]
        elif isinstance(s, N.AdStackLoadTopAdj):
            self.env[s] = st.adjoint[st.top()]
        elif isinstance(s, N.AdStackAccAdjoint):
            k = st.top()
            st.adjoint[k] = eval_op(Op.ADD, st.dtype, [st.adjoint[k], self.env[s.value]])
        else:
            raise InterpError(f"cannot interpret {type(s).__name__}")


class _TaskRun:
    def __init__(self, kernel, task, buffers, scalars, flags, capacities, shapes, prints=None):
        self.kernel, self.task, self.buffers, self.scalars, self.flags = kernel, task, buffers, scalars, flags
        self.capacities, self.shapes, self.prints = capacities, shapes, prints
        self.stack_index = {st: k for k, st in enumerate(N.adstacks_of(task))}

    def buffer(self, array, field):
        if field == "final" and (array.index, field) not in self.buffers:
            field = "primal"   # what a launch left: the array itself unless a caller binds another copy
        try:
            return self.buffers[(array.index, field)]
        except KeyError:
            raise InterpError(f"no buffer for {array.name}.{field} (array {array.index})") from None

    def shape(self, array):
        if self.shapes[array.index] is not None:
            return self.shapes[array.index]
        for f in ("primal", "grad", "dual"):
            if (array.index, f) in self.buffers:
                return self.buffers[(array.index, f)].shape
        raise InterpError(f"no buffer for array {array.name}")

    def print(self, s, values):
        """Append the record of Print `s` to the print buffer (ir/print_format.py); no buffer: nothing."""
        if self.prints is not None:
            words = [id_of(s)]
            for v, dt in zip(values, (v.dtype for v in s.values)):
                words += value_bits(v, dt)
            append_record(self.prints, words)

    def overflow(self, stack, depth):
        if self.flags is None:
            return
        k = self.stack_index[stack]
        self.flags[0] |= np.uint32(1 << k)
        w = N.FLAG_WORDS_HEADER + k
        self.flags[w] = max(int(self.flags[w]), depth)


def run_kernel(kernel, buffers, scalars, flags=None):
    """Run `kernel` on numpy arrays. buffers: {(array_index, "primal"|"grad"|"dual"): ndarray}, mutated in
    place; scalars: one Python value per Kernel.scalars; flags: optional uint32 adstack-overflow words
    (layout nodes.FLAG_WORDS_HEADER), one array for all tasks or a list with one array per task."""
    shapes = []
    for a in kernel.arrays:
        bufs = [buffers[(a.index, f)] for f in ("primal", "grad", "dual") if (a.index, f) in buffers]
        shapes.append(bufs[0].shape if bufs else None)
    for t, task in enumerate(kernel.tasks):
        run_task(kernel, task, buffers, scalars, shapes, flags[t] if isinstance(flags, (list, tuple)) else flags)


def run_task(kernel, task, buffers, scalars, shapes, flags=None, capacities=None, prints=None):
    """Run one task of `kernel` over all its threads (see run_kernel); `capacities`: spec id -> capacity of
    the adstacks sized at launch; `prints`: the u32 print buffer its Print statements append to, or None."""
    run = _TaskRun(kernel, task, buffers, scalars, flags, capacities or {}, shapes, prints)
    # Header values do not dominate the body (the body recomputes what it needs).
    for tid in range(eval_num_threads(task, scalars, shapes, buffers)):
        _Thread(run, tid).block(task.body)

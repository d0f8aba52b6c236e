"""Reference interpreter of the IR: the semantic oracle that Vulkan results are compared against.

Runs each task's body once per thread, sequentially, on numpy scalars of each statement's dtype (so f32
math stays f32). Only meant for small test sizes.
"""
import math

import numpy as np

from ..errors import SpvadError, ThreadCountError
from ..types import INT_RANGE
from . import nodes as N
from .ops import Op
from .print_format import append_record, id_of, value_bits


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


# ---- scalar semantics ---------------------------------------------------------------------------------
def _wrap(v, dt):
    """An integer Python value wrapped to `dt`'s 32 bits, as the GPU's two's-complement arithmetic does."""
    v = int(v) & 0xFFFFFFFF
    if dt.kind == "i" and v >= 0x80000000:
        v -= 0x100000000
    return dt.np.type(v)


def _arith(int_fn, float_fn):
    """One row for an op whose integer form is computed on Python ints and wrapped to 32 bits."""
    return lambda dt, *a: _wrap(int_fn(*map(int, a)), dt) if dt.is_int else float_fn(*a)


def _round(dt, a):
    # Round half away from zero (GLSL Round is implementation-defined; SPIR-V lowering must emit the same:
    # trunc(x) + sign(x) where |x - trunc(x)| >= 0.5). `a - trunc(a)` is exact in floating point.
    t = np.trunc(a)
    return t + np.sign(a) if abs(a - t) >= 0.5 else t


def _sign(dt, a):
    if dt.is_int:
        return dt.np.type((int(a) > 0) - (int(a) < 0))
    return np.sign(a)


def _int_div(fn):
    def row(a, b):
        if b == 0:
            raise ZeroDivisionError("integer division by zero")
        return fn(a, b)
    return row


def _shift(fn):
    # GPU shifts by >= 32 are undefined; we use the low 5 bits of the shift amount, as x86 and most GPUs do.
    return lambda dt, a, b: _wrap(fn(int(a), int(b) & 31), dt)


def _cast(dt, a):
    """CAST to `dt`: float->int truncates toward zero and saturates (NaN -> 0, beyond the type -> its
    nearest end; spirv/lower_ops._float_to_int), bool->number gives 0/1, number->bool is `!= 0`, int->int
    keeps the 32-bit pattern."""
    if dt.is_bool:
        return np.bool_(a != 0)
    if isinstance(a, np.bool_):
        return dt.np.type(int(a))
    if dt.is_int:
        if isinstance(a, np.floating):
            lo, hi = INT_RANGE[dt.name]
            v = float(a)
            t = 0 if v != v else math.trunc(v) if math.isfinite(v) else hi if v > 0 else lo
            return dt.np.type(min(max(t, lo), hi))
        return _wrap(a, dt)
    return dt.np.type(a)


def _powi(dt, x, n):
    """`x ** n` for an i32/u32 exponent (ops.py Op.POWI): floats multiply by squaring in their own dtype,
    in the order the SPIR-V lowering does (bit 0 up), so f32 results agree bit for bit."""
    n = int(n)
    m = abs(n)   # < 2**32 also for i32 INT_MIN
    if dt.is_int:
        x = int(x)
        if n >= 0:
            return _wrap(pow(x, m, 2**32), dt)   # multiplication modulo 2**32 is the GPU's wrapping one
        return dt.np.type(1 if x == 1 else (-1) ** m if x == -1 else 0)   # truncation of x ** n
    r, b = dt.np.type(1), x
    while m:
        if m & 1:
            r = r * b
        m >>= 1
        b = b * b
    return dt.np.type(1) / r if n < 0 else r


def _float_only(fn):
    return lambda dt, *a: fn(*a)


def _in_f32(fn):
    """A row the device computes in f32 whatever the float type: GLSL.std.450 defines its instruction for
    16/32-bit floats only, so the lowering narrows f64 operands and widens the result (L.glsl(...,
    narrow=True), lower_ops._in_f32): an f64 result has f32 accuracy."""
    return lambda dt, *a: dt.np.type(fn(*(np.float32(x) for x in a)))


def _expm1(x):
    # Kahan: u = exp(x) rounds, but (u - 1) / log(u) is the slope of exp over exactly [log u, 0], so
    # (u - 1) * x / log(u) keeps full relative accuracy for small |x|; u == 1 means |x| below half an ulp.
    # For |x| >= 1, u - 1 has no cancellation (and stays right at u = 0 and u = inf).
    u = np.exp(x)
    if abs(x) >= 1:
        return u - 1
    return x if u == 1 else (u - 1) * x / np.log(u)


def _log1p(x):
    # Kahan: u = 1 + x rounds, but log(u) / (u - 1) is the slope of log over exactly [1, u], so
    # log(u) * x / (u - 1) is accurate for small |x|; u == 1 means x below half an ulp of 1.
    u = x.dtype.type(1) + x
    if abs(x) >= 1:
        return np.log(u)
    return x if u == 1 else np.log(u) * x / (u - 1)


def _hypot(dt, a, b):
    # m sqrt(1 + (n / m)^2) with m = max(|a|, |b|), n = min(|a|, |b|): no overflow of a*a for large inputs.
    # n == m (also 0 and inf) takes ratio 1. Sqrt is exact in f64 on the device: no narrowing.
    m, n = max(abs(a), abs(b)), min(abs(a), abs(b))
    t = dt.np.type(1) if n == m else n / m
    return m * np.sqrt(dt.np.type(1) + t * t)


LOG10_2 = math.log10(2.0)
_ADD = _arith(lambda a, b: a + b, lambda a, b: a + b)


def _min(dt, a, b):
    return b if b < a else a


def _max(dt, a, b):
    return b if b > a else a


# EVAL[op](result_dtype, *operands) -> numpy scalar of result_dtype. Operands are numpy scalars of the
# operand dtypes; float rows run in numpy (f32 stays f32), integer rows on Python ints wrapped to 32 bits.
# Each row is what the device computes (spirv/lower_ops.py). Where GLSL.std.450 leaves a result undefined
# the row gives numpy's (NaN, inf), which a device need not reproduce: asin/acos for |x| > 1, log/log2/
# log10 for x <= 0, log1p for x <= -1, sqrt for x < 0, rsqrt for x <= 0, pow for x < 0 or x == 0 with
# y <= 0, atan2(0, 0); min/max with a NaN operand may return either operand.
EVAL = {
    Op.NEG: _arith(lambda a: -a, lambda a: -a),
    Op.ABS: _arith(abs, np.abs),
    Op.SIGN: _sign,
    Op.STOP_GRADIENT: lambda dt, a: a,
    # transcendental: computed in f32, also for f64 (GLSL.std.450 has them for 16/32-bit floats only)
    Op.SIN: _in_f32(np.sin), Op.COS: _in_f32(np.cos), Op.TAN: _in_f32(np.tan),
    Op.ASIN: _in_f32(np.arcsin), Op.ACOS: _in_f32(np.arccos), Op.ATAN: _in_f32(np.arctan),
    Op.SINH: _in_f32(np.sinh), Op.COSH: _in_f32(np.cosh), Op.TANH: _in_f32(np.tanh),
    Op.EXP: _in_f32(np.exp), Op.LOG: _in_f32(np.log), Op.LOG2: _in_f32(np.log2),
    Op.EXP2: _in_f32(np.exp2),
    Op.LOG10: _in_f32(lambda x: np.log2(x) * np.float32(LOG10_2)),   # no Log10 instruction: log2 x log10(2)
    Op.EXPM1: _in_f32(_expm1), Op.LOG1P: _in_f32(_log1p),
    # Sqrt, InverseSqrt, Floor, Ceil (and FAbs, FSign, FMin, FMax) are defined for f64: computed in the type
    Op.SQRT: _float_only(np.sqrt),
    Op.RSQRT: lambda dt, a: dt.np.type(1) / np.sqrt(a),
    Op.FLOOR: _float_only(np.floor), Op.CEIL: _float_only(np.ceil),
    Op.ROUND: _round,
    Op.NOT: lambda dt, a: np.bool_(not a),
    Op.BIT_NOT: lambda dt, a: _wrap(~int(a), dt),
    Op.CAST: _cast,
    Op.ADD: _ADD,
    Op.SUB: _arith(lambda a, b: a - b, lambda a, b: a - b),
    Op.MUL: _arith(lambda a, b: a * b, lambda a, b: a * b),
    Op.DIV: lambda dt, a, b: a / b,
    # Python semantics: floor division, remainder with the sign of the divisor (ints and floats).
    Op.FLOORDIV: _arith(_int_div(lambda a, b: a // b), np.floor_divide),
    Op.MOD: _arith(_int_div(lambda a, b: a % b), np.mod),
    Op.POW: _in_f32(np.power),   # GLSL pow: x > 0 only (x < 0 gives NaN here, anything on a device)
    Op.POWI: _powi,
    Op.ATAN2: _in_f32(np.arctan2),
    Op.HYPOT: _hypot,
    Op.FMOD: _float_only(np.fmod),   # OpFRem: the sign of a (Vulkan: as precise as a - b trunc(a / b))
    Op.MIN: _min,
    Op.MAX: _max,
    Op.BIT_AND: lambda dt, a, b: _wrap(int(a) & int(b), dt),
    Op.BIT_OR: lambda dt, a, b: _wrap(int(a) | int(b), dt),
    Op.BIT_XOR: lambda dt, a, b: _wrap(int(a) ^ int(b), dt),
    Op.SHL: _shift(lambda a, n: a << n),
    Op.SHR: _shift(lambda a, n: a >> n),   # Python's >> is arithmetic on i32, logical on (non-negative) u32
    Op.LT: lambda dt, a, b: a < b, Op.LE: lambda dt, a, b: a <= b,
    Op.GT: lambda dt, a, b: a > b, Op.GE: lambda dt, a, b: a >= b,
    Op.EQ: lambda dt, a, b: a == b, Op.NE: lambda dt, a, b: a != b,
    Op.AND: lambda dt, a, b: np.bool_(a and b),
    Op.OR: lambda dt, a, b: np.bool_(a or b),
    Op.SELECT: lambda dt, c, a, b: a if c else b,
    # atomics: what is stored back into the element (the old value is the statement's result)
    Op.ATOMIC_ADD: _ADD, Op.ATOMIC_MAX: _max, Op.ATOMIC_MIN: _min,
}


def to_scalar(value, dt):
    """A Python or numpy value as a numpy scalar of `dt`."""
    return np.bool_(value) if dt.is_bool else dt.np.type(value)


def eval_op(op, dtype, args):
    """Evaluate one Compute: `op` on numpy-scalar `args`, result a numpy scalar of `dtype`.

    Raises ZeroDivisionError/ValueError for undefined integer results; float overflow and division by
    zero give inf/nan silently, as on the GPU."""
    with np.errstate(all="ignore"):
        return to_scalar(EVAL[op](dtype, *args), dtype)


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

"""Thread counts read from arrays (`for i in range(n[None])`): the count exists only on the device, when the
launch runs. A one-thread counting task evaluates the parallel task's header there and writes the group
counts of an indirect dispatch; the task itself evaluates its header again for its `i < n` guard.

The counting task's words (i32, `ARGS_WORDS` of them):
    0 .. 2   groups (x, y, z) of the task's module, folded into 2-D past MAX_GROUPS_X as the host folds
    3 .. 5   groups of a coarsened task's second module (its last n % 4 elements)
    6        1 + the index in `checks(task)` of the first header statement that failed: a load outside its
             array (never made), or an operation whose exact value left 32 bits (as the host's header
             evaluation refuses it, ir/interp.py); else 0. That launch then runs no thread. Set, never
             cleared, by the device: the host reads and clears it at the next sync.
"""
from .. import types as T
from . import nodes as N
from .ops import Op

GROUPS, TAIL_GROUPS, ERROR_WORD, ARGS_WORDS = 0, 3, 6, 8
MAX_GROUPS_X = 65535   # every Vulkan device and Metal take this many groups per dimension
INT_MIN = -2**31


def header_loads(task):
    """The array loads of `task`'s header (none: the host computes its thread count)."""
    return [s for s in task.header.stmts if isinstance(s, N.GlobalLoad)]


def counts_on_device(task):
    """Whether `task`'s thread count is read from arrays, so only the device knows it."""
    return bool(header_loads(task))


def checks(task):
    """The header statements the counting task checks, in order: loads of arrays with axes (their indices
    inside the shape) and integer operations (their exact value inside 32 bits)."""
    return [s for s in task.header.stmts if _checked_load(s) or _overflow_rule(s) is not None]


def _checked_load(s):
    return isinstance(s, N.GlobalLoad) and s.array.ndim > 0


def build_count_kernel(kernel, task, local_size, per_thread=1):
    """The counting kernel of parallel task `task` (a module of `local_size` threads per group running
    `per_thread` elements per thread): `kernel`'s arrays and scalars, then the words array."""
    words = N.ArrayParam("__launch_args", T.i32, 1, len(kernel.arrays))
    b = _Builder()
    m = {}
    error = b.const(0)
    checked = {s: k for k, s in enumerate(checks(task))}
    for s in task.header.stmts:   # the header cloned, its loads guarded, its operations that can wrap checked
        if _checked_load(s):
            inside = _inside(b, s.array, [m[i] for i in s.indices])
            new = b.add(N.clone_stmt(s, m))
            new.guard, failed = inside, b.op(Op.NOT, (inside,), T.u1)
        else:
            new = b.add(N.clone_stmt(s, m))
            failed = _overflow_rule(s)(b, new, *new.args) if s in checked else None
        if failed is not None:   # the first failure is kept: later values derive from it
            first = b.op(Op.AND, (failed, b.op(Op.EQ, (error, b.const(0)), T.u1)), T.u1)
            error = b.op(Op.SELECT, (first, b.const(checked[s] + 1), error), T.i32)
    fine = b.op(Op.EQ, (error, b.const(0)), T.u1)
    n = b.op(Op.MAX, (b.op(Op.SELECT, (fine, m[task.num_threads], b.const(0)), T.i32), b.const(0)), T.i32)
    for word, value in enumerate(_groups(b, _ceil_div(b, n, per_thread), local_size)):
        b.store(words, GROUPS + word, value)
    tail = b.op(Op.MOD, (n, b.const(per_thread)), T.i32) if per_thread > 1 else b.const(0)
    for word, value in enumerate(_groups(b, tail, local_size)):
        b.store(words, TAIL_GROUPS + word, value)
    report = N.Block()
    report.append(N.GlobalStore(words, (b.const(ERROR_WORD),), error))
    b.add(N.If(b.op(Op.NOT, (fine,), T.u1), report, N.Block()))
    one = N.Const(1, T.i32)
    count_task = N.Task(task.name + "_count", "serial", N.Block([one]), one, b.block)
    return N.Kernel(kernel.name + "_count", kernel.arrays + [words], kernel.scalars, [count_task], kernel.filename)


def _inside(b, array, index):
    """0 <= index[axis] < shape[axis] on every axis."""
    ok = None
    for axis, i in enumerate(index):
        shape = b.add(N.ArrayShape(array, axis))
        fits = b.op(Op.AND, (b.op(Op.GE, (i, b.const(0)), T.u1), b.op(Op.LT, (i, shape), T.u1)), T.u1)
        ok = fits if ok is None else b.op(Op.AND, (ok, fits), T.u1)
    return ok


def _groups(b, threads, local_size):
    """(x, y, z) groups for `threads` threads: x up to MAX_GROUPS_X, y as many rows as needed (none for
    no thread)."""
    groups = _ceil_div(b, threads, local_size)
    x = b.op(Op.MIN, (groups, b.const(MAX_GROUPS_X)), T.i32)
    y = _ceil_div(b, groups, b.op(Op.MAX, (x, b.const(1)), T.i32))
    return x, y, b.const(1)


def _ceil_div(b, a, d):
    """ceil(a / d) for a >= 0, d > 0, without the overflow of (a + d - 1) // d near 2**31."""
    d = b.const(d) if isinstance(d, int) else d
    if isinstance(d, N.Const) and d.value == 1:
        return a
    q = b.op(Op.FLOORDIV, (a, d), T.i32)
    rest = b.op(Op.NE, (b.op(Op.MOD, (a, d), T.i32), b.const(0)), T.u1)
    return b.op(Op.ADD, (q, b.op(Op.SELECT, (rest, b.const(1), b.const(0)), T.i32)), T.i32)


# ---- whether a 32-bit operation wrapped: r is the wrapped result of op(a, b) ----------------------------
def _add_i32(b, r, x, y):   # the sign of r differs from both operands' signs
    both = b.op(Op.BIT_AND, (b.op(Op.BIT_XOR, (r, x), T.i32), b.op(Op.BIT_XOR, (r, y), T.i32)), T.i32)
    return b.op(Op.LT, (both, b.const(0)), T.u1)


def _sub_i32(b, r, x, y):   # operands of different signs, and r's sign differs from x's
    both = b.op(Op.BIT_AND, (b.op(Op.BIT_XOR, (x, y), T.i32), b.op(Op.BIT_XOR, (x, r), T.i32)), T.i32)
    return b.op(Op.LT, (both, b.const(0)), T.u1)


def _mul(b, r, x, y):
    """x != 0 and r // x != y (floor division undoes an exact product; a wrapped one differs by a multiple
    of 2**32 / |x| >= 2); x == -1 (i32) wraps only y = -2**31, whose quotient would itself overflow."""
    dt = r.dtype
    zero = b.const(0, dt)
    if dt == T.i32:
        minus_one = b.op(Op.EQ, (x, b.const(-1)), T.u1)
        odd = b.op(Op.OR, (b.op(Op.EQ, (x, zero), T.u1), minus_one), T.u1)
    else:
        minus_one, odd = None, b.op(Op.EQ, (x, zero), T.u1)
    divisor = b.op(Op.SELECT, (odd, b.const(1, dt), x), dt)
    differs = b.op(Op.NE, (b.op(Op.FLOORDIV, (r, divisor), dt), y), T.u1)
    wrapped = b.op(Op.AND, (b.op(Op.NE, (x, zero), T.u1), differs), T.u1)
    if minus_one is None:
        return wrapped
    return b.op(Op.SELECT, (minus_one, b.op(Op.EQ, (y, b.const(INT_MIN)), T.u1), wrapped), T.u1)


def _neg(b, r, x):
    if r.dtype == T.i32:
        return b.op(Op.EQ, (x, b.const(INT_MIN)), T.u1)
    return b.op(Op.NE, (x, b.const(0, T.u32)), T.u1)


def _cast(b, r, x):   # i32 <-> u32: a value the other type cannot hold has its top bit set
    if x.dtype == r.dtype:
        return b.const(False, T.u1)
    signed = x if x.dtype == T.i32 else r
    return b.op(Op.LT, (signed, b.const(0)), T.u1)


_RULES = {
    (Op.ADD, "i"): _add_i32, (Op.SUB, "i"): _sub_i32,
    (Op.ADD, "u"): lambda b, r, x, y: b.op(Op.LT, (r, x), T.u1),
    (Op.SUB, "u"): lambda b, r, x, y: b.op(Op.LT, (x, y), T.u1),
    (Op.MUL, "i"): _mul, (Op.MUL, "u"): _mul, (Op.NEG, "i"): _neg, (Op.NEG, "u"): _neg,
    (Op.CAST, "i"): _cast, (Op.CAST, "u"): _cast,
}


def _overflow_rule(s):
    """How to tell that header statement `s` wrapped, or None (not an integer operation that can)."""
    if not isinstance(s, N.Compute) or not s.dtype.is_int or not all(a.dtype.is_int for a in s.args):
        return None
    return _RULES.get((s.op, s.dtype.kind))


class _Builder:
    def __init__(self):
        self.block = N.Block()

    def add(self, stmt):
        return self.block.append(stmt)

    def const(self, value, dtype=T.i32):
        return self.add(N.Const(value, dtype))

    def op(self, op, args, dtype):
        return self.add(N.Compute(op, tuple(args), dtype))

    def store(self, array, word, value):
        self.add(N.GlobalStore(array, (self.const(word),), value))

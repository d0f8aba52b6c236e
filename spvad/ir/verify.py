"""IR verifier: checks the invariants every pass must keep (dominance, types, structure) and raises
IRVerifyError naming the kernel, the task and the printed statement."""
import math

import numpy as np

from .. import types as T
from ..errors import SpvadError
from . import nodes as N
from .ops import ATOMICS, result_dtype
from .printer import format_stmt

FIELDS = ("primal", "grad", "dual", "final")   # final: a launch's result, read by its derivative


class IRVerifyError(SpvadError):
    """The IR breaks an invariant (a bug in the frontend or a pass, never in user code)."""


def verify(kernel):
    """Check `kernel`; raise IRVerifyError on the first broken invariant, return the kernel otherwise."""
    seen = set()
    for task in kernel.tasks:
        _Verifier(kernel, task, seen).run()
    return kernel


class _Verifier:
    def __init__(self, kernel, task, seen):
        self.kernel, self.task, self.seen = kernel, task, seen
        self.defined = set()    # values visible at the current point (dominating definitions)
        self.loops = []         # enclosing RangeFor/While, innermost last
        self.derivatives = []   # enclosing Derivative statements and the loop depth at each, innermost last
        self.part = "header"

    def fail(self, msg, stmt=None):
        text = f"kernel {self.kernel.name}, task {self.task.name} ({self.part}): {msg}"
        if stmt is not None:
            text += "\n    " + format_stmt(stmt).split("\n")[0]
            if stmt.loc is not None:
                text += f"\n    from {stmt.loc}"
        raise IRVerifyError(text)

    def run(self):
        t = self.task
        if t.kind not in ("parallel", "serial"):
            self.fail(f"task kind must be 'parallel' or 'serial', got {t.kind!r}")
        for s in t.header.stmts:
            if not isinstance(s, N.Stmt) or not (type(s).HEADER_OK or self.counted_on_device(s)):
                self.fail(f"{type(s).__name__} is not allowed in a task header", s)
        self.block(t.header)
        if not any(s is t.num_threads for s in t.header.stmts):
            self.fail("num_threads is not defined in the task header",
                      t.num_threads if isinstance(t.num_threads, N.Stmt) else None)
        if t.num_threads.dtype != T.i32:
            self.fail(f"num_threads must be i32, got {t.num_threads.dtype}", t.num_threads)
        # Header values do not dominate the body: the body recomputes what it needs.
        self.defined, self.part = set(), "body"
        self.block(t.body)

    def counted_on_device(self, s):
        """A parallel task's thread count may read arrays (ir/thread_count.py): plain loads of their contents."""
        return isinstance(s, N.GlobalLoad) and self.task.kind == "parallel" and s.field == "primal" and \
            s.guard is None

    def block(self, block):
        added = []
        for s in block.stmts:
            if not isinstance(s, N.Stmt):
                self.fail(f"{s!r} in a block is not a statement")
            if s in self.seen:
                self.fail("statement appears twice in the IR", s)
            self.seen.add(s)
            for name in s.VALUE_FIELDS:
                if isinstance(getattr(s, name), list):
                    self.fail(f"{type(s).__name__}.{name} must be a tuple, not a list", s)
            for v in s.operands():
                if not isinstance(v, N.Stmt) or v not in self.defined:
                    self.fail(f"operand %{getattr(v, 'id', '?')} is used before its definition "
                              "(or outside the block that defines it)", s)
            self.stmt(s)
            if s.dtype is not None or isinstance(s, N.Alloca):
                self.defined.add(s)
                added.append(s)
        self.defined.difference_update(added)

    def stmt(self, s):
        check = getattr(self, "check_" + type(s).__name__, None)
        if check is None:
            self.fail(f"unknown statement kind {type(s).__name__}", s)
        check(s)

    def dtype_is(self, v, dt, what, s):
        if v.dtype != dt:
            self.fail(f"{what} must be {dt}, got {v.dtype}", s)

    # ---- values ----
    def check_Const(self, s):
        if s.dtype not in T.ALL:
            self.fail(f"unknown dtype {s.dtype!r}", s)
        v, dt = s.value, s.dtype
        is_bool = isinstance(v, (bool, np.bool_))
        is_int = isinstance(v, (int, np.integer)) and not is_bool
        if dt.is_bool:
            ok = is_bool
        elif dt.is_int:
            lo, hi = (-2**31, 2**31 - 1) if dt.kind == "i" else (0, 2**32 - 1)
            ok = is_int and lo <= int(v) <= hi
        else:
            ok = is_int or isinstance(v, (float, np.floating))
        if not ok:
            self.fail(f"constant {v!r} does not fit dtype {dt}", s)

    def check_ScalarArg(self, s):
        if s.param not in self.kernel.scalars:
            self.fail(f"scalar {s.param.name} is not a parameter of the kernel", s)

    def check_ArrayShape(self, s):
        self.array(s, s.array)
        if not 0 <= s.axis < s.array.ndim:
            self.fail(f"axis {s.axis} out of range for a {s.array.ndim}-d array", s)
        self.dtype_is(s, T.i32, "a shape", s)

    def check_ThreadIndex(self, s):
        if self.part != "body" or self.task.kind != "parallel":
            self.fail("ThreadIndex is only allowed in the body of a parallel task", s)
        self.dtype_is(s, T.i32, "the thread index", s)

    def check_Compute(self, s):
        if s.op in ATOMICS:
            self.fail(f"{s.op.value} is an AtomicRMW op, not a Compute op", s)
        try:
            rt = result_dtype(s.op, [a.dtype for a in s.args], cast_to=s.dtype)
        except (TypeError, KeyError) as e:
            self.fail(f"ill-typed {s.op.value}: {e}", s)
        if rt != s.dtype or s.dtype is None:
            self.fail(f"{s.op.value} yields {rt}, but the statement says {s.dtype}", s)

    # ---- locals ----
    def check_Alloca(self, s):
        if s.dtype not in T.ALL:
            self.fail(f"unknown dtype {s.dtype!r}", s)

    def check_LocalLoad(self, s):
        if not isinstance(s.slot, N.Alloca):
            self.fail("local_load slot is not an Alloca", s)

    def check_LocalStore(self, s):
        if not isinstance(s.slot, N.Alloca):
            self.fail("local_store slot is not an Alloca", s)
        self.dtype_is(s.value, s.slot.dtype, "the stored value", s)

    def group(self, s):
        if not s.slots or any(not isinstance(t, N.Alloca) or t.dtype != s.slots[0].dtype for t in s.slots):
            self.fail("a slot group must be Allocas of one dtype", s)
        self.dtype_is(s.index, T.i32, "a slot index", s)

    def check_SlotSelect(self, s):
        self.group(s)

    def check_SlotStore(self, s):
        self.group(s)
        self.dtype_is(s.value, s.slots[0].dtype, "the stored value", s)

    # ---- global memory ----
    def array(self, s, a):
        if not (0 <= a.index < len(self.kernel.arrays) and self.kernel.arrays[a.index] is a):
            self.fail(f"array {a.name} is not kernel.arrays[{a.index}]", s)

    def access(self, s):
        self.array(s, s.array)
        if s.field not in FIELDS:
            self.fail(f"field must be one of {FIELDS}, got {s.field!r}", s)
        if len(s.indices) != s.array.ndim:
            self.fail(f"{len(s.indices)} indices for a {s.array.ndim}-d array", s)
        for i in s.indices:
            self.dtype_is(i, T.i32, "an index", s)

    def check_GlobalLoad(self, s):
        self.access(s)
        if s.guard is not None:
            self.dtype_is(s.guard, T.u1, "a load's guard", s)

    def check_GlobalStore(self, s):
        self.access(s)
        self.written(s)
        self.dtype_is(s.value, s.array.dtype, "the stored value", s)

    def written(self, s):
        if s.field == "final":
            self.fail("'final' names what a launch left: it is read, never written", s)

    def check_AtomicRMW(self, s):
        self.access(s)
        self.written(s)
        if s.op not in ATOMICS:
            self.fail(f"atomic op must be one of {sorted(o.value for o in ATOMICS)}, got {s.op!r}", s)
        if s.array.dtype.is_bool:
            self.fail("atomics do not apply to bool arrays", s)
        self.dtype_is(s.value, s.array.dtype, "the atomic operand", s)

    # ---- output ----
    def check_Print(self, s):
        if not isinstance(s.pieces, tuple) or not isinstance(s.values, tuple):
            self.fail("a print's pieces and values must be tuples", s)
        slots = [p for p in s.pieces if not isinstance(p, str)]
        if any(not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], str)) for p in slots):
            self.fail(f"a print piece must be text or (shape, spec), got {s.pieces!r}", s)
        wanted = sum(math.prod(shape) for shape, _ in slots)
        if wanted != len(s.values):
            self.fail(f"the print's format takes {wanted} values, it has {len(s.values)}", s)

    # ---- control flow ----
    def check_RangeFor(self, s):
        self.dtype_is(s.begin, T.i32, "a loop bound", s)
        self.dtype_is(s.end, T.i32, "a loop bound", s)
        if not isinstance(s.step, int) or isinstance(s.step, bool) or s.step == 0:
            self.fail(f"loop step must be a nonzero int, got {s.step!r}", s)
        self.loop(s)

    def check_While(self, s):
        self.loop(s)

    def loop(self, s):
        flag = s.exit_flag
        if flag is not None and (not isinstance(flag, N.Alloca) or flag.dtype != T.u1):
            self.fail("a loop's exit flag must be a u1 Alloca", s)
        self.loops.append(s)
        self.block(s.body)
        self.loops.pop()

    def check_LoopIndex(self, s):
        if s.loop not in self.loops or not isinstance(s.loop, N.RangeFor):
            self.fail("loop_index outside the RangeFor it belongs to", s)
        self.dtype_is(s, T.i32, "a loop index", s)

    def check_If(self, s):
        self.dtype_is(s.cond, T.u1, "an if condition", s)
        self.block(s.then_body)
        self.block(s.else_body)

    def check_Break(self, s):
        if not self.loops:
            self.fail("break outside a loop", s)
        if self.derivatives and len(self.loops) == self.derivatives[-1][1]:
            self.fail("a break would leave a derivative's body", s)

    check_Continue = check_Break

    # ---- adstacks ----
    def check_AdStackAlloca(self, s):
        if s.dtype not in T.ALL:
            self.fail(f"unknown dtype {s.dtype!r}", s)
        cap = s.capacity
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            self.fail(f"adstack capacity must be a positive int or None, got {cap!r}", s)

    def stack_op(self, s):
        if not isinstance(s.stack, N.AdStackAlloca):
            self.fail("adstack operation on something that is not an AdStackAlloca", s)

    def check_AdStackPush(self, s):
        self.stack_op(s)
        self.dtype_is(s.value, s.stack.dtype, "the pushed value", s)

    def check_AdStackAccAdjoint(self, s):
        self.stack_op(s)
        self.dtype_is(s.value, s.stack.dtype, "the accumulated adjoint", s)

    check_AdStackPop = check_AdStackLoadTop = check_AdStackLoadTopAdj = stack_op

    # ---- derivatives inside kernels (before autodiff/inline_derivatives.py) ----
    def check_Derivative(self, s):
        if not isinstance(s.width, int) or s.width < 1:
            self.fail(f"a derivative's width must be a positive int, got {s.width!r}", s)
        self.derivatives.append((s, len(self.loops)))
        self.block(s.body)
        self.derivatives.pop()

    def check_Seed(self, s):
        if not self.derivatives:
            self.fail("a seed outside a derivative", s)
        if len(s.tangents) != self.derivatives[-1][0].width:
            self.fail(f"a seed needs {self.derivatives[-1][0].width} tangents, got {len(s.tangents)}", s)
        if not s.dtype.is_float:
            self.fail(f"a seed must be a float, got {s.dtype}", s)
        for t in s.tangents:
            self.dtype_is(t, s.dtype, "a seed's tangent", s)

    def check_Tangent(self, s):
        if not self.derivatives:
            self.fail("a tangent outside a derivative", s)
        if not 0 <= s.direction < self.derivatives[-1][0].width:
            self.fail(f"tangent direction {s.direction} out of range", s)
        if not s.dtype.is_float:
            self.fail(f"a tangent must be a float, got {s.dtype}", s)

"""A tiny hand-builder of IR for tests that build kernels without the frontend (tests/ir, tests/spirv)."""
import contextlib

from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.ops import result_dtype


class KernelBuilder:
    """Appends statements to the current block; tasks, loops and ifs are context managers."""

    def __init__(self, name="k"):
        self.kernel = N.Kernel(name, [], [], [])
        self.cur = None
        self.task = None

    # ---- signature ----
    def array(self, name, dtype=T.f32, ndim=1, needs_grad=False, needs_dual=False):
        a = N.ArrayParam(name, dtype, ndim, len(self.kernel.arrays), needs_grad, needs_dual)
        self.kernel.arrays.append(a)
        return a

    def scalar(self, name, dtype=T.i32):
        p = N.ScalarParam(name, dtype, len(self.kernel.scalars))
        self.kernel.scalars.append(p)
        return p

    # ---- tasks: header statements go between begin_task and body ----
    def begin_task(self, kind="parallel", name=None):
        self.task = N.Task(name or f"t{len(self.kernel.tasks)}", kind, N.Block(), None, N.Block())
        self.kernel.tasks.append(self.task)
        self.cur = self.task.header
        return self.task

    def body(self, num_threads):
        self.task.num_threads = num_threads
        self.cur = self.task.body

    def serial(self):
        self.begin_task("serial")
        self.body(self.const(1))

    def parallel(self, n):
        """A parallel task of `n` (a Python int or an array: its length) threads; returns ThreadIndex."""
        self.begin_task("parallel")
        self.body(self.shape(n, 0) if isinstance(n, N.ArrayParam) else self.const(n))
        return self.tid()

    # ---- values ----
    def add(self, stmt):
        return self.cur.append(stmt)

    def const(self, v, dtype=None):
        dtype = dtype or (T.u1 if isinstance(v, bool) else T.i32 if isinstance(v, int) else T.f32)
        return self.add(N.Const(v, dtype))

    def arg(self, p):
        return self.add(N.ScalarArg(p))

    def shape(self, a, axis=0):
        return self.add(N.ArrayShape(a, axis))

    def tid(self):
        return self.add(N.ThreadIndex())

    def op(self, op, *args, dtype=None):
        return self.add(N.Compute(op, tuple(args), dtype or result_dtype(op, [a.dtype for a in args])))

    def cast(self, x, dtype):
        from spvad.ir.ops import Op
        return self.op(Op.CAST, x, dtype=dtype)

    # ---- memory ----
    def load(self, a, *idx, field="primal"):
        return self.add(N.GlobalLoad(a, tuple(idx), field))

    def store(self, a, idx, value, field="primal"):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return self.add(N.GlobalStore(a, idx, value, field))

    def atomic(self, op, a, idx, value, field="primal"):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return self.add(N.AtomicRMW(op, a, idx, value, field))

    def alloca(self, dtype, name=""):
        return self.add(N.Alloca(dtype, name))

    def lload(self, slot):
        return self.add(N.LocalLoad(slot))

    def lstore(self, slot, value):
        return self.add(N.LocalStore(slot, value))

    # ---- control flow ----
    @contextlib.contextmanager
    def nested(self, block):
        outer, self.cur = self.cur, block
        try:
            yield
        finally:
            self.cur = outer

    @contextlib.contextmanager
    def range_for(self, begin, end, step=1):
        """`with kb.range_for(b, e) as i:` yields the LoopIndex (the loop is `i.loop`)."""
        loop = self.add(N.RangeFor(begin, end, step, N.Block()))
        with self.nested(loop.body):
            yield self.add(N.LoopIndex(loop))

    @contextlib.contextmanager
    def while_(self):
        loop = self.add(N.While(N.Block()))
        with self.nested(loop.body):
            yield loop

    @contextlib.contextmanager
    def if_(self, cond):
        s = self.if_stmt(cond)
        with self.nested(s.then_body):
            yield s

    def if_stmt(self, cond):
        """An If whose branches the caller fills with `nested(s.then_body)` / `nested(s.else_body)`."""
        return self.add(N.If(cond, N.Block(), N.Block()))

    @contextlib.contextmanager
    def else_(self, if_stmt):
        with self.nested(if_stmt.else_body):
            yield

    def brk(self):
        return self.add(N.Break())

    def cont(self):
        return self.add(N.Continue())

    # ---- adstacks ----
    def adstack(self, dtype, capacity, name="", spec_id=None):
        return self.add(N.AdStackAlloca(dtype, capacity, name, spec_id))

    def push(self, st, v):
        return self.add(N.AdStackPush(st, v))

    def pop(self, st):
        return self.add(N.AdStackPop(st))

    def top(self, st):
        return self.add(N.AdStackLoadTop(st))

    def top_adj(self, st):
        return self.add(N.AdStackLoadTopAdj(st))

    def acc_adj(self, st, v):
        return self.add(N.AdStackAccAdjoint(st, v))

"""The frontend's tasks: a top-level `for` becomes a parallel task (its range / sp.ndrange dimensions give the
thread count, evaluated from the header on the host, or on the device when it reads arrays, and the loop
indices, recomputed from the thread index in the body); other top-level statements become serial tasks."""
import ast

from .. import types as T
from ..errors import ThreadCountError
from ..ir import nodes as N
from .arrays import user_ndim
from .values import ENDED, FieldRef
from .vectors import VecValue
from ..ir.ops import Op

MAX_THREADS = 2**31 - 1   # thread indices are 32-bit


class TasksMixin:
    def new_task(self, kind, node):
        header, body = N.Block(), N.Block()
        task = N.Task(f"{self.kernel.name}_t{len(self.kernel.tasks)}", kind, header, None, body)
        self.kernel.tasks.append(task)
        self.task, self.alloca_at = task, 0
        self.at(node)
        return task

    def flush_serial(self, stmts):
        """The top-level statements between two parallel loops, in order: top-level values (try_lazy_assign)
        bind names, and the first other statement starts a serial task holding the rest."""
        pending = list(stmts)
        stmts.clear()
        while pending and self.try_lazy_assign(pending[0]):
            pending.pop(0)
        if not pending:
            return
        task = self.new_task("serial", pending[0])
        self.block = task.header
        task.num_threads = self.const(1)
        self.block = task.body
        for k, stmt in enumerate(pending):
            if k == 0 or not self.try_lazy_assign(stmt):   # pending[0] was tried above
                self.visit_body([stmt])
        self.task = None

    def parallel_task(self, node):
        if node.orelse:
            self.at(node)
            self.error("for-else is not supported")
        task = self.new_task("parallel", node)
        dims = self.parallel_dims(node)
        self.block = task.header
        extents = [self.extent(lo, hi, step) for lo, hi, step in self.eval_dims(dims)]
        n = extents[0]
        for e in extents[1:]:
            n = self.binop("*", n, e)
        if not isinstance(n, N.Stmt) and n > MAX_THREADS:   # a constant count: known now
            loc = self.loc
            raise ThreadCountError(f"{loc.filename}:{loc.lineno}: this parallel loop has {n:,} threads, more "
                                   f"than a launch holds (2**31 - 1); split it into several launches"
                                   f"\n    {loc.source.strip()}")
        task.num_threads = self.typed(n) if isinstance(n, N.Stmt) else self.const(n)
        self.block = task.body
        tid = self.emit(N.ThreadIndex())
        bounds = self.eval_dims(dims)   # re-evaluated in the body: header values do not dominate it
        values = []
        for k in reversed(range(len(bounds))):
            lo, hi, step = bounds[k]
            if k == 0:
                local = tid
            else:
                ext = self.extent(lo, hi, step)
                local = self.binop("%", tid, ext)
                tid = self.binop("//", tid, ext)
            values.append(self.binop("+", lo, self.binop("*", local, step) if step != 1 else local))
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if len(targets) != len(values):
            self.error(f"loop has {len(values)} indices but {len(targets)} targets")
        for t, v in zip(targets, reversed(values)):
            if not isinstance(t, ast.Name):
                self.error("loop targets must be names")
            self.scope.names[t.id] = v
            self.index_blocks[id(v)] = task.body
        self.loops.append("parallel")
        if any(self.continues_this_loop(s) for s in node.body):
            wrap = self.emit(N.RangeFor(self.const(0), self.const(1), 1, N.Block()))
            self.loops.append(wrap)
            self.block = wrap.body
            self.visit_body(node.body)
            self.loops.pop()
        else:
            self.visit_body(node.body)
        self.loops.pop()
        for t in targets:
            self.scope.names[t.id] = ENDED
        self.task = None

    def continues_this_loop(self, node):
        """Whether `node` holds a `continue` of the loop it is in (none nested in an inner loop or def)."""
        pending = [node]   # (a walk, not recursion: one expression may nest thousands of operators)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.Continue):
                return True
            if not isinstance(node, (ast.For, ast.While, ast.FunctionDef)):
                pending.extend(ast.iter_child_nodes(node))
        return False

    def parallel_dims(self, node):
        """The AST argument lists of each parallel dimension: [(args...)] for range/ndrange; (array, axis) for
        a loop over an ndarray."""
        it = node.iter
        if not isinstance(it, ast.Call):
            return self.array_dims(node)
        fn = self.peek(it.func)
        if fn is range:
            return [("range", it.args)]
        if getattr(fn, "_spvad_builtin", None) == "ndrange":
            return [("extent", [a]) for a in it.args]
        self.at(node)
        self.error("a parallel loop must iterate over range(...), sp.ndrange(...) or an ndarray")

    def array_dims(self, node):
        """`for i, j in x:` over an ndarray (or `x.grad`): one parallel dimension per axis of x, as Taichi's
        loop over a field."""
        self.at(node)
        base = self.visit(node.iter)
        arr = base.array if isinstance(base, FieldRef) else base
        if not isinstance(arr, N.ArrayParam):
            self.error("a parallel loop must iterate over range(...), sp.ndrange(...) or an ndarray")
        ndim = user_ndim(self, arr)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if len(targets) != ndim:
            names = ", ".join("ijkl"[k] if k < 4 else f"i{k}" for k in range(ndim))
            self.error(f"array '{arr.name}' has {ndim} dimension(s): a loop over it takes one index per "
                       f"dimension (for {names} in {arr.name})")
        return [("axis", (arr, k)) for k in range(ndim)]

    def eval_dims(self, dims):
        out = []
        for kind, args in dims:
            if kind == "axis":   # over an ndarray: 0 .. its extent along the axis
                lo, hi, step = 0, self.emit(N.ArrayShape(*args)), 1
            elif kind == "range":
                lo, hi, step = self.range_args(args)
            else:
                v = self.visit(args[0])
                if isinstance(v, tuple):
                    if len(v) != 2:
                        self.error("sp.ndrange takes extents or (begin, end) pairs")
                    lo, hi, step = v[0], v[1], 1
                else:
                    lo, hi, step = 0, v, 1
            out.append((self.index_value(lo), self.index_value(hi), step))
        return out

    def extent(self, lo, hi, step):
        """len(range(lo, hi, step)) with no intermediate outside 32 bits unless the count itself is (the usual
        (hi - lo + |step| - 1) // |step| overflows near 2**31): the count of [a, b) in steps of s = |step|."""
        a, b, s = (lo, hi, step) if step > 0 else (hi, lo, -step)
        b = max(a, b) if isinstance(a, int) and isinstance(b, int) else self.minmax(Op.MAX, b, a)   # empty: 0
        if s == 1:
            return self.binop("-", b, a)
        # a = s qa + ra, b = s qb + rb (floor division, 0 <= r < s): ceil((b - a) / s) = qb - qa + (rb > ra),
        # where |qb - qa| <= 2**32 / s fits for s >= 2
        q = self.binop("-", self.binop("//", b, s), self.binop("//", a, s))
        return self.binop("+", q, self.select(self.binop(">", self.binop("%", b, s), self.binop("%", a, s)), 1, 0))

    def range_args(self, args):
        vals = [self.visit(a) for a in args]
        if not 1 <= len(vals) <= 3:
            self.error("range takes 1 to 3 arguments")
        if len(vals) == 1:
            vals = [0, vals[0]]
        step = vals[2] if len(vals) == 3 else 1
        if not isinstance(step, int) or isinstance(step, bool) or step == 0:
            self.error("the step of range() must be a nonzero compile-time integer")
        return vals[0], vals[1], step

    def index_value(self, v):
        if isinstance(v, VecValue):
            self.error(f"indices and loop bounds must be integers, got a {v.name}")
        if isinstance(v, bool) or isinstance(v, float):
            self.error(f"expected an integer, got {v!r}")
        if isinstance(v, int):
            return v
        if not isinstance(v, N.Stmt) or v.dtype.is_float:
            self.error("indices and loop bounds must be integers")
        return self.cast(v, T.i32)

"""The frontend: one AST visitor turning a `@sp.kernel` body (and inlined `@sp.func`s) into typed IR.

Top-level `for` loops become parallel tasks (one dispatch each), other top-level statements become
single-thread tasks; pure top-level assignments (`n = x.shape[0]`) are re-evaluated where used.
"""
import ast

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import Op
from . import array_reads, funcs
from .arrays import (array_param, atomic_element, component_target, list_items, load_element, store_element,
                     subscript_target, user_ndim)
from .derivatives import Transform
from .exprs import ExprVisitor
from .local_arrays import assign_local_element, local_array_name
from .matrices import make_matrix
from .random_numbers import RandomState
from .source import FunctionSource
from .structs import StructSpec, bind_struct
from .tasks import TasksMixin
from .values import (ENDED, ArraySpec, FieldRef, Lazy, Scope, ShapeRef, TemplateSpec, TemplateValue,
                     VectorArgSpec)
from .vectors import MatValue, VecArg, VecSlots, VecValue, assign_vector_name, make_vector
from .weak_floats import Widening


class KernelBuilder(TasksMixin, ExprVisitor):
    """The visitor: statements here, expressions in ExprVisitor, parallel and serial tasks in TasksMixin; calls,
    arrays, vectors, matrices, local arrays and @sp.func inlining are functions of the builder in their
    modules."""
    return_slot, return_stores, early = None, None, None   # of the @sp.func being inlined (funcs.py)
    statement_call = None   # the call that is a whole expression statement (its value is discarded)
    none_result = None      # (func name, Loc, what) after inlining a func that may return None

    def __init__(self, src: FunctionSource, specs, widening=Widening()):
        super().__init__(widening)
        self.src, self.specs = src, specs
        self.kernel = N.Kernel(src.name, [], [], [], src.filename)
        self.param_bindings = []          # per Python parameter: ('array', ArrayParam) | ('scalar', ScalarParam)
        #                                   | ('vector', (ScalarParam per component))
        self.captured = []                # (ArrayParam, GlobalName, (dtype, ndim, grad?, dual?)) of each
        #                                   ndarray read through a global name
        self.vector_arrays = {}           # ArrayParam of an ndarray of vectors / matrices -> element shape
        #                                   (its trailing storage axes)
        self.loops = []                   # stack of "parallel" | RangeFor | While | "static"
        self.task = None
        self.slot_tasks = {}              # Alloca -> the task it is a local of (a dispatch sees only its own)
        self.inline_stack = []
        self.index_blocks = {}            # id of a loop index value -> the block it is bound in
        self.random = RandomState()       # sp.random / sp.randn (random_numbers.py)
        self.read_values = {}             # (id of an ArrayRead, id of a task) -> its value there
        self.read_uses = {}               # (.., .., in the header) -> (ArrayRead, task, Loc, arrays it read)
        self.trial_task = None            # in try_lazy_assign: the task it runs in (self.task is None)
        self.hoisting = False             # in array_reads' hoisting

    # ---- entry ----
    def build(self):
        fn = self.src.tree
        scope = Scope(self.src)
        args = fn.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            self.at(fn)
            self.error("kernel parameters must be plain positional parameters without defaults")
        if len(args.args) != len(self.specs):
            self.at(fn)
            self.error(f"kernel takes {len(args.args)} parameters, specialised with {len(self.specs)}")
        for a, spec in zip(args.args, self.specs):
            if isinstance(spec, ArraySpec):
                p = array_param(self, a.arg, spec.dtype, spec.ndim, spec.needs_grad, spec.needs_dual)
                self.param_bindings.append(("array", p))
                scope.names[a.arg] = p
            elif isinstance(spec, VectorArgSpec):
                params = []
                for k in range(T.vector_width(spec.dtype)):
                    params.append(N.ScalarParam(f"{a.arg}_{k}", spec.dtype.dtype, len(self.kernel.scalars)))
                    self.kernel.scalars.append(params[-1])
                self.param_bindings.append(("vector", tuple(params)))
                scope.names[a.arg] = VecArg(params, spec.dtype.shape)
            elif isinstance(spec, StructSpec):   # a dataclass: its fields as arguments (structs.py)
                scope.names[a.arg] = bind_struct(self, a.arg, spec)
            elif isinstance(spec, TemplateSpec):   # sp.template(): a compile-time value, as a global is
                getattr(spec, "check_unchanged", lambda: None)()   # a method's self (objects.ObjectSpec)
                self.param_bindings.append(("template", None))
                scope.names[a.arg] = TemplateValue(spec.value)
            else:
                p = N.ScalarParam(a.arg, spec, len(self.kernel.scalars))
                self.kernel.scalars.append(p)
                self.param_bindings.append(("scalar", p))
                scope.names[a.arg] = p
        self.scope = scope
        body = self.src.body_without_docstring()
        self.variables = self.src.variables()
        serial = []
        for stmt in body:
            if isinstance(stmt, ast.For) and not self.is_static_iter(stmt.iter):
                self.flush_serial(serial)
                self.parallel_task(stmt)
            else:
                serial.append(stmt)
        self.flush_serial(serial)
        self.kernel.distinct = array_reads.check(self)
        return self.kernel

    def at(self, node):
        self.loc = self.src.loc(node)

    def is_static_iter(self, node):
        return isinstance(node, ast.Call) and getattr(self.peek(node.func), "_spvad_builtin", None) == "static"

    def peek(self, node):
        """Resolve a Name/Attribute to its Python object without emitting IR (None if not resolvable)."""
        if isinstance(node, ast.Name):
            if node.id in self.scope.names:
                return None
            return self.src.lookup(node.id, None)
        if isinstance(node, ast.Attribute):
            base = self.peek(node.value)
            return getattr(base, node.attr, None) if base is not None else None
        return None

    def try_lazy_assign(self, stmt):
        """Bind a top-level `name = expr` (or `a, b = ...`) without a local when its value is valid in any task:
        one of arguments and shapes becomes a Lazy, re-evaluated where used; one reading arrays an ArrayRead
        (array_reads.py). False: the statement is an ordinary one."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return False
        target = stmt.targets[0]
        unpack = isinstance(target, ast.Tuple)
        names = [e.id for e in target.elts if isinstance(e, ast.Name)] if unpack else [getattr(target, "id", None)]
        if None in names or (unpack and len(names) != len(target.elts)):
            return False
        if any(n in self.variables for n in names):
            return False   # assigned again in a loop or if (`acc = 0.0` ... `acc = acc + x[k]`): a local
        scratch = N.Block()
        # tried as between tasks (a local, a random draw fails), though ArrayReads are this task's values
        saved, self.block, self.task, self.trial_task = self.block, scratch, None, self.task
        try:
            self.at(stmt)
            value = self.visit(stmt.value)
            values = self.unpack(value, len(names)) if unpack else [value]
        except Exception:
            return False
        finally:
            self.block, self.task, self.trial_task = saved, self.trial_task, None
        loads = array_reads.array_loads(scratch)
        if loads is None or not all(isinstance(v, (N.Stmt, VecValue) + PY_SCALARS) for v in values):
            return False
        # A snapshot of the names it may read: a later rebinding must not change it.
        snapshot = Scope(self.scope.src, self.scope.names)
        if loads:
            array_reads.bind(self, stmt.value, names, values, unpack, snapshot, scratch)
            return True
        for k, (name, v) in enumerate(zip(names, values)):   # arguments only: valid in any task
            self.scope.names[name] = v if isinstance(v, PY_SCALARS) else Lazy(stmt.value, snapshot,
                                                                                k if unpack else None)
        return True

    def as_tuple(self, value):
        """A tuple, `x.shape`'s values, a vector's components, a list of ndarrays' arrays; None for anything else."""
        if isinstance(value, ShapeRef):
            return tuple(self.emit(N.ArrayShape(value.array, k)) for k in range(user_ndim(self, value.array)))
        if isinstance(value, MatValue):
            return tuple(value.row(i) for i in range(value.rows))
        if isinstance(value, VecValue):
            return value.comps
        return value if isinstance(value, tuple) else list_items(self, value)   # (None: no tuple)

    def unpack(self, value, n):
        """The elements of a tuple (or of `x.shape`) assigned to `n` targets."""
        value = self.as_tuple(value)
        if value is None or len(value) != n:
            self.error("tuple assignment needs a tuple of the same length on the right")
        return value

    # ---- statements ----
    def visit_body(self, stmts):
        for k, s in enumerate(stmts):
            self.at(s)
            self.visit(s)
            if self.block.stmts and isinstance(self.block.stmts[-1], (N.Break, N.Continue)):
                return   # the rest of this block is unreachable
            if self.early is not None and id(s) in self.early.returning:   # a @sp.func may have returned
                return funcs.after_return_point(self, s, lambda: self.visit_body(stmts[k + 1:]), k + 1 < len(stmts))

    def generic_visit(self, node):
        self.at(node) if hasattr(node, "lineno") else None   # (a lambda on a continuation line: its own line)
        name = type(node).__name__
        hint = {"ListComp": "list comprehensions", "Lambda": "lambda", "Try": "try/except", "With": "with",
                "DictComp": "dict comprehensions", "SetComp": "set comprehensions", "GeneratorExp":
                "generator expressions", "FunctionDef": "nested function definitions", "ClassDef": "classes",
                "Global": "global", "Nonlocal": "nonlocal", "Raise": "raise", "Assert": "assert",
                "Delete": "del", "Import": "import", "ImportFrom": "import", "Yield": "yield",
                "Await": "await", "JoinedStr": "f-strings", "List": "lists", "Dict": "dicts", "Set": "sets",
                "Starred": "star expressions", "NamedExpr": "the walrus operator", "Slice": "slices",
                "Match": "match"}.get(name, name)
        self.error(f"unsupported Python in a kernel: {hint}")

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and (isinstance(node.value.value, str) or node.value.value is ...):
            return   # a docstring, or `...` (a body that does nothing, as `pass`)
        self.statement_call = node.value
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node):
        if not isinstance(node.target, ast.Name) or node.value is None:
            self.error("annotated assignment needs a name and a value")
        dtype = self.visit(node.annotation)
        if isinstance(dtype, T.Vector):
            return self.assign(node.target, make_vector(self, dtype, [self.visit(node.value)]))
        if isinstance(dtype, T.Matrix):
            return self.assign(node.target, make_matrix(self, dtype, [self.visit(node.value)]))
        if not isinstance(dtype, T.DType):
            self.error("annotation of a local must be an spvad dtype such as sp.f32, sp.vec3 or sp.mat3")
        self.assign(node.target, self.strong(self.cast(self.visit(node.value), dtype)), dtype)

    def assign(self, target, value, dtype=None):
        target = component_target(self, target)   # a[i].x = v
        if isinstance(target, ast.Tuple):
            for t, v in zip(target.elts, self.unpack(value, len(target.elts))):
                self.assign(t, v)
        elif isinstance(target, ast.Name):
            self.assign_name(target.id, value, dtype)
        elif isinstance(target, (ast.Subscript, ast.Attribute)) and local_array_name(self, target):
            assign_local_element(self, target, value)
        elif isinstance(target, ast.Subscript):
            arr, field, idx = subscript_target(self, target)
            store_element(self, arr, field, idx, value)
        else:
            self.error("can only assign to names, array elements, vector / matrix elements and tuples of them")

    def assign_name(self, name, value, dtype=None):
        cur = self.scope.names.get(name)
        if cur is ENDED or (isinstance(cur, (N.Alloca, VecSlots)) and not self.in_this_task(cur)):
            cur = None   # a fresh binding: the old local lived in another dispatch (or was a loop index)
        fresh_ok = cur is None or isinstance(cur, (Lazy, N.Alloca, VecSlots) + PY_SCALARS) or name in self.assignable
        if not fresh_ok and isinstance(value, (N.Stmt, VecValue) + PY_SCALARS):
            local = self.local_from_binding(name, cur, value, dtype)
            if local is not None:
                cur, fresh_ok = local, True
        if isinstance(value, VecValue) or isinstance(cur, VecSlots):
            if not fresh_ok:
                self.error(f"cannot assign to '{name}' (a loop index or kernel argument)")
            return assign_vector_name(self, name, cur, value)
        if isinstance(value, (tuple, N.ArrayParam, FieldRef, Transform)) and not isinstance(cur, N.Alloca):
            self.scope.names[name] = value     # compile-time aliases (tuples, arrays, `df = sp.grad(f)`)
            return
        if isinstance(cur, N.Alloca):
            self.store_local(name, cur, value)
            return
        if not fresh_ok:
            self.error(f"cannot assign to '{name}' (a loop index or kernel argument)")
        v = self.typed(value)
        slot = self.new_slot(dtype or v.dtype, name, () if dtype else (v,))
        self.scope.names[name] = slot
        self.emit(N.LocalStore(slot, self.cast(v, slot.dtype)))

    def local_from_binding(self, name, cur, value, dtype):
        """A loop index or kernel argument assigned in the body (`i = sp.cast(i, sp.i32)`, `x = x * 2`) turns
        into a local holding it from where it was bound (the top of its loop's body, or of the task), so the
        iteration is unaffected and every read sees what Python would. None: `cur` is no such binding."""
        if isinstance(cur, VecArg):
            inits, block, anchor = [N.ScalarArg(p) for p in cur.params], self.task.body, None
        elif isinstance(cur, N.ScalarParam):
            inits, block, anchor = [N.ScalarArg(cur)], self.task.body, None
        elif isinstance(cur, N.Stmt) and id(cur) in self.index_blocks:
            inits, block, anchor = [cur], self.index_blocks[id(cur)], cur
        else:
            return None
        if isinstance(value, VecValue) != isinstance(cur, VecArg):
            what = "vector" if isinstance(cur, VecArg) else "scalar"
            self.error(f"'{name}' (a loop index or kernel argument) holds a {what}; cannot assign a "
                       f"{getattr(value, 'name', 'scalar')} to it")
        if isinstance(cur, VecArg):
            slots = [self.new_slot(p.dtype, f"{name}_{k}") for k, p in enumerate(cur.params)]
            local = VecSlots(slots, cur.shape)
        else:
            was, new = inits[0].dtype, self.typed_probe(value)
            slots = [self.new_slot(dtype or (T.promote(was, new) if new != was else was), name)]
            local = slots[0]
        stmts = []
        for slot, init in zip(slots, inits):
            if init is not anchor:
                stmts.append(init)   # an argument's ScalarArg, read at the top of the task
            if init.dtype != slot.dtype:
                init = N.Compute(Op.CAST, (init,), slot.dtype)
                stmts.append(init)
            stmts.append(N.LocalStore(slot, init))
        for st in stmts:
            st.loc = self.loc
        at = self.alloca_at if anchor is None else block.stmts.index(anchor) + 1
        block.stmts[at:at] = stmts
        self.scope.names[name] = local
        return local

    def new_slot(self, dtype, name, first_values=()):
        """A local of the current task: its Alloca goes to the top of the task body. One whose `first_values`
        are weak floats is f64 when an earlier build saw it meet f64 (weak_floats.py)."""
        slot = self.local_slot(dtype, name, first_values)
        slot.loc = self.loc
        self.slot_tasks[slot] = self.task
        self.task.body.stmts.insert(self.alloca_at, slot)
        self.alloca_at += 1
        return slot

    def in_this_task(self, local):
        """Is `local` (an Alloca or VecSlots) a local of the task being built?"""
        slot = local.slots[0] if isinstance(local, VecSlots) else local
        return self.slot_tasks.get(slot) is self.task

    def store_local(self, name, slot, value):
        """Store into an existing local slot, converting as its first assignment fixed its dtype."""
        self.check_same_task(name, slot)
        self.emit(N.LocalStore(slot, self.stored_value(name, slot, value)))

    def stored_value(self, name, slot, value):
        """`value` converted for the local `slot` (or group of slots), whose dtype its first assignment fixed;
        a float into an int local is refused (it would truncate)."""
        dtype = slot.dtype
        v = self.typed(value, like=N.Const(0, dtype))
        if dtype.is_int and v.dtype.is_float:
            self.error(f"local '{name}' holds {dtype} (from its first assignment); assigning a "
                       f"{v.dtype} would truncate it: give it a float first value, e.g. {name} = 0.0")
        if dtype.is_float and v.dtype.bits > dtype.bits and not self.widenable(slot):
            self.error(f"local '{name}' holds {dtype} (from its first assignment, an {dtype} value); assigning an "
                       f"{v.dtype} would round it: convert it (sp.{dtype}(...)), or make the local {v.dtype} from "
                       f"the start (sp.{v.dtype}(...))")
        self.note_store(slot, v)
        return self.cast(v, dtype)

    @property
    def assignable(self):
        return getattr(self.scope, "params", ())

    def visit_AugAssign(self, node):
        sym, target = self.OPS[type(node.op)], component_target(self, node.target)   # a[i].y -= v
        if isinstance(target, (ast.Subscript, ast.Attribute)) and local_array_name(self, target):
            assign_local_element(self, target, self.visit(node.value), sym)
        elif isinstance(target, ast.Subscript):
            arr, field, idx = subscript_target(self, target)
            value = self.visit(node.value)
            if sym in ("+", "-"):
                atomic_element(self, Op.ATOMIC_ADD, arr, field, idx, value, negate=sym == "-")
                return
            old = load_element(self, arr, field, idx)
            store_element(self, arr, field, idx, self.binop(sym, old, value))
        elif isinstance(target, ast.Name):
            cur = self.load_name(target.id)
            self.assign_name(target.id, self.binop(sym, cur, self.visit(node.value)))
        else:
            self.error("augmented assignment needs a name or an array element")

    def visit_If(self, node):
        cond = self.to_bool(self.visit(node.test))
        if isinstance(cond, bool):
            self.visit_body(node.body if cond else node.orelse)
            return
        stmt = self.emit(N.If(cond, N.Block(), N.Block()))
        self.in_block(stmt.then_body, node.body)
        self.in_block(stmt.else_body, node.orelse)

    def in_block(self, block, stmts):
        saved, self.block = self.block, block
        self.visit_body(stmts)
        self.block = saved

    def visit_For(self, node):
        if node.orelse:
            self.error("for-else is not supported")
        if self.is_static_iter(node.iter):
            return self.static_for(node)
        it = node.iter
        fn = self.peek(it.func) if isinstance(it, ast.Call) else None
        if fn is range:
            dims = [self.range_args(it.args)]
        elif getattr(fn, "_spvad_builtin", None) == "ndrange":
            dims = [(0, v, 1) if not isinstance(v, tuple) else (v[0], v[1], 1) for v in map(self.visit, it.args)]
        elif isinstance(it, (ast.Name, ast.Attribute)) and isinstance(self.visit(it), (N.ArrayParam, FieldRef)):
            self.error("a loop over an ndarray (`for i, j in x`) runs in parallel, so it must be an outermost loop "
                       "of the kernel (as in Taichi); inside a loop use range(x.shape[0]), ...")
        else:
            self.error("a loop must iterate over range(...), sp.ndrange(...) or sp.static(...)")
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if len(targets) != len(dims) or not all(isinstance(t, ast.Name) for t in targets):
            self.error("loop targets must be names, one per dimension")
        self.nested_range_for(targets, dims, node.body)

    def nested_range_for(self, targets, dims, body):
        lo, hi, step = dims[0]
        loop = self.emit(N.RangeFor(self.cast(self.index_value(lo), T.i32), self.cast(self.index_value(hi), T.i32),
                                    step, N.Block()))
        saved, self.block = self.block, loop.body
        index = self.scope.names[targets[0].id] = self.emit(N.LoopIndex(loop))
        self.index_blocks[id(index)] = loop.body   # where it is bound, should the body assign the name
        self.loops.append(loop)
        if len(dims) > 1:
            self.nested_range_for(targets[1:], dims[1:], body)
        else:
            self.visit_body(body)
        self.loops.pop()
        self.scope.names[targets[0].id] = ENDED
        self.block = saved

    def static_for(self, node):
        source = node.iter.args[0]
        if isinstance(source, (ast.List, ast.Tuple)):   # [(-1, 0), (1, 0)]: an item per iteration, not a matrix
            values = [self.visit(e) for e in source.elts]
        else:
            values = self.visit(source)
        if isinstance(values, range):
            values = list(values)
        values = self.as_tuple(values) or values   # sp.static(x.shape) unrolls over the extents
        if not isinstance(values, (list, tuple)):
            self.error("sp.static(...) in a for loop needs a range or tuple known at compile time")
        self.loops.append("static")
        self.static_iterations(node, list(values))
        self.loops.pop()

    def static_iterations(self, node, values):
        for k, v in enumerate(values):
            self.assign_static_target(node.target, v)
            self.visit_body(node.body)
            if self.early is not None and id(node) in self.early.returning and k + 1 < len(values):
                if any(isinstance(s, ast.Return) for s in node.body):
                    return   # every iteration returns: the later ones are unreachable
                # the iterations after a return are skipped like the statements after it
                return funcs.after_return_point(self, node, lambda: self.static_iterations(node, values[k + 1:]))

    def assign_static_target(self, target, v):
        if isinstance(target, ast.Name):
            self.scope.names[target.id] = v
        elif isinstance(target, ast.Tuple) and isinstance(v, tuple) and len(v) == len(target.elts):
            for t, x in zip(target.elts, v):
                self.assign_static_target(t, x)
        else:
            self.error("cannot unpack this static loop value")

    def visit_While(self, node):
        if node.orelse:
            self.error("while-else is not supported")
        loop = self.emit(N.While(N.Block()))
        saved, self.block = self.block, loop.body
        cond = self.to_bool(self.visit(node.test))
        if isinstance(cond, bool):
            if not cond:
                self.emit(N.Break())
        else:
            self.emit(N.If(self.compute(N.Op.NOT, cond), N.Block([N.Break()]), N.Block()))
        self.loops.append(loop)
        if not (self.block.stmts and isinstance(self.block.stmts[-1], N.Break)):
            self.visit_body(node.body)
        self.loops.pop()
        self.block = saved

    def visit_Break(self, node):
        self.loop_control(N.Break, "break")

    def visit_Continue(self, node):
        self.loop_control(N.Continue, "continue")

    def loop_control(self, cls, word):
        if not self.loops or self.loops[-1] == "static":
            self.error(f"'{word}' outside a loop (or inside sp.static) is not supported")
        if self.loops[-1] == "parallel":
            self.error(f"'{word}' cannot leave a parallel (outermost) loop")
        self.emit(cls())

    def visit_Return(self, node):
        funcs.func_return(self, node)

def build_kernel(pyfunc, specs):
    """Compile `pyfunc` for argument `specs` (ArraySpec or DType per parameter) into a Kernel: built again, with
    those locals f64, while weak float locals meet f64 values (weak_floats.py; kernels without f64 are built
    once).

    Returns (kernel, param_bindings, captured)."""
    src, widening = FunctionSource.of(pyfunc), Widening()
    while True:
        b = KernelBuilder(src, specs, widening)
        kernel = b.build()
        following = b.next_widening()
        if following.wide <= widening.wide:
            return kernel, b.param_bindings, b.captured
        widening = following

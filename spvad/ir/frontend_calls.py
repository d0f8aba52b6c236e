"""Calls inside kernels: spvad builtins (math, casts, atomics), Python builtins, and `@sp.func` inlining."""
import ast

from .. import types as T
from . import nodes as N
from .emit import PY_SCALARS
from .frontend_values import Scope
from .frontend_vectors import VECTOR_BUILTINS, VecSlots, VecValue
from .ops import BINARY_FLOAT, UNARY_FLOAT, Op
from .source import FunctionSource

# `sp.<op name>(...)`: the math ops are called by their Op value (ops.py), so a new op needs no row here
MATH1 = {op.value: op for op in UNARY_FLOAT | {Op.ABS, Op.SIGN}}
MATH2 = {op.value: op for op in BINARY_FLOAT - {Op.POW}}   # float functions of two floats (pow: power())
ATOMICS = {"atomic_add": Op.ATOMIC_ADD, "atomic_max": Op.ATOMIC_MAX, "atomic_min": Op.ATOMIC_MIN}


class CallsMixin:
    def visit_Call(self, node):
        fn = self.visit(node.func)
        kw = {k.arg: self.visit(k.value) for k in node.keywords}
        name = getattr(fn, "_spvad_builtin", None)
        if name in ATOMICS:
            return self.atomic_call(ATOMICS[name], node)
        args = [self.visit(a) for a in node.args]
        if getattr(fn, "_spvad_func", False):
            if kw:
                self.error("keyword arguments to @sp.func are not supported")
            return self.inline(fn, args)
        if isinstance(fn, T.DType):
            return self.cast_any(self.one_arg(args, fn.name), fn)
        if isinstance(fn, T.Vector):
            return self.make_vector(fn, args)
        if fn is T.Vector:
            return self.vector_type_call(args)
        if kw:
            self.error(f"keyword arguments are not supported when calling {getattr(fn, '__name__', fn)}")
        if name is not None:
            return self.builtin(name, args)
        if fn is abs:
            return self.math1(Op.ABS, self.one_arg(args, "abs"))
        if fn is min or fn is max:
            if all(isinstance(a, PY_SCALARS) for a in args):
                return fn(*args)
            return self.minmax(Op.MIN if fn is min else Op.MAX, *args)
        if fn is int:
            v = self.one_arg(args, "int")
            return int(v) if isinstance(v, PY_SCALARS) else self.cast(v, T.i32)
        if fn is float:
            v = self.one_arg(args, "float")
            return float(v) if isinstance(v, PY_SCALARS) else self.cast(v, T.f32 if not (
                isinstance(v, N.Stmt) and v.dtype == T.f64) else T.f64)
        if fn is bool:
            v = self.to_bool(self.one_arg(args, "bool"))
            return v
        if fn is len:
            a = self.one_arg(args, "len")
            if isinstance(a, N.ArrayParam):
                return self.emit(N.ArrayShape(a, 0))
            items = self.as_tuple(a)   # a tuple or x.shape
            if items is not None:
                return len(items)
        if fn is range:
            return range(*args) if all(isinstance(a, int) for a in args) else self.error(
                "range(...) is only supported as the iterable of a for loop")
        self.error(f"cannot call {getattr(fn, '__name__', repr(fn))} inside a kernel "
                   "(only spvad builtins, @sp.func functions and abs/min/max/int/float/bool/len)")

    def one_arg(self, args, what):
        if len(args) != 1:
            self.error(f"{what}() takes exactly one argument")
        return args[0]

    def builtin(self, name, args):
        if name in MATH1:
            v = self.one_arg(args, f"sp.{name}")
            if isinstance(v, PY_SCALARS):
                v = self.const(float(v))
            return self.math1(MATH1[name], v)
        if name in ("min", "max"):
            return self.minmax(Op.MIN if name == "min" else Op.MAX, *args)
        if name == "static":
            return self.one_arg(args, "sp.static")
        if name == "ndrange":
            self.error("sp.ndrange(...) is only supported as the iterable of a for loop")
        if name in VECTOR_BUILTINS:
            return self.vector_builtin(name, args)
        if len(args) == 2 and (name in MATH2 or name == "pow") and any(isinstance(a, VecValue) for a in args):
            return self.elementwise(lambda a, b: self.builtin(name, [a, b]), *args)
        if len(args) == 2 and name == "pow":   # `a ** b` on float(a): integer b exact also for a < 0
            return self.power(self.to_float(args[0]), args[1])
        if len(args) == 2 and name in MATH2:
            a, b = args
            a, b = self.unify(self.to_float(a), self.to_float(b)) if isinstance(a, N.Stmt) or isinstance(
                b, N.Stmt) else (self.to_float(a), self.to_float(b))
            return self.compute(MATH2[name], a, b)
        if name == "clamp" and len(args) == 3:
            return self.minmax(Op.MAX, self.minmax(Op.MIN, args[0], args[2]), args[1])
        if name == "select" and len(args) == 3:
            return self.select(*args)
        if name == "cast" and len(args) == 2 and isinstance(args[1], (T.DType, T.Vector)):
            return self.cast_any(args[0], args[1])
        self.error(f"wrong arguments for sp.{name}")

    def atomic_call(self, op, node):
        if len(node.args) != 2 or not isinstance(node.args[0], ast.Subscript):
            self.error(f"sp.{op.value}(x[i], value) takes an array element and a value")
        arr, field, idx = self.subscript_target(node.args[0])
        return self.atomic_element(op, arr, field, idx, self.visit(node.args[1]))

    # ---- @sp.func inlining ----
    def inline(self, func, args):
        if func in self.inline_stack:
            self.error(f"recursion is not supported (@sp.func {func.fn.__name__} calls itself)")
        src = func.source()
        params = src.tree.args
        if params.vararg or params.kwarg or params.kwonlyargs:
            self.error("@sp.func parameters must be plain positional parameters")
        names = [a.arg for a in params.args]
        defaults = list(func.fn.__defaults__ or ())
        if not len(names) - len(defaults) <= len(args) <= len(names):
            self.error(f"{src.name}() takes {len(names)} arguments, got {len(args)}")
        args = args + defaults[len(args) - len(names):] if len(args) < len(names) else args
        scope = Scope(src)
        scope.params = set(names)
        assigned = src.assigned_names()
        saved = (self.scope, self.loops, self.src, getattr(self, "return_slot", None),
                 getattr(self, "return_stores", None), self.loc)
        self.scope, self.loops, self.src, self.return_slot, self.return_stores = scope, [], src, None, []
        self.inline_stack.append(func)
        try:
            for n, v in zip(names, args):
                if n in assigned and isinstance(v, (N.Stmt, VecValue) + PY_SCALARS):
                    self.assign_name(n, v)
                else:
                    scope.names[n] = v
            return self.func_body(src)
        finally:
            self.inline_stack.pop()
            self.scope, self.loops, self.src, self.return_slot, self.return_stores, self.loc = saved

    def func_body(self, src):
        body = src.body_without_docstring()
        all_returns = [n for n in ast.walk(src.tree) if isinstance(n, ast.Return)]
        tails = tail_returns(body)
        if any(r not in tails for r in all_returns):
            bad = next(r for r in all_returns if r not in tails)
            self.at(bad)
            self.error("return is only supported at the end of a @sp.func (or at the end of both "
                       "branches of a final if/else)")
        if body and isinstance(body[-1], ast.Return) and len(all_returns) == 1:
            self.visit_body(body[:-1])
            self.at(body[-1])
            return self.visit(body[-1].value) if body[-1].value is not None else None
        self.visit_body(body)
        slot = self.return_slot
        if isinstance(slot, VecSlots):
            return VecValue(self.emit(N.LocalLoad(s)) for s in slot.slots)
        return self.emit(N.LocalLoad(slot)) if slot is not None else None

    def func_return(self, node):
        if not self.inline_stack:
            self.error("return is not supported in a kernel (write results into an array)")
        if node.value is None:
            self.error("a bare return in a @sp.func with return values is not supported")
        v = self.visit(node.value)
        if isinstance(v, tuple):
            self.error("returning a tuple is only supported from a single final return statement")
        if isinstance(v, VecValue) or isinstance(self.return_slot, VecSlots):
            return self.vector_return(v)
        slot = self.return_slot
        if slot is None:
            v = self.typed(v)
            slot = self.return_slot = self.new_slot(v.dtype, "ret")
        else:
            v = self.typed(v, like=N.Const(0, slot.dtype))
            if v.dtype != slot.dtype and T.promote(v.dtype, slot.dtype) != slot.dtype:
                self.widen_return_slot(slot, T.promote(v.dtype, slot.dtype))
        store = self.emit(N.LocalStore(slot, self.cast(v, slot.dtype)))
        self.return_stores.append((self.block, store))

    def widen_return_slot(self, slot, dtype):
        """Returns of different types promote, as Python values would (`return 1` / `return v * 0.5`):
        retype the slot and convert the values the earlier returns stored."""
        slot.dtype = dtype
        for block, store in self.return_stores:
            if store.slot is not slot:
                continue   # another component of a vector return
            conv = N.Compute(Op.CAST, (store.value,), dtype)
            conv.loc = store.loc
            block.stmts.insert(block.stmts.index(store), conv)
            store.value = conv


def tail_returns(stmts):
    """Return statements in tail position: the last statement, or the tails of a final if/else."""
    if not stmts:
        return set()
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return {last}
    if isinstance(last, ast.If) and last.orelse:
        a, b = tail_returns(last.body), tail_returns(last.orelse)
        if a and b:
            return a | b
    return set()


def func_source(fn):
    return FunctionSource.of(fn)

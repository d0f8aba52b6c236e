"""Calls inside kernels: spvad builtins (math, casts, atomics), Python builtins, and `@sp.func` inlining."""
import ast

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .derivatives import DERIVATIVE_BUILTINS, Transform, derivative_call
from .random_numbers import RANDOM_BUILTINS
from .printing import print_call
from .values import Scope
from .matrices import MATRIX_BUILTINS, is_type_method
from .methods import BoundMethod, call_method
from .vectors import VECTOR_BUILTINS, VecSlots, VecValue, shaped
from ..ir.ops import BINARY_FLOAT, UNARY_FLOAT, Op
from .source import FunctionSource

# `sp.<op name>(...)`: the math ops are called by their Op value (ops.py), so a new op needs no row here
MATH1 = {op.value: op for op in UNARY_FLOAT | {Op.ABS, Op.SIGN}}
MATH2 = {op.value: op for op in BINARY_FLOAT - {Op.POW}}   # float functions of two floats (pow: power())
ATOMICS = {"atomic_add": Op.ATOMIC_ADD, "atomic_max": Op.ATOMIC_MAX, "atomic_min": Op.ATOMIC_MIN}


class CallsMixin:
    return_slot, return_stores, early = None, None, None   # of the @sp.func being inlined
    statement_call = None   # the call that is a whole expression statement (its value is discarded)
    none_result = None      # (func name, Loc, what) after inlining a func that may return None

    def visit_Call(self, node):
        fn = self.visit(node.func)
        if fn is print:   # its string arguments are not values: printing.py reads them
            return print_call(self, node)
        kw = {k.arg: self.visit(k.value) for k in node.keywords}
        if isinstance(fn, BoundMethod):   # v.dot(w), M.transpose(): methods.py
            return call_method(self, fn, [self.visit(a) for a in node.args], kw)
        name = getattr(fn, "_spvad_builtin", None)
        if name in DERIVATIVE_BUILTINS or isinstance(fn, Transform) or hasattr(fn, "_spvad_transform"):
            # sp.grad & co, or what they returned (in the kernel or at module level): derivatives.py
            return derivative_call(self, fn, node, kw)
        if name in ATOMICS:
            return self.atomic_call(ATOMICS[name], node)
        args = [self.visit(a) for a in node.args]
        if name in RANDOM_BUILTINS:   # sp.random(dtype=...) / sp.randn(dtype=...): random_numbers.py
            return self.random_call(name, args, kw)
        if getattr(fn, "_spvad_func", False):
            value = self.inline(fn, self.func_arguments(fn, args, kw))
            if self.statement_call is not node:   # the value is used: it must not be None
                self.refuse_none_result()
            return value
        if isinstance(fn, T.DType):
            return self.cast_any(self.one_arg(args, fn.name), fn)
        if isinstance(fn, T.TENSOR_TYPES) or fn in T.TENSOR_TYPES or is_type_method(fn):
            return self.tensor_call(fn, args, kw)   # sp.mat3(...), sp.Vector([...]): matrices.py
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
        if name in MATRIX_BUILTINS:
            return self.matrix_builtin(name, args)
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
        """The value of `func` called with `args` (one per parameter), its body inlined here."""
        if func in self.inline_stack:
            self.error(f"recursion is not supported (@sp.func {func.fn.__name__} calls itself)")
        src = func.source()
        names = [a.arg for a in src.tree.args.args + src.tree.args.kwonlyargs]
        scope = Scope(src)
        scope.params = set(names)
        assigned = src.assigned_names()
        saved = (self.scope, self.loops, self.src, self.return_slot, self.return_stores, self.early, self.loc)
        self.scope, self.loops, self.src, self.return_slot, self.return_stores = scope, [], src, None, []
        self.early = None
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
            (self.scope, self.loops, self.src, self.return_slot, self.return_stores, self.early,
             self.loc) = saved

    def func_arguments(self, func, args, kw):
        """One value per parameter of `func` from a call's positional and keyword arguments and the func's
        defaults, refused as Python would refuse them."""
        src = func.source()
        params = src.tree.args
        if params.vararg or params.kwarg or params.posonlyargs:
            self.error("@sp.func parameters must be plain parameters (no *args, **kwargs or /)")
        positional = [a.arg for a in params.args]
        names = positional + [a.arg for a in params.kwonlyargs]
        if len(args) > len(positional):
            self.error(f"{src.name}() takes {len(positional)} positional arguments, got {len(args)}")
        given = dict(zip(positional, args))
        for k, v in kw.items():
            if k not in names:
                self.error(f"{src.name}() got an unexpected keyword argument '{k}'")
            if k in given:
                self.error(f"{src.name}() got multiple values for argument '{k}'")
            given[k] = v
        defaults = dict(zip(positional[len(positional) - len(func.fn.__defaults__ or ()):],
                            func.fn.__defaults__ or ()))
        defaults.update(func.fn.__kwdefaults__ or {})
        missing = [n for n in names if n not in given and n not in defaults]
        if missing:
            self.error(f"{src.name}() missing {len(missing)} required argument{'s' * (len(missing) > 1)}: "
                       + ", ".join(f"'{n}'" for n in missing))
        return [given[n] if n in given else defaults[n] for n in names]

    def func_body(self, src):
        value = self.func_value(src)
        early = self.early   # a value from some paths, None from another: refused where the value is used
        none_path = self.return_slot is not None and early is not None and early.nothing_at is not None
        self.none_result = (src.name,) + early.nothing_at if none_path else None
        return value

    def func_value(self, src):
        body = src.body_without_docstring()
        returns = [n for n in ast.walk(src.tree) if isinstance(n, ast.Return)]
        if body and isinstance(body[-1], ast.Return) and len(returns) == 1:
            self.visit_body(body[:-1])
            self.at(body[-1])
            return self.visit(body[-1].value) if body[-1].value is not None else None
        bare = sum(r.value is None for r in returns)
        if set(returns) <= tail_returns(body) and bare in (0, len(returns)):
            self.visit_body(body)   # every path ends in a return: each stores into the return slot
        else:
            self.early_returns(src, body)
        return self.return_value()

    def early_returns(self, src, body):
        """Returns before the end: each sets a `returned` flag (and leaves its loops by `break`); the
        statements after one that may have returned run only while the flag is unset."""
        flag = self.new_slot(T.u1, "returned")
        self.emit(N.LocalStore(flag, self.const(False)))
        returning = {id(s) for s in ast.walk(src.tree) if isinstance(s, ast.stmt) and any(
            isinstance(n, ast.Return) for n in ast.walk(s))}
        self.early = EarlyReturns(flag, returning)
        self.visit_body(body)
        if not always_returns(body):
            end = src.loc(ast.Pass(lineno=body[-1].end_lineno))   # the func's last line
            self.early.nothing_at = self.early.nothing_at or (end, "its end")

    def refuse_none_result(self):
        """After inlining a func whose value is used: refuse it if some path returns None (Python's value)."""
        if self.none_result is None:
            return
        name, loc, what = self.none_result
        self.none_result = None
        caller = self.loc
        self.loc = loc
        self.error(f"@sp.func {name} returns a value on some paths but None from {what} here, and its call at "
                   f"{caller.filename}:{caller.lineno} uses the value: return a value on every path")

    def return_value(self):
        slot = self.return_slot
        if slot is None:
            return None
        if isinstance(slot, VecSlots):
            return shaped([self.emit(N.LocalLoad(s)) for s in slot.slots], slot.shape)
        return self.emit(N.LocalLoad(slot))

    def func_return(self, node):
        if not self.inline_stack:
            self.error("return is not supported in a kernel (write results into an array)")
        if node.value is not None:
            self.store_return_value(self.visit(node.value))
        elif self.early is not None and self.early.nothing_at is None:
            self.early.nothing_at = (self.loc, "a bare return")
        if self.early is not None:
            self.emit(N.LocalStore(self.early.flag, self.const(True)))
            if self.in_func_loop():
                self.emit(N.Break())

    def store_return_value(self, v):
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

    def in_func_loop(self):
        """Inside a dynamic loop of the func being inlined (a `return` there must also `break`)?"""
        return any(loop != "static" for loop in self.loops)

    def after_return_point(self, stmt, visit_rest, has_rest=True):
        """After `stmt`, which may have returned. In a loop a return already left it by `break` (an inner
        loop's return leaves this loop too); outside loops the rest runs only if nothing returned."""
        if isinstance(stmt, ast.Return):
            return   # the rest of the block is unreachable
        if self.in_func_loop():
            if isinstance(stmt, (ast.For, ast.While)) and not self.is_static_iter(getattr(stmt, "iter", None)):
                self.emit(N.If(self.emit(N.LocalLoad(self.early.flag)), N.Block([N.Break()]), N.Block()))
            visit_rest()
            return
        if not has_rest:
            return
        not_returned = self.compute(Op.NOT, self.emit(N.LocalLoad(self.early.flag)))
        guard = self.emit(N.If(not_returned, N.Block(), N.Block()))
        saved, self.block = self.block, guard.then_body
        visit_rest()
        self.block = saved

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


class EarlyReturns:
    """A @sp.func being inlined with returns before its end."""

    def __init__(self, flag, returning):
        self.flag = flag                # u1 local: has the func returned?
        self.returning = returning      # ids of the statements that contain a return
        self.nothing_at = None          # (Loc, what) of the first path that returns no value


def always_returns(stmts):
    """Does every path through `stmts` end in a return? (`while True` without break never ends.)"""
    for s in stmts:
        if isinstance(s, ast.Return):
            return True
        if isinstance(s, ast.If) and always_returns(s.body) and always_returns(s.orelse):
            return True
        if isinstance(s, ast.While) and isinstance(s.test, ast.Constant) and s.test.value and not breaks(s.body):
            return True
    return False


def breaks(stmts):
    """Is there a `break` leaving the loop whose body is `stmts` (not one of an inner loop)?"""
    todo = list(stmts)
    while todo:
        s = todo.pop()
        if isinstance(s, ast.Break):
            return True
        if not isinstance(s, (ast.For, ast.While)):
            todo.extend(c for c in ast.iter_child_nodes(s) if isinstance(c, ast.stmt))
    return False


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

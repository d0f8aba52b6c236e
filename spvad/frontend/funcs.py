"""`@sp.func` calls: the func's body inlined where it is called, its returns (anywhere, of scalars, vectors or
matrices, promoting as Python values would) stored into return slots. Functions of the kernel builder `b`."""
import ast

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import Op
from .rows import keyword_values
from .values import Scope
from .vectors import VecSlots, VecValue, shaped


def call_func(b, fn, node):
    """The row of a @sp.func called in a kernel: its value, which must not be None when it is used."""
    kw = keyword_values(b, node)
    value = inline(b, fn, func_arguments(b, fn, [b.visit(a) for a in node.args], kw))
    if b.statement_call is not node:   # the value is used
        refuse_none_result(b)
    return value


# ---- @sp.func inlining ----
def inline(b, func, args):
    """The value of `func` called with `args` (one per parameter), its body inlined here."""
    if func in b.inline_stack:
        b.error(f"recursion is not supported (@sp.func {func.fn.__name__} calls itself)")
    src = func.source()
    names = [a.arg for a in src.tree.args.args + src.tree.args.kwonlyargs]
    scope = Scope(src)
    scope.params = set(names)
    assigned = src.assigned_names()
    saved = (b.scope, b.loops, b.src, b.return_slot, b.return_stores, b.early, b.loc)
    b.scope, b.loops, b.src, b.return_slot, b.return_stores = scope, [], src, None, []
    b.early = None
    b.inline_stack.append(func)
    try:
        for n, v in zip(names, args):
            if n in assigned and isinstance(v, (N.Stmt, VecValue) + PY_SCALARS):
                b.assign_name(n, v)
            else:
                scope.names[n] = v
        return func_body(b, src)
    finally:
        b.inline_stack.pop()
        (b.scope, b.loops, b.src, b.return_slot, b.return_stores, b.early,
         b.loc) = saved


def func_arguments(b, func, args, kw):
    """One value per parameter of `func` from a call's positional and keyword arguments and the func's
    defaults, refused as Python would refuse them."""
    src = func.source()
    params = src.tree.args
    if params.vararg or params.kwarg or params.posonlyargs:
        b.error("@sp.func parameters must be plain parameters (no *args, **kwargs or /)")
    positional = [a.arg for a in params.args]
    names = positional + [a.arg for a in params.kwonlyargs]
    if len(args) > len(positional):
        b.error(f"{src.name}() takes {len(positional)} positional arguments, got {len(args)}")
    given = dict(zip(positional, args))
    for k, v in kw.items():
        if k not in names:
            b.error(f"{src.name}() got an unexpected keyword argument '{k}'")
        if k in given:
            b.error(f"{src.name}() got multiple values for argument '{k}'")
        given[k] = v
    defaults = dict(zip(positional[len(positional) - len(func.fn.__defaults__ or ()):],
                        func.fn.__defaults__ or ()))
    defaults.update(func.fn.__kwdefaults__ or {})
    missing = [n for n in names if n not in given and n not in defaults]
    if missing:
        b.error(f"{src.name}() missing {len(missing)} required argument{'s' * (len(missing) > 1)}: "
                   + ", ".join(f"'{n}'" for n in missing))
    return [given[n] if n in given else defaults[n] for n in names]


def func_body(b, src):
    value = func_value(b, src)
    early = b.early   # a value from some paths, None from another: refused where the value is used
    none_path = b.return_slot is not None and early is not None and early.nothing_at is not None
    b.none_result = (src.name,) + early.nothing_at if none_path else None
    return value


def func_value(b, src):
    body = src.body_without_docstring()
    returns = [n for n in ast.walk(src.tree) if isinstance(n, ast.Return)]
    if body and isinstance(body[-1], ast.Return) and len(returns) == 1:
        b.visit_body(body[:-1])
        b.at(body[-1])
        return b.visit(body[-1].value) if body[-1].value is not None else None
    bare = sum(r.value is None for r in returns)
    if set(returns) <= tail_returns(body) and bare in (0, len(returns)):
        b.visit_body(body)   # every path ends in a return: each stores into the return slot
    else:
        early_returns(b, src, body)
    return return_value(b)


def early_returns(b, src, body):
    """Returns before the end: each sets a `returned` flag (and leaves its loops by `break`); the
    statements after one that may have returned run only while the flag is unset."""
    flag = b.new_slot(T.u1, "returned")
    b.emit(N.LocalStore(flag, b.const(False)))
    returning = {id(s) for s in ast.walk(src.tree) if isinstance(s, ast.stmt) and any(
        isinstance(n, ast.Return) for n in ast.walk(s))}
    b.early = EarlyReturns(flag, returning)
    b.visit_body(body)
    if not always_returns(body):
        end = src.loc(ast.Pass(lineno=body[-1].end_lineno))   # the func's last line
        b.early.nothing_at = b.early.nothing_at or (end, "its end")


def refuse_none_result(b):
    """After inlining a func whose value is used: refuse it if some path returns None (Python's value)."""
    if b.none_result is None:
        return
    name, loc, what = b.none_result
    b.none_result = None
    caller = b.loc
    b.loc = loc
    b.error(f"@sp.func {name} returns a value on some paths but None from {what} here, and its call at "
               f"{caller.filename}:{caller.lineno} uses the value: return a value on every path")


def return_value(b):
    slot = b.return_slot
    if slot is None:
        return None
    if isinstance(slot, VecSlots):
        return shaped([b.emit(N.LocalLoad(s)) for s in slot.slots], slot.shape)
    return b.emit(N.LocalLoad(slot))


def func_return(b, node):
    if not b.inline_stack:
        b.error("return is not supported in a kernel (write results into an array)")
    if node.value is not None:
        store_return_value(b, b.visit(node.value))
    elif b.early is not None and b.early.nothing_at is None:
        b.early.nothing_at = (b.loc, "a bare return")
    if b.early is not None:
        b.emit(N.LocalStore(b.early.flag, b.const(True)))
        if in_func_loop(b):
            b.emit(N.Break())


def store_return_value(b, v):
    if isinstance(v, tuple):
        b.error("returning a tuple is only supported from a single final return statement")
    if isinstance(v, VecValue) or isinstance(b.return_slot, VecSlots):
        return vector_return(b, v)
    slot = b.return_slot
    if slot is None:
        v = b.typed(v)
        slot = b.return_slot = b.new_slot(v.dtype, "ret", (v,))
    store_return(b, slot, v)


def in_func_loop(b):
    """Inside a dynamic loop of the func being inlined (a `return` there must also `break`)?"""
    return any(loop != "static" for loop in b.loops)


def after_return_point(b, stmt, visit_rest, has_rest=True):
    """After `stmt`, which may have returned. In a loop a return already left it by `break` (an inner
    loop's return leaves this loop too); outside loops the rest runs only if nothing returned."""
    if isinstance(stmt, ast.Return):
        return   # the rest of the block is unreachable
    if in_func_loop(b):
        if isinstance(stmt, (ast.For, ast.While)) and not b.is_static_iter(getattr(stmt, "iter", None)):
            b.emit(N.If(b.emit(N.LocalLoad(b.early.flag)), N.Block([N.Break()]), N.Block()))
        visit_rest()
        return
    if not has_rest:
        return
    not_returned = b.compute(Op.NOT, b.emit(N.LocalLoad(b.early.flag)))
    guard = b.emit(N.If(not_returned, N.Block(), N.Block()))
    saved, b.block = b.block, guard.then_body
    visit_rest()
    b.block = saved


def store_return(b, slot, v):
    """Store a returned scalar (or component) into its return slot, widening the slot first when `v` is wider
    than what earlier returns stored."""
    v = b.typed(v, like=N.Const(0, slot.dtype))
    if v.dtype != slot.dtype and T.promote(v.dtype, slot.dtype) != slot.dtype:
        widen_return_slot(b, slot, T.promote(v.dtype, slot.dtype))
    b.note_store(slot, v)
    store = b.emit(N.LocalStore(slot, b.cast(v, slot.dtype)))
    b.return_stores.append((b.block, store))


def widen_return_slot(b, slot, dtype):
    """Returns of different types promote, as Python values would (`return 1` / `return v * 0.5`):
    retype the slot and convert the values the earlier returns stored (a weak float computed again in the
    wider type, weak_floats.py)."""
    slot.dtype = dtype
    saved = b.block
    for block, store in b.return_stores:
        if store.slot is not slot:
            continue   # another component of a vector return
        b.block = N.Block()
        weak = dtype == T.f64 and b.is_weak(store.value)
        store.value = b.widen(store.value, {}) if weak else b.emit(N.Compute(Op.CAST, (store.value,), dtype))
        for s in b.block.stmts:
            s.loc = store.loc
        at = block.stmts.index(store)
        block.stmts[at:at] = b.block.stmts
    b.block = saved


# ---- @sp.func returning vectors ----
def vector_return(b, v):
    slot = b.return_slot
    if isinstance(slot, N.Alloca) or (slot is not None and not isinstance(v, VecValue)):
        b.error("a @sp.func must return either scalars or vectors from all its returns, not both")
    if slot is None:
        slot = b.return_slot = new_return_slots(b, v)
    elif v.shape != slot.shape:
        b.error(f"a @sp.func returns vectors (matrices) of different shapes ({slot.shape} and {v.shape})")
    for s, c in zip(slot.slots, v.comps):
        store_return(b, s, c)


def new_return_slots(b, v):
    slots = []
    for k, c in enumerate(v.comps):
        slots.append(b.new_slot(c.dtype, f"ret_{k}", (c,)))
    return VecSlots(slots, v.shape)


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

"""Turn `break`/`continue` into flags so a loop body is straight structured code (reverse mode needs it,
and every kernel gets it: lavapipe mis-executes divergent breaks taken inside a loop's selections).

`for ...: A; if c: break; B` becomes `brk = False; for[exit_flag=brk] ...: A; if c: brk = True;
if not brk: B`. The loop holds its flag in `loop.exit_flag` and leaves when it is set, checked at the top of
every iteration (lowering, interpreter): no Break is left in the body, so reverse mode can replay an
iteration without leaving the reversed loop.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op


def eliminate_loop_exits(task):
    new_allocas = []
    _rewrite_loops(task.body, new_allocas)
    task.body.stmts[0:0] = new_allocas
    return task


def _const(v):
    return N.Const(v, T.u1)


def _targets(block, cls):
    """Does `block` contain a `cls` (Break/Continue) aimed at the loop owning it?"""
    for s in block.stmts:
        if isinstance(s, cls):
            return True
        if isinstance(s, N.If) and (_targets(s.then_body, cls) or _targets(s.else_body, cls)):
            return True
    return False


def _rewrite_loops(block, allocas):
    """Rewrite every loop inside `block` (in place); returns nothing."""
    out = []
    for s in block.stmts:
        if isinstance(s, (N.RangeFor, N.While)):
            out.extend(_rewrite_loop(s, allocas))
            continue
        for b in s.blocks():
            _rewrite_loops(b, allocas)
        out.append(s)
    block.stmts[:] = out


def _rewrite_loop(loop, allocas):
    # a rewritten loop has no Break/Continue left: a second run leaves it as it is (the pass is idempotent)
    has_break, has_cont = _targets(loop.body, N.Break), _targets(loop.body, N.Continue)
    if not (has_break or has_cont):
        _rewrite_loops(loop.body, allocas)
        return [loop]
    brk = N.Alloca(T.u1, "brk") if has_break else None
    cont = N.Alloca(T.u1, "cont") if has_cont else None
    for a in (brk, cont):
        if a is not None:
            a.loc = loop.loc
            allocas.append(a)
    body = _flagged(loop.body.stmts, brk, cont, allocas)
    prefix = []
    if cont is not None:
        prefix.append(N.LocalStore(cont, _const(False)))
        prefix.insert(0, prefix[0].value)
    loop.exit_flag = brk
    loop.body.stmts[:] = prefix + body
    before = []
    if brk is not None:
        f = _const(False)
        before = [f, N.LocalStore(brk, f)]
    for s in before + prefix:
        s.loc = loop.loc
    return before + [loop]


def _flagged(stmts, brk, cont, allocas):
    """Statements of one loop body level with Break/Continue replaced by flag stores; code after a
    statement that may set a flag is guarded by `if not (brk or cont)`."""
    out = []
    for k, s in enumerate(stmts):
        if isinstance(s, N.Break) or isinstance(s, N.Continue):
            t = _const(True)
            out += [t, N.LocalStore(brk if isinstance(s, N.Break) else cont, t)]
            return out
        if isinstance(s, (N.RangeFor, N.While)):
            out.extend(_rewrite_loop(s, allocas))
            continue
        if isinstance(s, N.If) and (_may_exit(s)):
            s.then_body.stmts[:] = _flagged(s.then_body.stmts, brk, cont, allocas)
            s.else_body.stmts[:] = _flagged(s.else_body.stmts, brk, cont, allocas)
            out.append(s)
            rest = stmts[k + 1:]
            if rest:
                cond = _not_exited(brk, cont, out)
                out.append(N.If(cond, N.Block(_flagged(rest, brk, cont, allocas)), N.Block()))
            return out
        for b in s.blocks():
            _rewrite_loops(b, allocas)
        out.append(s)
    return out


def _may_exit(stmt):
    return _targets(N.Block([stmt]), N.Break) or _targets(N.Block([stmt]), N.Continue)


def _not_exited(brk, cont, out):
    flags = [N.LocalLoad(f) for f in (brk, cont) if f is not None]
    out.extend(flags)
    any_set = flags[0]
    if len(flags) == 2:
        any_set = N.Compute(Op.OR, (flags[0], flags[1]), T.u1)
        out.append(any_set)
    cond = N.Compute(Op.NOT, (any_set,), T.u1)
    out.append(cond)
    return cond

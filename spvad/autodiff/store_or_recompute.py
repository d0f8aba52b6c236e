"""Store or recompute: what a gradient's reverse loop needs of each iteration, kept on adstacks or computed again.

Reverse mode first keeps the loop-carried slots (a snapshot per iteration) and recomputes everything else
from them in the reverse loop: `v` is kept and `sin(v)`, `cos(v)` are computed again. This pass looks at each
snapshot stack of the finished gradient kernel: the values its reverse loop computes purely from the
snapshot (the recomputed set) and, of those, the ones the adjoint code reads (the cut). When recomputing
costs more, by the COST table, than computing the cut in the forward sweep and keeping it on stacks of the
same capacity, the forward sweep pushes the cut and the reverse loop pops it (the stack of the snapshot
goes when nothing else reads it). For the integrator the cut is `0.01*sin(v)` and `cos(v)`: two pushes, no
transcendental in the reverse loop, as the best hand-written gradient does. Same values bit for bit.
"""
from ..ir import nodes as N
from ..ir.simplify import eliminate_dead_code
from ..ir.ops import Op

# Relative cost of computing each op once (a push and its pop cost PUSH_POP): the table the choice reads.
_TRANSCENDENTAL = {Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.EXP,
                   Op.LOG, Op.LOG2, Op.EXP2, Op.LOG10, Op.EXPM1, Op.LOG1P, Op.POW, Op.ATAN2, Op.HYPOT}
_SLOW = {Op.DIV, Op.SQRT, Op.RSQRT, Op.FMOD, Op.MOD, Op.FLOORDIV, Op.POWI}
COST = {op: 20 if op in _TRANSCENDENTAL else 6 if op in _SLOW else 1 for op in Op}
PUSH_POP = 4


def store_or_recompute(kernel):
    """Apply the choice to every snapshot stack of every task, in place; returns the kernel."""
    for task in kernel.tasks:
        for stack in N.adstacks_of(task):
            _choose(task, stack)
    return kernel


def _choose(task, stack):
    found = _sweeps(task, stack)
    if found is None:
        return
    (fwd_loop, push), (rev_loop, tops, pop) = found
    recomputed = _recomputed(rev_loop, tops)
    users = _users(rev_loop)
    cut = [s for s in recomputed if any(u not in recomputed for u in users.get(s, ()))]
    keep_snapshot = any(t in cut for t in tops)
    cut = [s for s in cut if s not in tops]
    if not cut:
        return
    recompute_cost = sum(COST[s.op] for s in recomputed if isinstance(s, N.Compute))
    m = {t: push.value for t in tops}
    new = _forward_values(fwd_loop, _needed(cut, recomputed), m, _visible_in(task.body, fwd_loop))
    store_cost = sum(COST[s.op] for s in new if isinstance(s, N.Compute)) + \
        PUSH_POP * (len(cut) - (0 if keep_snapshot else 1))
    if store_cost >= recompute_cost:
        return
    _rewrite(task, stack, fwd_loop, rev_loop, pop, recomputed, cut, new, m, keep_snapshot)


def _sweeps(task, stack):
    """((forward loop, its push), (reverse loop, its loads of the top, its pop)) when the stack is a plain
    snapshot: pushed once at the top level of one loop, read and popped at the top level of another."""
    where = {}
    for block, owner in _blocks(task.body, None):
        for s in block.stmts:
            if isinstance(s, (N.AdStackPush, N.AdStackPop, N.AdStackLoadTop, N.AdStackLoadTopAdj,
                              N.AdStackAccAdjoint)) and s.stack is stack:
                where.setdefault(type(s), []).append((s, owner, block is getattr(owner, "body", None)))
    pushes, pops, tops = where.get(N.AdStackPush, ()), where.get(N.AdStackPop, ()), where.get(N.AdStackLoadTop, ())
    if where.get(N.AdStackLoadTopAdj) or where.get(N.AdStackAccAdjoint) or len(pushes) != 1 or len(pops) != 1:
        return None
    (push, fwd_loop, top_level), (pop, rev_loop, pop_top) = pushes[0], pops[0]
    if not (top_level and pop_top and isinstance(fwd_loop, (N.RangeFor, N.While)) and rev_loop is not fwd_loop
            and tops and all(o is rev_loop and t for _, o, t in tops)):
        return None
    return (fwd_loop, push), (rev_loop, [s for s, _, _ in tops], pop)


def _visible_in(block, loop):
    """Statements visible at the end of `loop`'s body (defined before the loop in the blocks enclosing it, or
    at the body's top level), or None when `loop` is not under `block`."""
    seen = set()
    for s in block.stmts:
        if s is loop:
            return seen | set(loop.body.stmts)
        for b in s.blocks():
            inner = _visible_in(b, loop)
            if inner is not None:
                return seen | inner
        seen.add(s)
    return None


def _blocks(block, owner):
    yield block, owner
    for s in block.stmts:
        for b in s.blocks():
            yield from _blocks(b, s)


def _recomputed(loop, tops):
    """Pure top-level statements of the reverse loop computed from the snapshot and values from before both
    sweeps (constants, arguments, the thread index), in order; the loads of the top included."""
    inside = set(N.walk(loop.body))
    out = {t: True for t in tops}
    for s in loop.body.stmts:
        if isinstance(s, N.Compute) and any(a in out for a in s.args) and all(
                a in out or (a not in inside and _everywhere(a)) for a in s.args):
            out[s] = True
    return out


def _everywhere(v):
    """Values the forward sweep can use too, wherever it is."""
    return isinstance(v, (N.Const, N.ScalarArg, N.ThreadIndex, N.ArrayShape))


def _users(loop):
    users = {}
    for s in N.walk(loop.body):
        for a in s.operands():
            users.setdefault(a, []).append(s)
    return users


def _needed(cut, recomputed):
    """The computations the forward sweep must add to compute `cut`, in order."""
    need, work = set(), list(cut)
    while work:
        s = work.pop()
        if s in need or not isinstance(s, N.Compute):
            continue
        need.add(s)
        work.extend(a for a in s.args if a in recomputed)
    return [s for s in recomputed if s in need]


def _forward_values(loop, needed, m, visible):
    """Map each computation of `needed` to the same computation at the top level of the forward `loop` (the
    forward sweep computes sin(v) already) or to a new copy; returns the copies, `m` filled."""
    existing = {(s.op, s.dtype, s.args): s for s in loop.body.stmts if isinstance(s, N.Compute)}
    new = []
    for s in needed:
        for a in s.args:   # a constant (argument...) of the reverse side may sit where the forward cannot see
            if a not in m and _everywhere(a) and a not in visible:
                new.append(N.clone_stmt(a, m))
        key = (s.op, s.dtype, tuple(m.get(a, a) for a in s.args))
        if key in existing:
            m[s] = existing[key]
        else:
            new.append(N.clone_stmt(s, m))
    return new


def _rewrite(task, stack, fwd_loop, rev_loop, pop, recomputed, cut, new, m, keep_snapshot):
    """The forward sweep computes the cut at the end of each iteration (its values dominate the end of the
    body) and pushes it; the reverse loop pops it where it computed it."""
    kept = []
    for s in cut:
        holder = N.AdStackAlloca(s.dtype, stack.capacity, f"{stack.name}_{s.op.value}", stack.capacity_spec_id)
        holder.loc = s.loc
        kept.append(holder)
    fwd_loop.body.stmts.extend(new + [N.AdStackPush(h, m[s]) for h, s in zip(kept, cut)])
    tops_now = {s: N.AdStackLoadTop(h) for h, s in zip(kept, cut)}
    body = []
    for s in rev_loop.body.stmts:
        if s in tops_now:
            s = tops_now[s]
        elif s is pop:
            body.extend(N.AdStackPop(h) for h in kept)
        body.append(s)
    gone = {s for s in recomputed if not (keep_snapshot and isinstance(s, N.AdStackLoadTop))}
    rev_loop.body.stmts[:] = [s for s in body if s not in gone]   # the rest was read only by what is gone
    _replace_uses(rev_loop.body, tops_now)
    at = task.body.stmts.index(stack)
    task.body.stmts[at + 1:at + 1] = kept
    if not keep_snapshot:   # the snapshot nobody reads any more goes, with its pushes and pops
        eliminate_dead_code(task)


def _replace_uses(block, mapping):
    for s in N.walk(block):
        s.replace_operands(mapping)

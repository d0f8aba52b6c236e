"""Loop-invariant code motion: a value a loop computes the same in every iteration is computed once, before it.

Moved: pure computations, loads of local slots the loop never stores, and loads of array elements the loop
cannot write. Any write in the loop to an array of the same dtype counts as a possible write (two
parameters may be bound to one ndarray, or to another's .grad), unless the launch binds distinct buffers
(`distinct`, nodes.may_write): then only writes to that array do.

Only statements at the top level of the body move: after loop_exits they run in every iteration that
starts (breaks are exit flags, a `while` starts at least once). A `for` may start none: a load moved out of
it carries the loop's trip condition as its `guard` (it reads nothing and gives 0 when the loop would not
have run, so it cannot go out of bounds where the loop would not have), and an op that can trap (integer
division) stays. Guarded loads are made after autodiff only (`guard_loads`): the derivative passes never see
one. Inner loops are done first, so a value climbs out of every loop it does not depend on.
"""
from .. import types as T
from . import nodes as N
from .ops import Op

# pure ops the interpreter refuses for some operands (the device gives some value): moved only from a loop
# that certainly starts
_TRAPPING = {Op.FLOORDIV, Op.MOD, Op.CAST, Op.POWI}


def hoist_loop_invariants(kernel, guard_loads=False, distinct=False):
    """Move loop invariants out of the loops of every task, in place; returns the kernel."""
    for task in kernel.tasks:
        _hoist_in(task.body, guard_loads, distinct)
    return kernel


def _hoist_in(block, guard_loads, distinct):
    out = []
    for s in block.stmts:
        for b in s.blocks():
            _hoist_in(b, guard_loads, distinct)
        if isinstance(s, (N.RangeFor, N.While)):
            out.extend(_hoist_from(s, guard_loads, distinct))
        else:
            out.append(s)
    block.stmts[:] = out


def _hoist_from(loop, guard_loads, distinct):
    """The statements replacing `loop`: its invariants (with the loop's trip condition), then the loop."""
    starts = always_starts(loop)
    moved = _invariants(loop, starts, guard_loads, distinct)
    if not moved:
        return [loop]
    gone = set(moved)   # in their order in the body: each after its operands
    loop.body.stmts[:] = [s for s in loop.body.stmts if s not in gone]
    loads = [s for s in moved if isinstance(s, N.GlobalLoad)]
    if starts or not loads:
        return moved + [loop]
    cond = N.Compute(Op.LT if loop.step > 0 else Op.GT, (loop.begin, loop.end), T.u1)
    cond.loc = loop.loc
    for s in loads:
        s.guard = cond if s.guard is None else N.Compute(Op.AND, (s.guard, cond), T.u1)
        if s.guard is not cond:
            s.guard.loc = loop.loc
            moved.insert(moved.index(s), s.guard)
    return [cond] + moved + [loop]


def always_starts(loop):
    """Whether `loop` runs its first iteration whenever it is reached (a `while` does; a `for` with
    constant bounds that are not empty)."""
    if isinstance(loop, N.While):
        return True
    b, e = loop.begin, loop.end
    return isinstance(b, N.Const) and isinstance(e, N.Const) and (b.value < e.value if loop.step > 0
                                                                  else b.value > e.value)


def _invariants(loop, starts, guard_loads, distinct):
    """Top-level statements of `loop`'s body that compute the same in every iteration, in body order:
    when the loop may not start, no trapping op, and loads only as `guard_loads` allows."""
    stored_slots, written, inside = set(), set(), set()
    for s in N.walk(loop.body):
        inside.add(s)
        if isinstance(s, N.LocalStore):
            stored_slots.add(s.slot)
        elif isinstance(s, N.SlotStore):   # may store into any slot of its group
            stored_slots.update(s.slots)
        elif type(s).WRITES_ARRAY:
            written.add(N.may_write(s.array, s.field, distinct))
    moved = {}
    for s in loop.body.stmts:
        safe = starts or not (_traps(s) or (isinstance(s, N.GlobalLoad) and not guard_loads))
        if safe and _movable(s, loop, stored_slots, written, distinct) and all(
                a not in inside or a in moved for a in s.operands()):
            moved[s] = True
    return list(moved)


def _movable(s, loop, stored_slots, written, distinct):
    kind = type(s)
    if isinstance(s, N.LoopIndex):
        return s.loop is not loop
    if isinstance(s, N.ThreadIndex):
        return True
    if kind.PURE:
        return True
    if isinstance(s, N.LocalLoad):
        return s.slot not in stored_slots
    if isinstance(s, N.GlobalLoad):
        return N.may_write(s.array, s.field, distinct) not in written
    return False


def _traps(s):
    return isinstance(s, N.Compute) and s.op in _TRAPPING and not s.dtype.is_float

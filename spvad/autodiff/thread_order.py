"""Values that thread order decides: the old value an atomic returns, and everything computed from it (through
values, local slots and the control flow it steers). A gradient's replay cannot recompute them (it runs no
atomics, and another order would give others), so it leaves them out; only a gradient that needs one is
refused. A cell list's slot (`slot = sp.atomic_add(count[c], 1); members[c, slot] = i`) needs none.
"""
from ..errors import AutodiffRuleError
from ..ir import nodes as N


def thread_order_values(task, seeds=None):
    """The statements of `task` (after loop exits became flags) whose value, or whether they run, depends on
    an atomic's old value: the atomics whose result is used (or those in `seeds`), what reads them, the
    stores into local slots they reach and the loads of those slots, and whole constructs they steer."""
    if seeds is None:
        stmts = list(N.walk(task.body))
        used = {o for s in stmts for o in s.operands()}
        seeds = [s for s in stmts if isinstance(s, N.AtomicRMW) and s in used]
    tainted = set(seeds)
    if not tainted:
        return frozenset()
    slots = set()

    def visit(block, steered):
        changed = False
        for s in block.stmts:
            hit = steered or s in tainted or any(o in tainted for o in s.operands() if not isinstance(o, N.Alloca)) \
                or (isinstance(s, N.LocalLoad) and s.slot in slots) or getattr(s, "exit_flag", None) in slots
            if hit and s not in tainted:
                tainted.add(s)
                changed = True
            if hit and isinstance(s, N.LocalStore) and s.slot not in slots:
                slots.add(s.slot)   # its later loads see a value (or a running) thread order decided
                changed = True
            for b in s.blocks():
                changed |= visit(b, hit)
        return changed

    while visit(task.body, False):   # a loop feeds its slots back to its start
        pass
    return frozenset(tainted)


def refuse_needed(kernel, task, tainted, needed):
    """An AutodiffRuleError when the gradient needs a value thread order decided (`needed`: the statements
    its replay must reproduce, activity.Activity.needed), naming the atomic it comes from."""
    if not any(s in needed for s in tainted):
        return
    atomics = [s for s in N.walk(task.body) if isinstance(s, N.AtomicRMW) and s in tainted]
    atomic = next(a for a in atomics if any(s in needed for s in thread_order_values(task, [a])))
    where = f"\n    at {atomic.loc}" if atomic.loc else ""
    raise AutodiffRuleError(f"kernel {kernel.name}: the value returned by sp.{atomic.op.value} on "
                            f"'{atomic.array.name}' cannot be differentiated through (it depends on thread "
                            "order): the gradient needs it, or what it decides, to recompute a differentiated "
                            f"value or where it goes{where}")

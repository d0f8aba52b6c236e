"""Adstacks that move in lockstep share one counter. A reverse pass that keeps two values per iteration
(`0.01 * sin(v)` and `cos(v)`) pushes both in the same block and pops both in the same block: their counts
are always equal where either is read. The lowering then gives the second one ("the twin") no counter, no
overflow branch and no pop: it reads and writes at its leader's top. That removes a branch and two atomics
per push from the loop, and the code lavapipe has to compile."""
from ..ir import nodes as N

_MOVES = (N.AdStackAlloca, N.AdStackPush, N.AdStackPop)
_READS = (N.AdStackLoadTop, N.AdStackLoadTopAdj, N.AdStackAccAdjoint)


def lockstep_twins(task, stacks):
    """{twin: leader} among `stacks` (AdStackAlloca, in declaration order): same capacity; in every block,
    each allocation, push and pop of the twin comes right after the same one of its leader, with no access
    to either stack (nor a nested block touching them) in between."""
    events = _events(task.body)
    twins = {}
    leaders = []
    for s in stacks:
        leader = next((a for a in leaders if _same_capacity(a, s) and _lockstep(events, a, s)), None)
        if leader is None:
            leaders.append(s)
        else:
            twins[s] = leader
    return twins


def _same_capacity(a, b):
    return (a.capacity, a.capacity_spec_id) == (b.capacity, b.capacity_spec_id)


def _events(block, out=None):
    """Per block, the list of (kind, stack) of its own stack statements in order; a statement owning blocks
    that touch stacks appears as ("nested", frozenset of those stacks)."""
    out = [] if out is None else out
    seq = []
    for s in block.stmts:
        if isinstance(s, _MOVES):
            seq.append((type(s), s if isinstance(s, N.AdStackAlloca) else s.stack))
        elif isinstance(s, _READS):
            seq.append(("read", s.stack))
        blocks = list(s.blocks())
        if blocks:
            inner = {t.stack if not isinstance(t, N.AdStackAlloca) else t for b in blocks for t in N.walk(b)
                     if isinstance(t, _MOVES + _READS)}
            if inner:
                seq.append(("nested", frozenset(inner)))
            for b in blocks:
                _events(b, out)
    out.append(seq)
    return out


def _lockstep(events, a, b):
    for seq in events:
        mine = [(kind, s) for kind, s in seq if (s in (a, b) if kind != "nested" else a in s or b in s)]
        for k, (kind, s) in enumerate(mine):
            if kind in ("read", "nested"):
                continue
            if s is a:   # a move of the leader: the twin's same move must follow at once
                if k + 1 >= len(mine) or mine[k + 1] != (kind, b):
                    return False
            elif k == 0 or mine[k - 1] != (kind, a):
                return False
    return True

"""Vector and matrix locals indexed at run time (nodes.SlotSelect / SlotStore over a group of slots).

Primal kernels keep the two statements for groups of ARRAY_MIN_SLOTS or more: the lowering makes each such
group one Function-scope array, so an access costs one indexed load or store. Derivative kernels (and kernels
with in-kernel derivatives) expand them first into selects over the slots, the same code the frontend used to
emit: a read is `i == 1 ? s1 : (... (s0))`, a write stores `i == j ? v : s_j` into every slot j. Both forms
agree everywhere, out-of-range indices included (a read gives slot 0, a write changes nothing), and both
autodiff modes differentiate selects exactly: a select routes the derivative to the chosen slot, and the slots
are ordinary locals (on adstacks when loop-carried).
"""
from ..types import u1
from . import nodes as N
from .ops import Op


def grouped_slots(body):
    """Every slot addressed by a SlotSelect or SlotStore under `body`."""
    return {slot for group in slot_groups(body) for slot in group}


def slot_groups(body):
    """The groups (tuples of slots) the SlotSelects and SlotStores under `body` address, in first-use order."""
    return list(dict.fromkeys(s.slots for s in N.walk(body) if isinstance(s, (N.SlotSelect, N.SlotStore))))


# Groups this large stay arrays in primal kernels; smaller ones become selects there too. Insertion sort of
# n floats per thread on lavapipe (AMD EPYC, 16,384 threads), selects vs array: n = 8: 1.0 vs 2.4 ms,
# 16: 2.6 vs 7.1, 32: 24.8 vs 21.5, 48: 87.6 vs 40.6, 64: 101 vs 64 ms. LLVM keeps a short select chain in
# vector registers, while an indexed Function array costs a scalar access per lane.
ARRAY_MIN_SLOTS = 32


def expand_slot_arrays(kernel, smaller_than=None):
    """Replace every SlotSelect / SlotStore (of groups of fewer than `smaller_than` slots, when given) by
    loads, selects and stores of its slots; in place."""
    for task in kernel.tasks:
        _expand(task.body, {}, smaller_than)
    return kernel


def expand_small_slot_arrays(kernel):
    """What a primal kernel keeps as arrays: the groups of at least ARRAY_MIN_SLOTS slots."""
    return expand_slot_arrays(kernel, ARRAY_MIN_SLOTS)


def _expand(block, repl, smaller_than):
    out = []
    for s in block.stmts:
        s.replace_operands(repl)
        small = smaller_than is None or len(getattr(s, "slots", ())) < smaller_than
        if isinstance(s, N.SlotSelect) and small:
            out += _select_chain(s, repl)
            continue
        if isinstance(s, N.SlotStore) and small:
            out += _store_each(s)
            continue
        for b in s.blocks():
            _expand(b, repl, smaller_than)
        out.append(s)
    block.stmts[:] = out


def _equals(index, j, out):
    """`index == j`, its statements appended to `out`."""
    k = N.Const(j, index.dtype)
    eq = N.Compute(Op.EQ, (index, k), u1)
    out += [k, eq]
    return eq


def _select_chain(s, repl):
    out = []
    acc = N.LocalLoad(s.slots[0])
    out.append(acc)
    for j in range(1, len(s.slots)):
        load = N.LocalLoad(s.slots[j])
        out.append(load)
        acc = N.Compute(Op.SELECT, (_equals(s.index, j, out), load, acc), s.dtype)
        out.append(acc)
    for t in out:
        t.loc = s.loc
    repl[s] = acc
    return out


def _store_each(s):
    out = []
    for j, slot in enumerate(s.slots):
        old = N.LocalLoad(slot)
        out.append(old)
        new = N.Compute(Op.SELECT, (_equals(s.index, j, out), s.value, old), slot.dtype)
        out += [new, N.LocalStore(slot, new)]
    for t in out:
        t.loc = s.loc
    return out

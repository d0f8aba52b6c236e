"""The math library's pass: every Compute of an Op in libm.EXPANSIONS replaced by its expansion, each statement of
which is marked `exact` (computed as written on every backend). Runs after autodiff, before lowering.

Expansions of one operand share work through `e.shared` (sin, cos and tan of one x: one range reduction and one
pair of polynomials, trig.py): a dict of what earlier expansions left, scoped so that a statement is reused only
where it dominates the use (the IR is structured: same block earlier, or an enclosing block earlier)."""
from collections import ChainMap

from .. import nodes as N
from ..emit import Emitter
from . import EXPANSIONS


class ExpansionEmitter(Emitter):
    """An Emitter for one expansion, with `shared`: (key, operand) -> what an earlier expansion computed of that
    operand and placed where this one can use it (the expansion decides the key and what it keeps)."""

    def __init__(self, shared):
        super().__init__()
        self.shared = shared


def expand_math(kernel):
    """`kernel` with its tasks' transcendental Computes expanded in place (depth probes' counting kernels too).
    The expansions' constants go to the top of the task body, one per value (as loop-invariant code motion
    leaves them: a loop body computes no constant). Task headers keep their Ops: the host evaluates them
    (scalar_ops.EVAL) to size a launch."""
    for task in kernel.tasks:
        consts = {}
        expand_block(task.body, {}, consts)
        task.body.stmts[:0] = consts.values()
        if task.depth_probe is not None:
            expand_math(task.depth_probe[0])
    return kernel


def expand_block(block, mapping, consts=None, shared=None):
    """Expand in `block` and its nested blocks; `mapping` (replaced statement -> its result) renames the uses,
    which follow their definitions in this walk (the IR is SSA by object identity, locals are slots).
    `consts`: a dict (dtype, value) -> Const collecting the expansions' constants, or None to leave them
    where they are emitted. `shared`: the work of earlier expansions that dominate this block (a ChainMap:
    a nested block sees its enclosing blocks' entries, its own end with it)."""
    shared = ChainMap() if shared is None else shared
    out = []
    for s in block.stmts:
        s.replace_operands(mapping)
        for b in s.blocks():
            expand_block(b, mapping, consts, shared.new_child())
        if isinstance(s, N.Compute) and s.op in EXPANSIONS and s.dtype.is_float:
            out.extend(_expansion(s, mapping, consts, shared))
        else:
            out.append(s)
    block.stmts = out


def _expansion(s, mapping, consts, shared):
    e = ExpansionEmitter(shared)
    e.block, e.loc = N.Block(), s.loc
    mapping[s] = EXPANSIONS[s.op](e, *s.args)
    for t in e.block.stmts:
        if isinstance(t, N.Compute):
            t.exact = True
    if consts is not None:   # one Const per value at the top of the task; repr tells -0.0 from 0.0 and keeps NaN
        for t in e.block.stmts:
            if isinstance(t, N.Const) and consts.setdefault((t.dtype, repr(t.value)), t) is not t:
                mapping[t] = consts[(t.dtype, repr(t.value))]
        e.block.stmts = [t for t in e.block.stmts if not isinstance(t, N.Const)]
    expand_block(e.block, mapping, consts, shared)   # what an expansion emits may be expandable itself
    result = mapping[s]
    while result in mapping:   # (its result too)
        result = mapping[result]
    mapping[s] = result
    return e.block.stmts

"""The counting kernel for data-dependent adstack depths: the primal task without its global writes,
recording with an atomic max how many iterations each measured loop ran (per execution, over all threads).
The runtime launches it before the gradient and sizes those loops' stacks from the counts.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op
from ..ir.simplify import eliminate_dead_code


def build_count_kernel(kernel, task, measured, skip=frozenset()):
    """`measured` maps spec id -> loop of `task`; counters[spec id] receives that loop's max trip count.
    `skip`: statements left out (values thread order decided, which no measured loop needs)."""
    counters = N.ArrayParam("__trip_counts", T.i32, 1, len(kernel.arrays))
    loop_ids = {id(loop): sid for sid, loop in measured.items()}
    allocas = []
    body = replay_without_writes(task.body, {}, loop_ids=loop_ids, counters=counters, allocas=allocas, skip=skip)
    body.stmts[0:0] = allocas
    m = {}
    header = N.Block([N.clone_stmt(s, m) for s in task.header.stmts])
    count_task = N.Task(task.name + "_depth", task.kind, header, m[task.num_threads], body)
    # only what the counts need: a load feeding a write left out (`s[0] = s[0] + x[i]` in a while loop) is
    # no read of the launch's contents the probe must see
    eliminate_dead_code(count_task)
    return N.Kernel(kernel.name + "_depth", kernel.arrays + [counters], kernel.scalars, [count_task],
                    kernel.filename), max(measured) + 1


def replay_without_writes(block, m, on_write=None, loop_ids=(), counters=None, allocas=None, skip=frozenset()):
    """`block` cloned (value map `m`) without its global writes: a replay that never changes the user's
    arrays. `on_write(write, m, out)` may put statements of its own in a write's place (`out`: a list).
    Loops whose id is in `loop_ids` (id -> counter index) also record their trip count with an atomic max
    into `counters` (their count slots go to `allocas`). Statements in `skip` are left out."""
    out = []
    for s in block.stmts:
        if s in skip:
            continue
        if type(s).WRITES_ARRAY:
            if on_write is not None:
                on_write(s, m, out)
            continue
        if isinstance(s, N.Print):   # a replay prints nothing: the primal launch did
            continue
        if s.BLOCK_FIELDS:   # a loop, an if, an in-kernel derivative: its blocks copied too
            new = N.clone_stmt(s, m)
            sid = loop_ids.get(id(s)) if loop_ids else None
            count = None
            if sid is not None:
                count = N.Alloca(T.i32, "trips")
                allocas.append(count)
                zero = N.Const(0, T.i32)
                out += [zero, N.LocalStore(count, zero)]
            for name in s.BLOCK_FIELDS:
                inner = replay_without_writes(getattr(s, name), m, on_write, loop_ids, counters, allocas, skip)
                if count is not None:   # first in the body: after the exit flag's test, before any work
                    old, one = N.LocalLoad(count), N.Const(1, T.i32)
                    inc = N.Compute(Op.ADD, (old, one), T.i32)
                    inner.stmts[0:0] = [old, one, inc, N.LocalStore(count, inc)]
                setattr(new, name, inner)
            out.append(new)
            if count is not None:
                k, total = N.Const(sid, T.i32), N.LocalLoad(count)
                out += [k, total, N.AtomicRMW(Op.ATOMIC_MAX, counters, (k,), total)]
        else:
            out.append(N.clone_stmt(s, m))
    return N.Block(out)

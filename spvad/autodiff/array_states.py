"""Which contents of its arrays a launch changes and which its gradient reads: the arrays as the forward
launch found them (PRE) or as it left them (POST). A Tape keeps (checkpoints) exactly the contents that
later writes would destroy, and binds them when the gradient runs.
"""
from dataclasses import dataclass, field

from ..ir import nodes as N
from .activity import varied_outputs

PRE, POST = "pre", "post"
PRIMAL_READ_FIELDS = ("primal", "final")   # "final": the contents a task left (atomic max/min winners)


@dataclass(frozen=True)
class ArrayFacts:
    """What the runtime and a Tape need to know of a compiled kernel's arrays (indices into kernel.arrays:
    the arguments, then the captured globals)."""
    writes: tuple = ()                 # (array index, field) a launch can write: their versions are bumped
    grad_reads: dict = field(default_factory=dict)   # gradient kernels: (index, field) -> PRE | POST
    grad_middle: tuple = ()            # gradient kernels: arrays needed as they were mid-launch
    varied_outputs: tuple = ()         # derivative kernels: float arrays without .grad (.dual) fed by inputs
                                       # that have one: the derivative chain would stop there


def array_facts(primal, compiled, mode, probes=()):
    """ArrayFacts of `compiled` (the kernel after its passes); `primal`: the frontend's kernel (the passes
    change its tasks in place but never add any); `mode`: "reverse" for a gradient kernel (its tasks name
    their `source`), "dual" for a forward-mode kernel, else None."""
    n = len(primal.arrays)
    writes = written_fields(compiled, n)
    if mode is None:
        return ArrayFacts(writes)
    flag = "needs_grad" if mode == "reverse" else "needs_dual"
    varied = tuple(sorted(set().union(*(varied_outputs(t, flag) for t in primal.tasks))))
    if mode == "dual":
        return ArrayFacts(writes, varied_outputs=varied)
    reads, middle = gradient_reads(primal, compiled, probes)
    return ArrayFacts(writes, reads, tuple(middle), varied)


def task_writes(kernel):
    """Per task, the indices of the arrays whose primal contents it can change (stores and atomics)."""
    return [{s.array.index for s in N.walk(t.body) if type(s).WRITES_ARRAY and s.field == "primal"}
            for t in kernel.tasks]


def written_fields(kernel, num_user_arrays):
    """(array index, field) of every user array (argument or captured) or companion a launch can write."""
    out = {(s.array.index, s.field) for t in kernel.tasks for s in N.walk(t.body)
           if type(s).WRITES_ARRAY and s.array.index < num_user_arrays}
    return tuple(sorted(out))


def load_phases(task):
    """{array index: phases of its primal loads}: which of the task's own writes to that array a load sees.
    "before": no write can precede the load in its thread; "after": writes can precede it, none can change
    what it read afterwards; "middle": both (the element a loop reads is rewritten by a later iteration).

    A write in a loop around the load counts as rewriting what the load read only when it uses the very
    same index values, unchanged in that loop (`for k: v = x[i]; x[i] = f(v)`); other indices are taken to
    address elements written once before they are read (`for t: x[t + 1] = f(x[t])`), which the access
    checker (debug=True) verifies on the device."""
    loads, writes, loops_of = [], {}, {}

    def visit(block, loops):
        for s in block.stmts:
            loops_of[s] = loops
            pos = len(loops_of)
            if isinstance(s, N.GlobalLoad) and s.field == "primal":
                loads.append((s.array.index, pos, loops, s.indices))
            elif type(s).WRITES_ARRAY and s.field == "primal":
                writes.setdefault(s.array.index, []).append((pos, loops, s.indices))
            for b in s.blocks():
                visit(b, loops | {s} if isinstance(s, (N.RangeFor, N.While)) else loops)

    visit(task.body, frozenset())

    def rewrites(common, w_idx, l_idx):
        return w_idx == l_idx and not any(common & loops_of.get(i, frozenset()) for i in l_idx)

    phases = {}
    for a, pos, loops, idx in loads:
        before = after = False
        for p, around, w_idx in writes.get(a, ()):
            common = around & loops
            if common and rewrites(common, w_idx, idx):
                before = after = True
            elif common or p < pos:
                before = True
            else:
                after = True
        phases.setdefault(a, set()).add("middle" if before and after else "after" if before else "before")
    return phases


def gradient_reads(primal, grad_kernel, probes=()):
    """({(array index, field): PRE | POST}, [array index]) for a gradient kernel whose tasks name their
    primal task in `source`: which contents each primal read of the gradient needs, and the arrays whose
    needed contents exist only in the middle of the primal launch (a task reads what an earlier task or
    its own earlier iteration wrote, and something later overwrites it), which no Tape can provide.
    `probes`: (source, Kernel) pairs of kernels that replay a primal task before the gradient."""
    num_user = len(primal.arrays)
    writers_of = task_writes(primal)
    phases_of = [load_phases(t) for t in primal.tasks]
    needs, middle = {}, set()
    reads = [(t.source, t.body) for t in grad_kernel.tasks] + [(src, t.body) for src, k in probes for t in k.tasks]
    for source, body in reads:
        for s in N.walk(body):
            a = s.array.index if isinstance(s, N.GlobalLoad) and s.field in PRIMAL_READ_FIELDS else num_user
            if a >= num_user:
                continue
            writers = [w for w, ws in enumerate(writers_of) if a in ws]
            # "final" reads what `source` left; a replayed load what the writes it could see left
            for phase in {"after"} if s.field == "final" else phases_of[source].get(a, {"before"}):
                done = sum(1 for w in writers if w < source or (w == source and phase == "after"))
                state = None if phase == "middle" else PRE if done == 0 else POST if done == len(writers) else None
                if state is None or needs.get((a, s.field), state) != state:
                    middle.add(a)
                else:
                    needs[(a, s.field)] = state
    return needs, sorted(middle)

"""Which contents of its arrays a launch changes and which its gradient reads: the arrays as the forward
launch found them (PRE) or as it left them (POST). A Tape keeps (checkpoints) exactly the contents that
later writes would destroy, and binds them when the gradient runs.
"""
import functools
from dataclasses import dataclass, field
from typing import NamedTuple

from ..ir import nodes as N
from ..ir.ops import Op
from ..ir.rows import accessed_rows, row_expr
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
    write_rows: dict = field(default_factory=dict)   # (index, field) -> {axis: rows} a launch writes (ir/rows.py)
    read_rows: dict = field(default_factory=dict)    # gradient kernels: (index, field) -> {axis: rows} they read

    # what a Tape asks at every launch, worked out once
    @functools.cached_property
    def primal_writes(self):
        """((array index, rows it writes), ...) of the user arrays' primal contents a launch can change."""
        return tuple((ai, self.write_rows.get((ai, f))) for ai, f in self.writes if f == "primal")

    @functools.cached_property
    def reads_before(self):
        """((array index, field, rows), ...) a gradient reads as the launch found them (PRE)."""
        return tuple((ai, f, self.read_rows.get((ai, f))) for (ai, f), s in self.grad_reads.items() if s == PRE)

    @functools.cached_property
    def reads_after(self):
        """((array index, field, rows), ...) a gradient reads as the launch left them (POST)."""
        return tuple((ai, f, self.read_rows.get((ai, f))) for (ai, f), s in self.grad_reads.items() if s == POST)


def array_facts(primal, compiled, mode, probes=()):
    """ArrayFacts of `compiled` (the kernel after its passes); `primal`: the frontend's kernel (the passes
    change its tasks in place but never add any); `mode`: "reverse" for a gradient kernel (its tasks name
    their `source`), "dual" for a forward-mode kernel, else None."""
    n = len(primal.arrays)
    writes = written_fields(compiled, n)
    write_rows = accessed_rows(compiled, writes=True)
    if mode is None:
        return ArrayFacts(writes, write_rows=write_rows)
    flag = "needs_grad" if mode == "reverse" else "needs_dual"
    varied = tuple(sorted(set().union(*(varied_outputs(t, flag) for t in primal.tasks))))
    if mode == "dual":
        return ArrayFacts(writes, varied_outputs=varied, write_rows=write_rows)
    reads, middle = gradient_reads(primal, compiled, probes)
    read_rows = accessed_rows(compiled, writes=False, also=[k for _, k in probes])   # probes bind the same views
    return ArrayFacts(writes, reads, tuple(middle), varied, write_rows, read_rows)


def task_writes(kernel):
    """Per task, the indices of the arrays whose primal contents it can change (stores and atomics)."""
    return [{s.array.index for s in N.walk(t.body) if type(s).WRITES_ARRAY and s.field == "primal"}
            for t in kernel.tasks]


def written_fields(kernel, num_user_arrays):
    """(array index, field) of every user array (argument or captured) or companion a launch can write."""
    out = {(s.array.index, s.field) for t in kernel.tasks for s in N.walk(t.body)
           if type(s).WRITES_ARRAY and s.array.index < num_user_arrays}
    return tuple(sorted(out))


class _Access(NamedTuple):
    """A primal load or write of a task: its place in walk order, enclosing loops, enclosing (If, branch
    name) pairs, and indices."""
    pos: int
    loops: frozenset
    ifs: frozenset
    indices: tuple


def load_phases(task):
    """{array index: phases of its primal loads}: which of the task's own writes to that array a load sees.
    "before": no write can precede the load in its thread; "after": writes can precede it, none can change
    what it read afterwards; "middle": both (the element a loop reads is rewritten by a later iteration).
    A load no write of the task reaches (_distinct) reads the same value in either phase: it takes the phase
    of the array's other loads, so that they agree on one state."""
    loads, writes, loops_of = [], {}, {}

    def visit(block, loops, ifs):
        for s in block.stmts:
            loops_of[s] = loops
            access = _Access(len(loops_of), loops, ifs, getattr(s, "indices", ()))
            if isinstance(s, N.GlobalLoad) and s.field == "primal":
                loads.append((s.array.index, access))
            elif type(s).WRITES_ARRAY and s.field == "primal":
                writes.setdefault(s.array.index, []).append(access)
            for name in s.BLOCK_FIELDS:
                visit(getattr(s, name), loops | {s} if isinstance(s, (N.RangeFor, N.While)) else loops,
                      ifs | {(s, name)} if isinstance(s, N.If) else ifs)

    visit(task.body, frozenset(), frozenset())
    invariance = _LoopInvariance(loops_of)
    phases, untouched = {}, {}
    for a, load in loads:
        ws = writes.get(a, ())
        meeting = [w for w in ws if not _distinct(w.indices, load.indices)]
        if ws and not meeting:   # no write of the task reaches the element: its value is either phase's
            untouched.setdefault(a, set()).add(_phase({_write_order(w, load, invariance) for w in ws}))
        else:
            phases.setdefault(a, set()).add(_phase({_write_order(w, load, invariance) for w in meeting}))
    for a, by_order in untouched.items():
        # join the other loads of the array; alone, the phase their order gives where it is one, else before
        # (`x[t + 1] = f(x[t]); y = x[t]`: what the launch found)
        if a not in phases:
            phases[a] = by_order if len(by_order) == 1 else {"before"}
    return phases


def _phase(orders):
    """A load's phase from the orders (_write_order) of the writes that can reach its element."""
    before, after = "before" in orders or "both" in orders, "after" in orders or "both" in orders
    return "middle" if before and after else "after" if before else "before"


def _write_order(write, load, invariance):
    """How `write` can change the element `load` reads: before the load ("before"), after it ("after") or
    both. Outside a common loop, by their order. In a loop around both, a write that
    - never addresses that element (an index differs by a constant: _distinct) counts as before;
    - addresses the same element in every iteration of one of those loops rewrites what the load read
      ("both": `for k: v = x[i]; x[i] = f(v)`, `while x[j] < c: x[i] = ...`), unless it comes first and
      runs in one iteration of each such loop (`for k: if k == 0: x[i] = ...`);
    - addresses another element in each iteration is taken to write each element once: before it is read
      (`for t: x[t + 1] = f(x[t])`), or after, by the same iteration (`for t: x[t] = f(x[t])`), which
      the access checker (debug=True) verifies on the device."""
    first = write.pos < load.pos
    common = write.loops & load.loops
    if not common:
        return "before" if first else "after"
    if _distinct(write.indices, load.indices):
        return "before"
    fixed = [loop for loop in common if not any(invariance.varies(i, loop) for i in write.indices)]
    if fixed:
        own = [f.cond for f, branch in write.ifs - load.ifs if branch == "then_body"]
        once = all(any(_pins(c, loop, invariance) for c in own) for loop in fixed)
        return "before" if first and once else "both"
    return "after" if write.indices == load.indices and not first else "before"


def _pins(cond, loop, invariance):
    """True when `cond` holds in one iteration of `loop` at most: `loop index == e`, e the same in all."""
    if not (isinstance(cond, N.Compute) and cond.op is Op.EQ):
        return False
    a, b = cond.args
    return any(isinstance(k, N.LoopIndex) and k.loop is loop and not invariance.varies(e, loop)
               for k, e in ((a, b), (b, a)))


def _distinct(a, b):
    """True when index tuples `a` and `b` never address the same element, in any two threads or iterations:
    along some axis they are `u + c1` and `u + c2`, c1 != c2, with `u` the same everywhere (the launch's
    scalars, constants: ir/rows.py's row expressions; `x[t + 1, i]`, `x[t, j]`). In-bounds indices assumed,
    as everywhere (the access checker, debug=True, verifies them on the device)."""
    return len(a) == len(b) and any(_apart(row_expr(x), row_expr(y)) for x, y in zip(a, b))


def _apart(x, y):
    """Row expressions whose rows always differ: the same terms, offsets that differ modulo 2**32 (the
    device's integers wrap; 64-bit ones too, then a fortiori)."""
    return x is not None and y is not None and x[0] == y[0] and (x[1] - y[1]) % 2 ** 32 != 0


class _LoopInvariance:
    """Which values of a task can differ between two iterations of a loop around them; `loops_of`: each
    statement's enclosing loops. Unsure answers say "varies": load_phases then falls back on its
    written-once assumption."""

    def __init__(self, loops_of):
        self.loops_of, self.memo, self.bodies = loops_of, {}, {}

    def varies(self, v, loop):
        if loop not in self.loops_of.get(v, ()):
            return False                     # computed before the loop started
        key = (v, loop)
        if key not in self.memo:
            self.memo[key] = True            # a value that feeds itself (k = k + 1) varies
            self.memo[key] = self._varies(v, loop)
        return self.memo[key]

    def _varies(self, v, loop):
        if isinstance(v, N.LoopIndex):
            return True
        if isinstance(v, N.LocalLoad):   # a slot the loop stores into differs from its value before the loop
            return any(isinstance(s, N.LocalStore) and s.slot is v.slot for s in self.body(loop))
        if isinstance(v, N.GlobalLoad):
            return any(self.varies(i, loop) for i in v.indices) or any(
                type(s).WRITES_ARRAY and s.array is v.array and s.field == v.field for s in self.body(loop))
        return not type(v).PURE or any(self.varies(a, loop) for a in v.operands())

    def body(self, loop):
        if loop not in self.bodies:
            self.bodies[loop] = [s for b in loop.blocks() for s in N.walk(b)]
        return self.bodies[loop]


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
    # headers too: a thread count read from arrays (ir/thread_count.py), read before the task's own writes
    reads = [(t.source, b) for t in grad_kernel.tasks for b in (t.header, t.body)] + \
        [(src, b) for src, k in probes for t in k.tasks for b in (t.header, t.body)]
    for source, body in reads:
        for s in N.walk(body):
            a = s.array.index if isinstance(s, N.GlobalLoad) and s.field in PRIMAL_READ_FIELDS else num_user
            if a >= num_user:
                continue
            writers = [w for w, ws in enumerate(writers_of) if a in ws]
            # "final" reads what `source` left; a replayed load what the writes it could see left; a task
            # of source -1 (launch_states.py) what the launch found
            phases = phases_of[source].get(a, {"before"}) if source >= 0 else {"before"}
            for phase in {"after"} if s.field == "final" else phases:
                done = sum(1 for w in writers if w < source or (w == source and phase == "after"))
                state = None if phase == "middle" else PRE if done == 0 else POST if done == len(writers) else None
                if state is None or needs.get((a, s.field), state) != state:
                    middle.add(a)
                else:
                    needs[(a, s.field)] = state
    return needs, sorted(middle)

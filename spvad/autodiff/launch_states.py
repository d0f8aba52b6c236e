"""Array contents that exist only between the dispatches of one launch: a kernel's top-level loop reads what an
earlier loop wrote, and a later loop overwrites it. The dispatches of a kernel are launches in all but name,
so its gradient keeps those contents as a Tape keeps them between launches, by recomputing them: the gradient
launch starts with a prologue that copies each such array as the launch found it into a scratch working copy,
runs the primal loops that write it again on that copy (writing nothing else), and keeps the contents each
loop's gradient reads in scratch states, which those gradients then read.
"""
from ..ir import nodes as N
from .array_states import PRIMAL_READ_FIELDS, load_phases, task_writes
from .depth_probe import replay_without_writes
from .extremum_ties import each_element


def keep_launch_states(kernel, grads, scratch):
    """The tasks of the gradient kernel of `kernel`: `grads` (gradient tasks naming their primal task in
    `source`, in launch order), after a prologue recomputing the contents they read between two dispatches,
    their reads of those contents redirected to it. `scratch`: the gradient kernel's TieScratch (the working
    copies and states are scratch arrays). Contents that exist only in the middle of one dispatch stay
    unkept: array_states.gradient_reads reports them and the launch is refused."""
    if len(kernel.tasks) < 2:
        return grads
    plan = _Plan(kernel, grads)
    if not plan.kept:
        return grads
    arrays = kernel.arrays
    work = {a: scratch.param(arrays[a], "work") for a in plan.kept}
    prologue = [copy_task(work[a], arrays[a]) for a in plan.kept]
    states = {}   # (array index, writers done) -> the parameter holding those contents
    for t in plan.recomputed:
        prologue.append(recompute_task(kernel.tasks[t], t, work))
        for a in plan.kept:
            if t not in plan.writers[a]:
                continue
            d = plan.writers[a].index(t) + 1
            if d not in plan.wanted[a]:
                continue
            if any(w > t and w in plan.recomputed for w in plan.writers[a]):   # the copy changes again
                states[(a, d)] = scratch.param(arrays[a], f"state{d}")
                prologue.append(copy_task(states[(a, d)], work[a]))
            else:
                states[(a, d)] = work[a]
    for g in grads:
        bodies = [g.body] + ([g.depth_probe[0].tasks[0].body] if g.depth_probe is not None else [])
        for body in bodies:
            for s in N.walk(body):
                if isinstance(s, N.GlobalLoad) and s.field in PRIMAL_READ_FIELDS and \
                        s.array.index in plan.kept and s.array is arrays[s.array.index]:
                    a = s.array.index
                    d = plan.done(a, g.source, "after" if s.field == "final" else
                                  next(iter(plan.phases[g.source].get(a, {"before"}))))
                    if (a, d) in states:   # d = 0, as the launch found it: the array, as the prologue reads it
                        s.array, s.field = states[(a, d)], "primal"
    return prologue + grads


class _Plan:
    """Which arrays a gradient reads between dispatches (`kept`), which of their states (`wanted`: numbers of
    writer dispatches done) and which primal tasks recompute them (`recomputed`)."""

    def __init__(self, kernel, grads):
        n = len(kernel.arrays)
        written = task_writes(kernel)
        self.writers = [[t for t, ws in enumerate(written) if a in ws] for a in range(n)]
        self.phases = [load_phases(t) for t in kernel.tasks]
        reads = {}   # array -> {(source, writers done)}; None: contents no copy can give
        for g in grads:
            bodies = [g.body] + ([g.depth_probe[0].tasks[0].body] if g.depth_probe is not None else [])
            for s in (s for body in bodies for s in N.walk(body)):
                if isinstance(s, N.GlobalLoad) and s.field in PRIMAL_READ_FIELDS and s.array.index < n:
                    self._note(reads, s.array.index, g.source, {"after"} if s.field == "final" else
                               self.phases[g.source].get(s.array.index, {"before"}))
        self.kept, self.wanted, self.recomputed = set(), {}, []
        for a, seen in reads.items():
            if seen is not None and len(seen) == len({s for s, _ in seen}) and \
                    not ({d for _, d in seen} <= {0} or {d for _, d in seen} == {len(self.writers[a])}):
                self.kept.add(a)
                self.wanted[a] = {d for _, d in seen if d}
        while self.kept and self._extend(kernel, reads):
            pass

    def done(self, a, source, phase):
        return sum(1 for w in self.writers[a] if w < source or (w == source and phase == "after"))

    def _note(self, reads, a, source, phases):
        if reads.get(a, ()) is None:
            return
        if "middle" in phases:
            reads[a] = None
            return
        reads.setdefault(a, set()).update((source, self.done(a, source, p)) for p in phases)

    def _extend(self, kernel, reads):
        """Recompute up to the last writer a wanted state needs; an array those tasks read in a state the
        array itself cannot hold (or modify through an atomic whose value they use) is kept too. True when
        `kept` grew."""
        last = max((self.writers[a][d - 1] for a in self.kept for d in self.wanted[a]), default=-1)
        self.recomputed = [t for t in range(last + 1) if any(t in self.writers[a] for a in self.kept)]
        grown = False
        for t in self.recomputed:
            stmts = list(N.walk(kernel.tasks[t].body))
            used = {o for s in stmts for o in s.operands()}
            for s in stmts:
                a = s.array.index if type(s).ACCESSES_ARRAY and s.field == "primal" else None
                if a is None or a in self.kept or not (isinstance(s, N.GlobalLoad) or s in used):
                    continue
                phases = self.phases[t].get(a, {"before"}) if isinstance(s, N.GlobalLoad) else {"middle"}
                states = {self.done(a, t, p) for p in phases} | {d for _, d in reads.get(a) or ()}
                if "middle" in phases or len(states) > 1 or not states <= {0, len(self.writers[a])}:
                    self.kept.add(a)   # the recomputation runs its writes for real, on a copy
                    self.wanted[a] = {d for _, d in reads.get(a) or () if d}
                    grown = True
        return grown


def copy_task(dst, src):
    """A task with one thread per element: dst[...] = src[...] (same storage shape)."""
    header, total, body, idx = each_element(dst)
    body.append(N.GlobalStore(dst, idx, body.append(N.GlobalLoad(src, idx))))
    return N.Task(f"keep_{src.name}", "parallel", header, total, body, source=-1)


def recompute_task(task, t, work):
    """Primal task `t` run again for its writes into the working copies `work` (array index -> parameter): it
    reads and writes those instead of the arrays, and writes nothing else."""
    def on_write(s, m, out):
        if s.field == "primal" and s.array.index in work:
            out.append(N.clone_stmt(s, m))

    m = {}
    header = N.Block([N.clone_stmt(s, m) for s in task.header.stmts])
    body = replay_without_writes(task.body, m, on_write=on_write)
    for s in N.walk(body):   # (the working copies' own indices come after the user's arrays)
        if type(s).ACCESSES_ARRAY and s.field == "primal" and s.array.index in work and \
                s.array is not work[s.array.index]:
            s.array = work[s.array.index]
    return N.Task(task.name + "_again", task.kind, header, m[task.num_threads], body, source=t)

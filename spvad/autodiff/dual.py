"""Forward mode: the dual task computes primal values and, next to each active value, its directional
derivative `dual(out) = sum_i d out/d arg_i * dual(arg_i)` from the same partials table as reverse mode.

Loads of needs-dual arrays read `x.dual`; stores into needs-dual arrays also write `y.dual`; atomic adds
add the dual. No adstack is needed: everything runs in program order.
"""
from ..ir import nodes as N
from ..ir.emit import Emitter
from ..ir.ops import Op
from .activity import Activity, check_differentiable
from .extremum_ties import active_extrema, check_dual_replay, fixup_task, won
from .rules import ATOMIC_RULES, partials


def dual_task(kernel, task, scratch):
    """The dual tasks of `task`, in launch order: its dual task, then (for atomic max/min of active values)
    a replay counting the winners and summing their tangents, and the fix-up setting the extremum's dual."""
    check_differentiable(kernel, task, "dual")
    builder = _DualBuilder(kernel, task)
    dual = builder.run()
    sites = active_extrema(task, builder.act)
    if not sites:
        return [dual]
    check_dual_replay(kernel, task, sites)
    replay = _DualBuilder(kernel, task, {id(s) for s in sites}, scratch).run("_winners")
    fixups = [fixup_task(a, scratch, f"{task.name}_{a.name}_winners", "dual")
              for a in dict.fromkeys(s.array for s in sites)]
    return [dual, replay] + fixups


class _DualBuilder(Emitter):
    """Builds a task computing primal values and their duals. With `sites` (a replay for extremum winners),
    writes are left out and each of those atomic max/min counts its contribution if it won."""

    def __init__(self, kernel, task, sites=(), scratch=None):
        super().__init__()
        self.kernel, self.task, self.sites, self.scratch = kernel, task, sites, scratch
        self.act = Activity(task, "needs_dual")
        self.m = {}        # primal statement -> clone
        self.dual = {}     # primal value or slot -> its dual (a value, or an Alloca for slots)
        self.top = []

    def run(self, suffix="_fwd"):
        header = N.Block()
        self.block = header
        for s in self.task.header.stmts:
            self.clone(s)
        body = N.Block()
        self.block = body
        self.stmts(self.task.body.stmts)
        body.stmts[0:0] = self.top
        return N.Task(self.task.name + suffix, self.task.kind, header, self.m[self.task.num_threads], body)

    def clone(self, s):
        return self.emit(N.clone_stmt(s, self.m))

    def dual_of(self, v):
        return self.dual.get(v) if v in self.act.active else None

    def stmts(self, stmts):
        act = self.act
        for s in stmts:
            self.loc = s.loc
            if isinstance(s, N.Alloca):
                self.clone(s)
                if s in act.active_slots:
                    self.dual[s] = N.Alloca(s.dtype, f"dual_{s.name}")
                    self.dual[s].loc = s.loc
                    self.top.append(self.dual[s])
            elif isinstance(s, (N.RangeFor, N.While, N.If)):
                self.construct(s)
            elif self.sites and type(s).WRITES_ARRAY:
                if id(s) in self.sites:
                    self.count_winner(s)
            elif self.sites and isinstance(s, N.Print):
                continue   # the winners' replay prints nothing: the dual task did
            else:
                self.clone(s)
                self.tangent(s)

    def construct(self, s):
        new = self.clone(s)
        for name in s.BLOCK_FIELDS:
            block = N.Block()
            setattr(new, name, block)
            saved, self.block = self.block, block
            self.stmts(getattr(s, name).stmts)
            self.block = saved

    def tangent(self, s):
        act, m = self.act, self.m
        if isinstance(s, N.Compute) and s in act.active:
            terms = []
            for a, p in zip(s.args, partials(self, s.op, [m[a] for a in s.args], m[s])):
                d = self.dual_of(a)
                if p is not None and d is not None:
                    terms.append(self.compute(Op.MUL, self.cast(p, s.dtype), self.cast(d, s.dtype)))
            self.dual[s] = self.sum(terms, s)
        elif isinstance(s, N.LocalLoad) and s in act.active:
            self.dual[s] = self.emit(N.LocalLoad(self.dual[s.slot]))
        elif isinstance(s, N.LocalStore) and s.slot in act.active_slots:
            self.emit(N.LocalStore(self.dual[s.slot], self.dual_value(s.value, s.slot.dtype)))
        elif isinstance(s, N.GlobalLoad) and s in act.active:
            self.dual[s] = self.emit(N.GlobalLoad(s.array, tuple(m[i] for i in s.indices), "dual"))
        elif isinstance(s, N.GlobalStore) and act.is_grad_array_access(s):
            self.emit(N.GlobalStore(s.array, tuple(m[i] for i in s.indices),
                                    self.dual_value(s.value, s.array.dtype), "dual"))
        elif isinstance(s, N.AtomicRMW) and act.is_grad_array_access(s) and s.value in act.active:
            if not ATOMIC_RULES[s.op].winners:   # linear: add the dual (winners: the replay and fix-up set it)
                self.emit(N.AtomicRMW(Op.ATOMIC_ADD, s.array, tuple(m[i] for i in s.indices),
                                      self.dual_value(s.value, s.array.dtype), "dual"))

    def count_winner(self, s):
        """In the winners' replay: `if v == m[idx]: ties[idx] += 1; tangents[idx] += dual(v)`."""
        idx = tuple(self.m[i] for i in s.indices)
        branch = self.emit(N.If(won(self, s, self.m[s.value], idx, "primal"), N.Block(), N.Block()))
        saved, self.block = self.block, branch.then_body
        self.emit(N.AtomicRMW(Op.ATOMIC_ADD, self.scratch.param(s.array, "ties"), idx, self.const(1)))
        self.emit(N.AtomicRMW(Op.ATOMIC_ADD, self.scratch.param(s.array, "tangents"), idx,
                              self.dual_value(s.value, s.array.dtype)))
        self.block = saved

    def dual_value(self, v, dtype):
        d = self.dual_of(v)
        return self.const(0.0, dtype) if d is None else self.cast(d, dtype)

    def sum(self, terms, like):
        if not terms:
            return self.const(0.0, like.dtype)
        acc = terms[0]
        for t in terms[1:]:
            acc = self.compute(Op.ADD, acc, t)
        return acc

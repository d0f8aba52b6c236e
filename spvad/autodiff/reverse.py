"""Reverse mode: the gradient task of a primal task, replaying primal values through adstack snapshots.

The gradient body is `REPLAY(body); REV(body)`. REPLAY re-runs the primal (no global stores); before every
construct (if / loop iteration) that holds reverse work it pushes a snapshot of the local slots the
construct reads onto adstacks. REV walks statements backwards; for such a construct it pops iterations
in reverse: restore the snapshot, replay the construct's body forward (so every primal value of that
iteration exists again as SSA values, pushing snapshots for the constructs one level down), then
reverse it. A stack therefore holds at most one loop execution's iterations: capacity = trip count.
Adjoints live in Function-scope slots: one per active value (read and cleared at its definition) and
one per active local slot.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.emit import Emitter
from ..ir.licm import always_starts
from ..ir.ops import Op
from .activity import Activity, check_differentiable
from .adstack import StackSizer
from .depth_probe import build_count_kernel
from .extremum_ties import active_extrema, reverse_tie_tasks, won
from .loop_exits import eliminate_loop_exits
from .rules import ATOMIC_RULES, partials
from .thread_injective import thread_private_arrays
from .thread_order import refuse_needed, thread_order_values


def reverse_task(kernel, task, sizer_options, scratch, thread_private=True):
    """The gradient tasks of `task` (its derivative task, with the counting and fix-up tasks of atomic
    max/min winners around it), in launch order; [] when it has no reverse work. `scratch`: the TieScratch
    of the gradient kernel."""
    check_differentiable(kernel, task, "reverse")
    eliminate_loop_exits(task)
    rev = Reverser(kernel, task, sizer_options, scratch, thread_private)
    refuse_needed(kernel, task, rev.unreplayable, rev.act.needed)
    grad = rev.run()
    if grad is None:
        return []
    if grad.stack_sizes.measured:
        grad.depth_probe = build_count_kernel(kernel, task, grad.stack_sizes.measured, rev.unreplayable)
    before, after = reverse_tie_tasks(task, active_extrema(task, rev.act), scratch, rev.unreplayable)
    return before + [grad] + after


class Reverser(Emitter):
    prints = False   # whether a replay keeps the primal's prints (the first replay of an in-kernel derivative)
    width = 1        # adjoint components per value: an in-kernel jacobian's sweep carries one per output
    unreplayable = frozenset()   # statements thread order decided (thread_order.py): never replayed

    def __init__(self, kernel, task, sizer_options, scratch, thread_private=True):
        super().__init__()
        self.kernel, self.task, self.scratch = kernel, task, scratch
        self.act = Activity(task)
        self.sizer = StackSizer(task, **sizer_options)
        self.top = []          # statements placed at the top of the gradient body (allocas, stacks)
        self.slots = {}        # primal Alloca -> its clone (one per task: slots are shared by all replays)
        self.adj = {}          # active value or slot -> adjoint Alloca
        self.trips = {}        # loop -> Alloca counting its iterations in the latest replay
        self.snapshots = {}    # construct -> [(slot, AdStackAlloca of a loop | Alloca of an if)]
        self.flushes = {}      # construct -> {(array, indices): accumulator Alloca} (see _load_scope)
        self.thread_private = thread_private_arrays(task) if thread_private else set()
        self.unreplayable = thread_order_values(task)   # what thread order decided: no replay recomputes it

    def run(self):
        if not self.act.rev_work:
            return None
        hmap = {}
        header = N.Block()
        self.block = header
        for s in self.task.header.stmts:
            self.clone(s, hmap)
        body = N.Block()
        self.block = body
        for s in N.walk(self.task.body):
            if isinstance(s, N.Alloca):
                self.slots[s] = self.new_top(N.Alloca(s.dtype, s.name), s.loc)
        m = dict(self.slots)
        self.replay(self.task.body.stmts, m, snap=True)
        self.rev(self.task.body.stmts, m)
        body.stmts[0:0] = self.top
        grad = N.Task(self.task.name + "_grad", self.task.kind, header, hmap[self.task.num_threads], body)
        grad.stack_sizes = self.sizer
        return grad

    # ---- helpers ----
    def new_top(self, stmt, loc=None):
        stmt.loc = loc
        self.top.append(stmt)
        return stmt

    def clone(self, s, m):
        return self.emit(N.clone_stmt(s, m))

    def in_block(self, block, fn, *args):
        saved, self.block = self.block, block
        fn(*args)
        self.block = saved

    def adj_slots(self, key):
        """The `width` slots of an active value's or slot's adjoint."""
        a = self.adj.get(key)
        if a is None:
            name = key.name if isinstance(key, N.Alloca) else ""   # a slot, or an active value
            a = self.adj[key] = [self.new_sum(key.dtype, f"adj{k or ''}_{name or key.id}", key.loc)
                                 for k in range(self.width)]
        return a

    def new_sum(self, dtype, name, loc):
        """A slot that sums contributions, starting from the empty sum: -0.0 for floats, the identity of
        float addition (-0.0 + g is g bit for bit, +0.0 + -0.0 is not), so the optimiser can drop the add."""
        slot = self.new_top(N.Alloca(dtype, name), loc)
        if dtype.is_float:
            start = self.new_top(N.Const(-0.0, dtype), loc)
            self.new_top(N.LocalStore(slot, start), loc)
        return slot

    def empty_sum(self, dtype):
        return self.const(-0.0 if dtype.is_float else 0, dtype)

    def take_adjoint(self, key):
        """Read the adjoint's slots and clear them (the value's next execution starts from zero): a list."""
        out = []
        for a in self.adj_slots(key):
            out.append(self.emit(N.LocalLoad(a)))
            self.emit(N.LocalStore(a, self.empty_sum(a.dtype)))
        return out

    def accumulate(self, key, gs):
        """adjoint(key) += gs, component by component (None: nothing to add)."""
        if key not in self.act.active and key not in self.act.active_slots:
            return
        for a, g in zip(self.adj_slots(key), gs):
            if g is not None:
                g = self.cast(g, a.dtype)
                self.emit(N.LocalStore(a, self.compute(Op.ADD, self.emit(N.LocalLoad(a)), g)))

    # ---- REPLAY: the primal again, without global stores ----
    def replay(self, stmts, m, snap):
        for s in stmts:
            self.loc = s.loc
            if isinstance(s, N.Alloca) or type(s).WRITES_ARRAY or (isinstance(s, N.Print) and not self.prints) \
                    or s in self.unreplayable:
                continue   # slots are hoisted; the gradient kernel never writes primal outputs nor prints
            if isinstance(s, N.Seed):   # an in-kernel derivative's input (inline_reverse.py): its value
                m[s] = m[s.value]
            elif isinstance(s, N.LoopIndex):
                target = m[s.loop]
                m[s] = self.emit(N.LoopIndex(target)) if isinstance(target, N.RangeFor) else target
            elif isinstance(s, N.If):
                if snap and s in self.act.busy_constructs:
                    self.push_snapshot(s, m)
                new = self.emit(N.If(m[s.cond], N.Block(), N.Block()))
                self.in_block(new.then_body, self.replay, s.then_body.stmts, dict(m), False)
                self.in_block(new.else_body, self.replay, s.else_body.stmts, dict(m), False)
            elif isinstance(s, (N.RangeFor, N.While)):
                self.replay_loop(s, m, snap and s in self.act.busy_constructs)
            else:
                self.clone(s, m)

    def replay_loop(self, s, m, busy):
        if busy:
            trips = self.trips.get(s) or self.trips.setdefault(s, self.new_top(N.Alloca(T.i32, "trips"), s.loc))
            self.emit(N.LocalStore(trips, self.const(0)))
        flag = self.slots.get(s.exit_flag)
        if isinstance(s, N.RangeFor):
            new = self.emit(N.RangeFor(m[s.begin], m[s.end], s.step, N.Block(), flag))
        else:
            new = self.emit(N.While(N.Block(), flag))
        m1 = dict(m)
        m1[s] = new

        def body():
            if busy:
                self.push_snapshot(s, m1)
                t = self.trips[s]
                self.emit(N.LocalStore(t, self.compute(Op.ADD, self.emit(N.LocalLoad(t)), self.const(1))))
            self.replay(s.body.stmts, m1, False)
        self.in_block(new.body, body)

    def push_snapshot(self, construct, m):
        """Keep the slots `construct` reads as it starts. A loop keeps one entry per trip on adstacks; an
        `if` is replayed and reversed before the next execution of its replay keeps another, so one plain
        slot per value holds its snapshot (no stack, no count, no overflow check)."""
        snap = self.snapshots.get(construct)
        if snap is None:
            snap = self.snapshots[construct] = [(slot, self.new_top(self.snapshot_holder(slot, construct),
                                                                    construct.loc))
                                                for slot in self.act.slots_read_in(construct)]
        for slot, holder in snap:
            value = self.emit(N.LocalLoad(self.slots[slot]))
            self.emit(N.AdStackPush(holder, value) if isinstance(holder, N.AdStackAlloca) else
                      N.LocalStore(holder, value))

    def snapshot_holder(self, slot, construct):
        if isinstance(construct, N.If):
            return N.Alloca(slot.dtype, f"{slot.name or 'v'}_at_if")
        return self.sizer.new_stack(slot, construct)

    def restore_snapshot(self, construct):
        for slot, holder in self.snapshots.get(construct, ()):
            self.emit(N.LocalStore(self.slots[slot], self.emit(
                N.AdStackLoadTop(holder) if isinstance(holder, N.AdStackAlloca) else N.LocalLoad(holder))))

    def pop_snapshot(self, construct):
        for _, holder in self.snapshots.get(construct, ()):
            if isinstance(holder, N.AdStackAlloca):
                self.emit(N.AdStackPop(holder))

    # ---- REV: adjoints, backwards ----
    def rev(self, stmts, m):
        act = self.act
        for s in reversed(stmts):
            if s not in act.rev_work and s not in act.busy_constructs:
                continue
            self.loc = s.loc
            if isinstance(s, N.Compute):
                g = self.take_adjoint(s)
                ps = partials(self, s.op, [m[a] for a in s.args], m[s])
                for a, p in zip(s.args, ps):
                    if p is not None and a in act.active:
                        p = self.cast(p, s.dtype)
                        self.accumulate(a, [self.compute(Op.MUL, gk, p) for gk in g])
            elif isinstance(s, N.LocalLoad):
                self.accumulate(s.slot, self.take_adjoint(s))
            elif isinstance(s, N.Seed):
                self.seed_adjoints[s] = self.take_adjoint(s)
            elif isinstance(s, N.LocalStore):
                self.accumulate(s.value, self.take_adjoint(s.slot))
            elif isinstance(s, N.GlobalLoad):   # (kernel-level: width 1)
                g, = self.take_adjoint(s)
                scope = self._load_scope(s)
                if scope is None:
                    self.add_to_grad(s.array, s.indices, g, m)
                else:   # sum locally, one atomic add after the loop (not one per iteration)
                    self.sum_for_flush(scope, s, g)
            elif isinstance(s, N.GlobalStore):
                idx = tuple(m[i] for i in s.indices)
                g = self.emit(N.GlobalLoad(s.array, idx, "grad"))
                self.emit(N.GlobalStore(s.array, idx, self.const(0.0, s.array.dtype), "grad"))   # consumed
                self.accumulate(s.value, [g])
            elif isinstance(s, N.AtomicRMW):
                self.rev_atomic(s, m)
            elif isinstance(s, N.If):
                self.restore_snapshot(s)
                new = self.emit(N.If(m[s.cond], N.Block(), N.Block()))
                for src, dst in ((s.then_body, new.then_body), (s.else_body, new.else_body)):
                    self.in_block(dst, self.replay_and_reverse, src.stmts, dict(m))
                self.pop_snapshot(s)
            elif isinstance(s, (N.RangeFor, N.While)):
                self.rev_loop(s, m)
                self.flush_loads(s, m)

    def _load_scope(self, load):
        """The outermost loop around `load` that its indices do not depend on, or None."""
        around = set()
        for i in load.indices:
            p = self.act.parent.get(i)
            while p is not None:
                around.add(p)
                p = self.act.parent.get(p)
        chain, p = [], self.act.parent.get(load)
        while p is not None:
            chain.append(p)
            p = self.act.parent.get(p)
        outside = [c for c in chain if c not in around and isinstance(c, (N.RangeFor, N.While))]
        if not outside:
            return None
        scope = outside[-1]
        # A store/atomic into the same array inside the scope reads that element's .grad in the reverse
        # (e.g. `if k == 0: y[i] = e` then `... y[i] ...` in a loop): its loads must add theirs first.
        for t in N.walk(scope.body):
            if type(t).WRITES_ARRAY and t.array is load.array:
                return None
        return scope

    def sum_for_flush(self, scope, load, g):
        """adjoint of the element `load` reads += g, in a slot added to x.grad once, after the loop `scope`."""
        key = (load.array, load.indices)
        flush = self.flushes.setdefault(scope, {}).get(key)
        if flush is None:
            guard = self._flush_guard(scope, key)
            if guard == "flag":
                guard = self.new_top(N.Alloca(T.u1, f"read_{load.array.name}"), load.loc)
                self.new_top(N.LocalStore(guard, self.new_top(N.Const(False, T.u1), load.loc)), load.loc)
            flush = self.flushes[scope][key] = (self.new_sum(load.dtype, f"acc_{load.array.name}", load.loc), guard)
        acc, guard = flush
        self.emit(N.LocalStore(acc, self.compute(Op.ADD, self.emit(N.LocalLoad(acc)), g)))
        if isinstance(guard, N.Alloca):
            self.emit(N.LocalStore(guard, self.const(True, T.u1)))

    def _flush_guard(self, scope, key):
        """How the update after the loop `scope` knows that the primal read the element `key`: "always" (every
        run of the loop reads it), "starts" (every iteration does, and `scope` is a for loop: when it starts),
        or "flag" (a slot set where a contribution is summed). An element the primal did not read may be out of
        bounds (`if j >= 0: ... x[j]`, a loop that runs no iteration): the update must not touch it."""
        best = "flag"
        for t in N.walk(scope.body):
            if not (isinstance(t, N.GlobalLoad) and (t.array, t.indices) == key):
                continue
            inner, p = t, self.act.parent.get(t)
            while p is not scope and isinstance(p, (N.RangeFor, N.While)) and inner in p.body.stmts \
                    and always_starts(p):
                inner, p = p, self.act.parent.get(p)
            if p is scope and inner in scope.body.stmts:   # read in every iteration that starts
                if always_starts(scope):
                    return "always"
                best = "starts"
        return best

    def add_to_grad(self, array, indices, g, m):
        """x.grad[idx] += g: atomic, unless every access to x in this task is at the same index, one that
        differs per thread (then no other thread can touch that element: a plain read-add-write)."""
        idx = tuple(m[i] for i in indices)
        if array in self.thread_private:
            old = self.emit(N.GlobalLoad(array, idx, "grad"))
            self.emit(N.GlobalStore(array, idx, self.compute(Op.ADD, old, g), "grad"))
        else:
            self.emit(N.AtomicRMW(Op.ATOMIC_ADD, array, idx, g, "grad"))

    def flush_loads(self, loop, m):
        """Add what the loads in `loop` summed to their elements' .grad, where the primal read them."""
        for (array, indices), (acc, guard) in self.flushes.get(loop, {}).items():
            if guard == "always":
                self.flush(array, indices, acc, m)
                continue
            if guard == "starts":
                cond = self.compute(Op.LT if loop.step > 0 else Op.GT, m[loop.begin], m[loop.end])
            else:   # the flag: cleared for the loop's next run
                cond = self.emit(N.LocalLoad(guard))
                self.emit(N.LocalStore(guard, self.const(False, T.u1)))
            branch = self.emit(N.If(cond, N.Block(), N.Block()))
            self.in_block(branch.then_body, self.flush, array, indices, acc, m)

    def flush(self, array, indices, acc, m):
        g = self.emit(N.LocalLoad(acc))
        self.emit(N.LocalStore(acc, self.empty_sum(acc.dtype)))
        self.add_to_grad(array, indices, g, m)

    def replay_and_reverse(self, stmts, m):
        self.replay(stmts, m, snap=True)
        self.rev(stmts, m)

    def rev_atomic(self, s, m):
        idx = tuple(m[i] for i in s.indices)
        g = self.emit(N.GlobalLoad(s.array, idx, "grad"))
        if ATOMIC_RULES[s.op].winners:   # the contributions equal to the final max/min share it (linear: all)
            count = self.cast(self.emit(N.GlobalLoad(self.scratch.param(s.array, "ties"), idx)), g.dtype)
            share = self.compute(Op.DIV, g, count)
            g = self.compute(Op.SELECT, won(self, s, m[s.value], idx, "final"), share, self.const(0.0, g.dtype))
        self.accumulate(s.value, [g])

    def rev_loop(self, s, m):
        trips = self.emit(N.LocalLoad(self.trips[s]))
        back = self.emit(N.RangeFor(self.compute(Op.SUB, trips, self.const(1)), self.const(-1), -1, N.Block()))

        def body():
            j = self.emit(N.LoopIndex(back))
            m1 = dict(m)
            if isinstance(s, N.RangeFor):
                m1[s] = self.compute(Op.ADD, m[s.begin], self.compute(Op.MUL, j, self.const(s.step)))
            if s.exit_flag is not None:   # every iteration that ran started with it False
                self.emit(N.LocalStore(self.slots[s.exit_flag], self.const(False)))
            self.restore_snapshot(s)
            self.replay_and_reverse(s.body.stmts, m1)
            self.pop_snapshot(s)
        self.in_block(back.body, body)


"""Reverse mode inside kernels for functions with loops and branches: kernel-level reverse mode (reverse.py)
run on the body of one Derivative statement, in place.

For each output of the derivative, a sweep: REPLAY(body) pushing the snapshots of its loops and branches
(the first sweep's replay is the function's one primal run, prints included), then REV(body) with the
output's adjoint set to 1, ending at the Seeds: their adjoints are d output / d input. Loop-carried values
go on adstacks sized as kernel-level ones are (at compile time, or at launch from scalars and shapes, or by
`ad_stack_size`; an overflow is raised at the next sync). The body's slots are the kernel's own: a later
sweep restores those its body reads before writing them.

Only primal kernels take this path (a kernel differentiated again expands its derivatives in forward mode,
which needs no stack), and only when no loop's trip count depends on array data (those stacks would need the
depth probe, itself a run of the kernel).
"""
from ..ir import nodes as N
from ..ir.emit import Emitter
from .activity import Activity, read_before_written
from .loop_exits import eliminate_loop_exits
from .reverse import Reverser


def stacks_sized_without_probe(deriv, sizer):
    """Whether every loop in `deriv`'s body has stacks sized before the launch runs."""
    return not any(isinstance(s, (N.RangeFor, N.While)) and sizer.needs_measuring(s) for s in N.walk(deriv.body))


class InlineReverse(Reverser):
    """The statements replacing one Derivative (see _reverse_plan in inline_derivatives.py for `owner`,
    `outputs` and `first`); `slots` receives what goes to the top of the task (slots, stacks)."""

    def __init__(self, deriv, owner, outputs, first, sizer, slots):
        Emitter.__init__(self)
        self.deriv, self.owner, self.outputs, self.first = deriv, owner, outputs, first
        self.body = N.Task("derivative", "serial", N.Block(), None, N.Block(deriv.body.stmts[:first]))
        eliminate_loop_exits(self.body)   # its flags' slots come first
        while self.body.body.stmts and isinstance(self.body.body.stmts[0], N.Alloca):
            slots.append(self.body.body.stmts.pop(0))
        self.act = Activity(self.body, None, outputs)
        self.sizer, self.top = sizer, slots
        self.adj, self.trips, self.snapshots, self.flushes = {}, {}, {}, {}
        self.thread_private = set()
        self.seed_adjoints = {}

    def run(self):
        self.block, self.loc = N.Block(), self.deriv.loc
        stmts = self.body.body.stmts
        inside = set(N.walk(self.body.body))
        outside = {o: o for s in inside for o in s.operands() if o not in inside}   # constants of the derivative
        self.slots = {o: o for o in outside if isinstance(o, N.Alloca)}
        restored = [(slot, self.new_top(N.Alloca(slot.dtype, f"{slot.name or 'v'}_at_start"), slot.loc))
                    for slot in read_before_written(stmts) if slot in self.act.needed_slots]
        for slot, keep in restored:
            self.emit(N.LocalStore(keep, self.emit(N.LocalLoad(slot))))
        derivative, starts, first_map = {}, [], None
        for k, output in enumerate(self.outputs):
            if k:
                for slot, keep in restored:
                    self.emit(N.LocalStore(slot, self.emit(N.LocalLoad(keep))))
            starts.append(len(self.block.stmts))
            m = dict(outside)
            self.prints = k == 0
            self.replay(stmts, m, snap=True)
            self.prints = False
            if k == 0:
                first_map = m
            self.accumulate(output, self.const(1.0, output.dtype))
            self.seed_adjoints = {}
            self.rev(stmts, m)
            derivative[output] = self.seed_adjoints
        self.clear_slot_adjoints(starts)
        subst = dict(first_map)
        for s in self.deriv.body.stmts[self.first:]:
            self.loc = s.loc
            if isinstance(s, N.Tangent):
                adj = derivative[s.value].get(self.owner[s.direction])
                subst[s] = self.const(0.0, s.dtype) if adj is None else self.cast(adj, s.dtype)
                continue
            s.replace_operands(subst)
            self.block.append(s)
        return self.block.stmts

    def clear_slot_adjoints(self, starts):
        """Every sweep starts with the slots' adjoints at zero: one whose slot is read before it is written
        keeps what the previous sweep (or run of the derivative) left. Stores the optimiser drops elsewhere."""
        slots = [a for key, a in self.adj.items() if isinstance(key, N.Alloca)]
        for at in reversed(starts):
            clear = []
            for a in slots:
                zero = N.Const(-0.0, a.dtype)
                clear += [zero, N.LocalStore(a, zero)]
            for s in clear:
                s.loc = self.deriv.loc
            self.block.stmts[at:at] = clear

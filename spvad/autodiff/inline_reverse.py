"""Reverse mode inside kernels for functions with loops and branches: kernel-level reverse mode (reverse.py)
run on the body of one Derivative statement, in place.

REPLAY(body) pushing the snapshots of its loops and branches (the function's one primal run, prints
included), then REV(body) with one adjoint component per output (vector reverse mode: a jacobian's rows in
one sweep), component k of output k set to 1, ending at the Seeds: their adjoints are d output / d input.
Loop-carried values go on adstacks sized as kernel-level ones are: at compile time, at launch from scalars
and shapes, by the depth probe when the trip count is array data (inline_derivatives.py builds it), or by
`ad_stack_size`; an overflow is raised at the next sync. The body's slots are the kernel's own.

With loops, only primal kernels take this path (a kernel differentiated again expands its derivatives in
forward mode, which needs no stack).
"""
from ..ir import nodes as N
from ..ir.emit import Emitter
from .activity import Activity
from .loop_exits import eliminate_loop_exits
from .reverse import Reverser


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
        self.width = len(outputs)
        self.seed_adjoints = {}

    def run(self):
        self.block, self.loc = N.Block(), self.deriv.loc
        stmts = self.body.body.stmts
        inside = set(N.walk(self.body.body))
        m = {o: o for s in inside for o in s.operands() if o not in inside}   # the derivative's constants
        self.slots = {o: o for o in m if isinstance(o, N.Alloca)}
        self.prints = True   # the replay is the function's primal run
        self.replay(stmts, m, snap=True)
        self.prints = False
        start = len(self.block.stmts)
        for k, output in enumerate(self.outputs):   # adjoint component k: d output k / d ...
            self.accumulate(output, [self.const(1.0, output.dtype) if j == k else None for j in range(self.width)])
        self.rev(stmts, m)
        self.clear_slot_adjoints(start)
        subst = dict(m)
        for s in self.deriv.body.stmts[self.first:]:
            self.loc = s.loc
            if isinstance(s, N.Tangent):
                adj = self.seed_adjoints.get(self.owner[s.direction])
                g = None if adj is None else adj[self.outputs.index(s.value)]
                subst[s] = self.const(0.0, s.dtype) if g is None else self.cast(g, s.dtype)
                continue
            s.replace_operands(subst)
            self.block.append(s)
        return self.block.stmts

    def clear_slot_adjoints(self, at):
        """The sweep starts with the slots' adjoints at zero: one whose slot is read before the function
        writes it keeps what the previous run of the derivative left (the optimiser drops the other stores)."""
        clear = []
        for key, slots in self.adj.items():
            if isinstance(key, N.Alloca):
                for a in slots:
                    zero = N.Const(-0.0, a.dtype)
                    clear += [zero, N.LocalStore(a, zero)]
        for s in clear:
            s.loc = self.deriv.loc
        self.block.stmts[at:at] = clear

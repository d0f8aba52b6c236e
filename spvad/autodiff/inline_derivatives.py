"""Expand derivatives inside kernels (Derivative statements from frontend/derivatives.py) into plain IR.

Forward mode with `width` tangents per value at once (Enzyme's vector mode), built from the partials table
kernel-level autodiff uses (rules.py). Tangents are computed in program order next to their primal values,
so loops (dynamic bounds, while, break/continue) and branches need no adstack; a local slot's tangents are
local slots too. A derivative along unit directions (grad, value_and_grad, vjp, jacobian, hessian) with
many more inputs than outputs takes reverse mode instead (inline_reverse.py): one sweep back from all
outputs at once; with loops, their loop-carried values go on adstacks, which only the outermost derivatives
of a primal kernel may use (nothing differentiates adstacks again). This is the first pass of every
compile: the passes after it, kernel-level reverse and forward mode included, see ordinary code (second
derivatives). Nested Derivatives (a hessian, a func calling sp.grad) expand innermost first.
"""
from ..ir import nodes as N
from ..ir import simplify
from ..ir.emit import Emitter
from ..ir.ops import Op
from .adstack import StackSizer
from .depth_probe import build_count_kernel, replay_without_writes
from .inline_reverse import InlineReverse
from .loop_exits import eliminate_loop_exits
from .rules import NOT_DIFFERENTIABLE, partials


def expand_derivatives(kernel, stacks=False, ad_stack_size=None, probe=True):
    """Replace every Derivative statement of `kernel` by plain IR, in place; returns the kernel. `stacks`:
    reverse mode may put a function's loop-carried values on adstacks (inline_reverse.py; primal kernels
    only: kernel-level autodiff does not differentiate adstacks), sized by `ad_stack_size` when given, and
    by the depth probe when `probe` (no ndarray bound to two parameters: the probe could miss a write)."""
    for task in kernel.tasks:
        if not any(isinstance(s, N.Derivative) for s in N.walk(task.body)):
            continue
        _drop_unused_tangents(task)
        expansion = _Expansion(kernel, task, stacks, ad_stack_size, probe)
        expansion.block(task.body, 0)
        task.body.stmts[0:0] = expansion.slots
        sizer = expansion.sizer
        if sizer is not None and sizer.stacks:
            task.stack_sizes = sizer
            if sizer.measured:
                task.depth_probe = expansion.depth_probe()
    return kernel


def _drop_unused_tangents(task):
    """Tangents nothing reads (a gradient never used, a jacobian's unused rows) become zeros: no derivative
    work is done for them, and a derivative with fewer outputs or directions left may change mode."""
    live = simplify.live_statements(task, lambda s: isinstance(s, N.Tangent) or simplify.removable(s))
    for s in N.walk(task.body):
        if isinstance(s, N.Derivative):
            for k, t in enumerate(s.body.stmts):
                if isinstance(t, N.Tangent) and t not in live:
                    zero = s.body.stmts[k] = N.Const(0.0, t.dtype)
                    zero.loc = t.loc
                    for u in s.body.stmts[k + 1:]:
                        u.replace_operands({t: zero})


class _Expansion:
    """The Derivatives of one task; `slots` gathers what goes to the top of the task (like the frontend's
    locals): tangent and adjoint slots, adstacks."""

    def __init__(self, kernel, task, stacks, ad_stack_size, probe):
        self.kernel, self.task, self.stacks = kernel, task, stacks
        self.slots, self.sizer, self.before, self.probe_ok = [], None, None, False
        if stacks:
            self.sizer = StackSizer(task, ad_stack_size)
            # The depth probe (a run of the task without its writes, before it) sees what the task reads only
            # if the task writes none of it: else a loop measured there may run longer in the launch.
            if probe and any(self.measured(d) for d in _outermost(task.body) if _reverse_plan(d)) and \
                    not _reads_what_it_writes(task):
                self.probe_ok, self.copies = True, {}
                self.before = N.Task(task.name, task.kind, task.header, task.num_threads,
                                     replay_without_writes(task.body, self.copies))

    def measured(self, deriv):
        """Whether a loop of `deriv` has stacks only the depth probe can size."""
        return any(self.sizer.needs_measuring(s) for s in N.loops_in(deriv.body))

    def block(self, block, depth):
        """Expand the Derivatives in `block` (those nested in others first)."""
        out = []
        for s in block.stmts:
            for b in s.blocks():
                self.block(b, depth + isinstance(s, N.Derivative))
            out.extend(self.expand(s, depth) if isinstance(s, N.Derivative) else [s])
        block.stmts[:] = out

    def expand(self, deriv, depth):
        plan = _reverse_plan(deriv)
        if plan is None:
            return _VectorForward(deriv, self.slots).run()
        if not _has_loops(deriv):   # no adstack: plain IR
            return InlineReverse(deriv, *plan, None, self.slots).run()
        # adstacks: not where the code is differentiated again (kernel-level autodiff, an enclosing derivative)
        if self.stacks and depth == 0 and (self.probe_ok or not self.measured(deriv)):
            return InlineReverse(deriv, *plan, self.sizer, self.slots).run()
        return _VectorForward(deriv, self.slots).run()

    def depth_probe(self):
        """(counting kernel, counters) for the stacks sized by the depth probe (autodiff/depth_probe.py): the
        task with its derivatives in forward mode (no stacks; the same loops run as often), counting the
        loops the stacks belong to."""
        task = self.before
        expand_derivatives(N.Kernel(self.kernel.name, self.kernel.arrays, self.kernel.scalars, [task]))
        eliminate_loop_exits(task)
        measured = {sid: self.copies[loop] for sid, loop in self.sizer.measured.items()}
        return build_count_kernel(self.kernel, task, measured)


def _is_zero(v):
    return isinstance(v, N.Const) and v.value == 0


def _differentiable(s):
    return isinstance(s, N.Compute) and s.dtype.is_float and s.op not in NOT_DIFFERENTIABLE


class _Directions:
    """For each value and slot of a Derivative's body, the directions in which its tangent can be nonzero
    (reached from a Seed with a nonzero tangent there) and is needed (it flows into a Tangent). Values and
    slots outside both get no tangent work at all."""

    def __init__(self, deriv):
        stmts = list(N.walk(deriv.body))
        needed = self._needed(stmts)
        dirs = {}
        changed = True
        while changed:   # a fixed point: loops feed slots back into themselves
            changed = False
            for s in stmts:
                if isinstance(s, N.Seed):
                    new = {j for j, t in enumerate(s.tangents) if not _is_zero(t)}
                elif _differentiable(s):
                    new = set().union(*(dirs.get(a, ()) for a in s.args))
                elif isinstance(s, N.LocalLoad) and s.dtype.is_float:
                    new = dirs.get(s.slot, set())
                elif isinstance(s, N.LocalStore) and s.slot.dtype.is_float:
                    s, new = s.slot, dirs.get(s.value, set())
                else:
                    continue
                if not new <= dirs.get(s, set()):
                    dirs[s] = dirs.get(s, set()) | new
                    changed = True
        self.dirs = {s: d for s, d in dirs.items() if s in needed and d}

    @staticmethod
    def _needed(stmts):
        """Values and slots some Tangent reads through (backwards, to a fixed point)."""
        needed = {s.value for s in stmts if isinstance(s, N.Tangent)}
        changed = True
        while changed:
            changed = False
            for s in reversed(stmts):
                if _differentiable(s) and s in needed:
                    new = [a for a in s.args if a.dtype.is_float]
                elif isinstance(s, N.LocalLoad) and s in needed:
                    new = [s.slot]
                elif isinstance(s, N.LocalStore) and s.slot in needed:
                    new = [s.value]
                else:
                    continue
                for v in new:
                    if v not in needed:
                        needed.add(v)
                        changed = True
        return needed

    def of(self, s):
        return self.dirs.get(s, ())


class _VectorForward(Emitter):
    """The statements replacing one Derivative: its body, in place, with each active value followed by its
    tangents (`tangents[value][direction]`), Seeds replaced by their values and Tangents by the tangents."""

    def __init__(self, deriv, slots):
        super().__init__()
        self.deriv, self.slots = deriv, slots
        self.dirs = _Directions(deriv)
        self.subst = {}      # Seed -> its value; Tangent -> the tangent it reads
        self.tangents = {}   # value -> {direction: tangent value}
        self.tangent_slots = {}   # slot -> {direction: Alloca}

    def run(self):
        self.block, self.loc = N.Block(), self.deriv.loc
        for slot, dirs in self.dirs.dirs.items():
            if isinstance(slot, N.Alloca):
                self.tangent_slots[slot] = {}
                for j in sorted(dirs):
                    t = self.tangent_slots[slot][j] = N.Alloca(slot.dtype, f"tangent{j}_{slot.name}")
                    t.loc = slot.loc
                    self.slots.append(t)
                    # what a slot held before the derivative is a constant of it
                    self.emit(N.LocalStore(t, self.const(0.0, slot.dtype)))
        self.stmts(self.deriv.body.stmts)
        return self.block.stmts

    def stmts(self, stmts):
        for s in stmts:
            self.loc = s.loc
            if isinstance(s, N.Seed):
                self.subst[s] = self.subst.get(s.value, s.value)
                self.tangents[s] = {j: s.tangents[j] for j in self.dirs.of(s)}
                continue
            if isinstance(s, N.Tangent):
                t = self.tangents.get(s.value, {}).get(s.direction)
                self.subst[s] = self.const(0.0, s.dtype) if t is None else self.cast(t, s.dtype)
                continue
            original = {name: getattr(s, name) for name in s.VALUE_FIELDS}
            s.replace_operands(self.subst)
            self.block.append(s)
            for name in s.BLOCK_FIELDS:
                saved, self.block = self.block, N.Block()
                self.stmts(getattr(s, name).stmts)
                setattr(s, name, self.block)
                self.block = saved
            self.tangent(s, original)

    def tangent(self, s, original):
        """Emit the tangents of `s` (its operands as they were before Seeds were replaced: `original`)."""
        if isinstance(s, N.Alloca) and s in self.tangent_slots:   # zeroes the slot: a constant again
            for t in self.tangent_slots[s].values():
                self.emit(N.LocalStore(t, self.const(0.0, t.dtype)))
        elif isinstance(s, N.Compute):
            dirs = self.dirs.of(s)
            if dirs:
                self.compute_tangents(s, original["args"], dirs)
        elif isinstance(s, N.LocalLoad) and s.slot in self.tangent_slots:
            self.tangents[s] = {j: self.emit(N.LocalLoad(t)) for j, t in self.tangent_slots[s.slot].items()
                                if j in self.dirs.of(s)}
        elif isinstance(s, N.LocalStore) and s.slot in self.tangent_slots:
            given = self.tangents.get(original["value"], {})
            for j, t in self.tangent_slots[s.slot].items():
                v = given.get(j)
                self.emit(N.LocalStore(t, self.const(0.0, t.dtype) if v is None else self.cast(v, t.dtype)))

    def compute_tangents(self, s, args, dirs):
        """tangent_j(out) = sum_i d out / d arg_i * tangent_j(arg_i): the partials once, for all directions."""
        terms = {}
        for a, p in zip(args, partials(self, s.op, list(s.args), s)):
            given = self.tangents.get(a)
            if p is None or not given:
                continue
            p = self.cast(p, s.dtype)
            for j, t in given.items():
                if j in dirs:
                    terms.setdefault(j, []).append(self.compute(Op.MUL, p, self.cast(t, s.dtype)))
        out = {}
        for j, ts in terms.items():
            acc = ts[0]
            for t in ts[1:]:
                acc = self.compute(Op.ADD, acc, t)
            out[j] = acc
        self.tangents[s] = out


# ---- reverse mode ------------------------------------------------------------------------------------------
# Reverse mode pays off only for many more inputs than outputs: a vector forward pass keeps its k tangents
# side by side. On lavapipe, gradients of a scalar function: 3 inputs (an SDF normal) forward 4.2 ms, reverse
# 4.9 ms; 9 inputs (the energy of a 3x3 deformation gradient) reverse/forward 0.80-0.84.
# With a loop, reverse mode also replays each iteration and keeps its loop-carried values on adstacks
# (benchmarks/inner_modes.py, 8 steps of x <- tanh(F x)): reverse/forward 1.29-1.33 for 9 inputs, 1.12 for 12
# (x0 constant), 0.84-0.95 for 16.
REVERSE_WIDTH_PER_OUTPUT = 4
REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS = 12


def _reads_what_it_writes(task):
    """Whether a value the task reads from an array may come from its own writes (an atomic's old value
    counts only where it is used: `loss[None] += ...` reads nothing)."""
    stmts = list(N.walk(task.body))
    written = {s.array for s in stmts if type(s).WRITES_ARRAY}
    used = {o for s in stmts for o in s.operands()}
    return any(s.array in written for s in stmts
               if isinstance(s, N.GlobalLoad) or (isinstance(s, N.AtomicRMW) and s in used))


def _outermost(block):
    """The Derivatives in `block` that no other Derivative holds."""
    for s in block.stmts:
        if isinstance(s, N.Derivative):
            yield s
        else:
            for b in s.blocks():
                yield from _outermost(b)


def _has_loops(deriv):
    return any(N.loops_in(deriv.body))


def _reverse_plan(deriv):
    """(owner, outputs, first) when `deriv` is cheaper in reverse mode, else None. owner: direction -> the
    Seed whose tangent is 1 in it (0 for every other seed); outputs: the values Tangents read; first: the index
    of the first Tangent, from which on the body only reads and stores tangents."""
    stmts = deriv.body.stmts
    owner = {}
    for s in stmts:
        if isinstance(s, N.Seed):
            for j, t in enumerate(s.tangents):
                if not isinstance(t, N.Const) or t.value not in (0, 1):
                    return None
                if t.value == 1:
                    if j in owner:
                        return None
                    owner[j] = s
    tangents = [s for s in stmts if isinstance(s, N.Tangent)]
    outputs = list(dict.fromkeys(t.value for t in tangents))
    directions = len({t.direction for t in tangents})   # those read: forward mode computes only them
    per_output = REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS if _has_loops(deriv) else REVERSE_WIDTH_PER_OUTPUT
    if len(owner) != deriv.width or not outputs or directions <= per_output * len(outputs):
        return None
    first = stmts.index(tangents[0])
    if any(isinstance(s, N.Seed) or not isinstance(s, (N.Tangent, N.LocalStore, N.Const, N.Compute))
           for s in stmts[first:]):
        return None
    return owner, outputs, first

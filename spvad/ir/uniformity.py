"""Uniformity: which values of a task are the same for every thread that computes them together, and which
atomics therefore update one address for all of them (spirv/lower_reduce.py reduces those across the
subgroup first).

A value is uniform when it is built only from constants, scalar arguments, array shapes, loop indices of
loops entered at a uniform index, local slots that only ever hold uniform values written in uniform control
flow, and loads at uniform addresses of arrays the task never writes (no write to any array of that dtype:
one ndarray may be bound to two parameters). Never from the thread index, nor from an atomic's old value or
an adstack. "The same" is among the threads executing one dynamic instance of a statement: two threads
running one iteration of a loop entered together agree on its index even when their trip counts differ.
"""
from . import nodes as N
from .ops import ATOMICS

_ALWAYS_UNIFORM = (N.Const, N.ScalarArg, N.ArrayShape)


class _Analysis:
    """One pass over a task under an assumption about which local slots are uniform (`bad` slots are not);
    repeated until the set of bad slots stops growing (it only grows, so it ends)."""

    def __init__(self, task):
        self.task = task
        self.written = {s.array.dtype for s in N.walk(task.body) if type(s).WRITES_ARRAY}
        self.bad = set()          # slots (Alloca) that may differ between threads
        self.uniform = set()      # uniform value statements of the last pass

    def run(self):
        while True:
            before = len(self.bad)
            self.uniform = set()
            self.block(self.task.header, True)
            self.block(self.task.body, not _leaves_early(self.task.body))
            if len(self.bad) == before:
                return self.uniform

    def is_uniform(self, v):
        return v is None or v in self.uniform

    def block(self, block, control):
        """`control`: every thread that enters `block` together runs all of it (no divergent branch or trip
        count between the task's start and here)."""
        for s in block.stmts:
            self.stmt(s, control)

    def stmt(self, s, control):
        u = self.is_uniform
        if isinstance(s, _ALWAYS_UNIFORM):
            self.uniform.add(s)
        elif isinstance(s, N.Compute):
            if all(u(a) for a in s.args):
                self.uniform.add(s)
        elif isinstance(s, N.LoopIndex):
            if u(s.loop.begin):   # threads in one iteration of one entry of the loop agree on its index
                self.uniform.add(s)
        elif isinstance(s, N.LocalLoad):
            if s.slot not in self.bad:
                self.uniform.add(s)
        elif isinstance(s, N.Alloca):   # zeroes the slot: a divergent zeroing makes it differ
            if not control:
                self.bad.add(s)
        elif isinstance(s, N.LocalStore):
            if not (control and u(s.value)):
                self.bad.add(s.slot)
        elif isinstance(s, N.SlotSelect):
            if u(s.index) and not any(slot in self.bad for slot in s.slots):
                self.uniform.add(s)
        elif isinstance(s, N.SlotStore):
            if not (control and u(s.index) and u(s.value)):
                self.bad.update(s.slots)
        elif isinstance(s, N.GlobalLoad):
            if s.array.dtype not in self.written and all(u(i) for i in s.indices) and u(s.guard):
                self.uniform.add(s)
        elif isinstance(s, N.If):
            inner = control and u(s.cond)
            self.block(s.then_body, inner)
            self.block(s.else_body, inner)
        elif isinstance(s, N.RangeFor):
            trips = u(s.begin) and u(s.end) and (s.exit_flag is None or s.exit_flag not in self.bad)
            self.block(s.body, control and trips and not _leaves_early(s.body))
        elif isinstance(s, N.While):
            trips = s.exit_flag is not None and s.exit_flag not in self.bad
            self.block(s.body, control and trips and not _leaves_early(s.body))
        else:   # atomics, adstacks, prints, anything new: not uniform, and its blocks as divergent code
            for b in s.blocks():
                self.block(b, False)


def _leaves_early(body):
    """Whether a loop's `body` (or the task's) has a break or continue of its own (not of an inner loop):
    conservatively, its threads may then run different parts of an iteration."""
    stack = list(body.stmts)
    while stack:
        s = stack.pop()
        if isinstance(s, (N.Break, N.Continue)):
            return True
        if not isinstance(s, (N.RangeFor, N.While)):
            for b in s.blocks():
                stack.extend(b.stmts)
    return False


def uniform_values(task):
    """The value statements of `task` (header and body) that are uniform (see the module docstring)."""
    return _Analysis(task).run()


def used_values(task):
    """Every statement some statement of `task` (or its thread count) takes as an operand."""
    used = {task.num_threads}
    for block in (task.header, task.body):
        for s in N.walk(block):
            used.update(s.operands())
    return used


def uniform_atomics(task):
    """The AtomicRMWs of `task` whose address is uniform and whose old value nothing reads: the threads
    running one together may combine their values first and let one of them update the element."""
    uniform, used = uniform_values(task), used_values(task)
    return {s for s in N.walk(task.body)
            if isinstance(s, N.AtomicRMW) and s.op in ATOMICS and s not in used
            and all(i in uniform for i in s.indices)}

"""Activity analysis: which values lie between a needs-grad input and a differentiated output, and
which primal values and local slots the reverse pass must be able to recompute.

Active = depends on a load from a needs-grad array AND flows into a store/atomic into a needs-grad
array (through values and local slots), float-typed. Nothing is computed, stored or pushed for the rest.
Inside a kernel (autodiff/inline_reverse.py) the inputs are a derivative's Seeds and the outputs are given.
"""
from ..errors import AutodiffRuleError
from ..ir import nodes as N
from .rules import NOT_DIFFERENTIABLE

CONSTRUCTS = (N.If, N.RangeFor, N.While)


class Activity:
    """`flag` names the ArrayParam attribute marking differentiated arrays: needs_grad (reverse mode)
    or needs_dual (forward mode), or None (no array is). `outputs`: values differentiated besides the array
    stores (an in-kernel derivative's results); Seed statements are differentiated inputs."""

    def __init__(self, task, flag="needs_grad", outputs=()):
        self.task, self.flag, self.outputs = task, flag, outputs
        self.stmts = list(N.walk(task.body))
        self.parent = {}                     # stmt -> enclosing construct (or None)
        self._parents(task.body, None)
        self.active = set()                  # active value statements
        self.active_slots = set()
        self._activity()
        self.rev_work = {s for s in self.stmts if self._has_rev_work(s)}
        self.busy_constructs = set()         # constructs containing reverse work
        for s in self.rev_work:
            p = self.parent[s]
            while p is not None and p not in self.busy_constructs:
                self.busy_constructs.add(p)
                p = self.parent[p]
        self.needed_slots = self._needed_slots()

    def _parents(self, block, construct):
        for s in block.stmts:
            self.parent[s] = construct
            for b in s.blocks():
                self._parents(b, s)

    def is_grad_array_access(self, s):
        return self.flag is not None and getattr(s.array, self.flag) and s.field == "primal" and \
            s.array.dtype.is_float

    def _activity(self):
        fwd, fwd_slots = set(), set()
        bwd, bwd_slots = set(self.outputs), set()
        changed = True
        while changed:   # fixed point: loops make slots feed themselves
            changed = False
            for s in self.stmts:
                if s.dtype is not None and s.dtype.is_float and s not in fwd:
                    if isinstance(s, N.Seed) or (isinstance(s, N.GlobalLoad) and self.is_grad_array_access(s)) or \
                            (isinstance(s, N.Compute) and s.op not in NOT_DIFFERENTIABLE and
                             any(a in fwd for a in s.args)) or \
                            (isinstance(s, N.LocalLoad) and s.slot in fwd_slots):
                        fwd.add(s)
                        changed = True
                if isinstance(s, N.LocalStore) and s.value in fwd and s.slot not in fwd_slots:
                    fwd_slots.add(s.slot)
                    changed = True
        changed = True
        while changed:
            changed = False
            for s in reversed(self.stmts):
                if type(s).WRITES_ARRAY and self.is_grad_array_access(s):
                    new = {s.value} - bwd
                elif isinstance(s, N.Compute) and s in bwd:
                    # no adjoint flows through ints/bools (casts to int, conditions) or zero-gradient ops
                    if s.op in NOT_DIFFERENTIABLE or not s.dtype.is_float:
                        continue
                    new = {a for a in s.args if a.dtype.is_float} - bwd
                elif isinstance(s, N.LocalLoad) and s in bwd and s.slot not in bwd_slots:
                    bwd_slots.add(s.slot)
                    changed = True
                    continue
                elif isinstance(s, N.LocalStore) and s.slot in bwd_slots:
                    new = {s.value} - bwd
                else:
                    continue
                if new:
                    bwd |= new
                    changed = True
        self.varied = fwd                   # depends on a differentiated input (whether or not it reaches one)
        self.active = {s for s in fwd & bwd if s.dtype.is_float}
        self.active_slots = fwd_slots & bwd_slots

    def _has_rev_work(self, s):
        if isinstance(s, (N.Compute, N.GlobalLoad, N.LocalLoad, N.Seed)):
            return s in self.active
        if isinstance(s, N.LocalStore):
            return s.slot in self.active_slots
        if isinstance(s, N.GlobalStore):
            return self.is_grad_array_access(s)
        if isinstance(s, N.AtomicRMW):
            return self.is_grad_array_access(s) and s.value in self.active
        return False

    def _needed_slots(self):
        """Slots whose primal values a replay must reproduce: read by something the reverse needs
        (operands of reverse work, control flow around it), transitively through stores."""
        needed, slots = set(), set()
        work = []

        def need(s):
            if s is not None and s not in needed:
                needed.add(s)
                work.append(s)

        for s in self.rev_work:
            need(s)
        stores = {}
        for s in self.stmts:
            if isinstance(s, N.LocalStore):
                stores.setdefault(s.slot, []).append(s)
        while work:
            s = work.pop()
            for o in s.operands():
                if not (isinstance(s, N.LocalStore) and o is s.slot):
                    need(o)
            if isinstance(s, N.LocalLoad) and s.slot not in slots:
                slots.add(s.slot)
                for st in stores.get(s.slot, ()):
                    need(st)
            p = self.parent.get(s)
            while p is not None:   # control dependence: the constructs deciding whether s runs
                need(p)
                p = self.parent.get(p)
            if _exit_flag(s) is not None:
                for st in stores.get(s.exit_flag, ()):
                    need(st)
                slots.add(s.exit_flag)
        self.needed = needed   # every statement whose primal value (or running) the reverse needs
        return slots

    def slots_read_in(self, construct):
        """Needed slots that a replay of `construct` reads before writing them: what its snapshot must
        hold. A loop's own exit flag is left out (it is False whenever an iteration starts; the replay
        restores it to False), and so is any slot the body assigns before reading (temporaries, `cont`)."""
        flag = _exit_flag(construct)
        read = []
        for b in construct.blocks():
            for slot in _read_before_written(b.stmts):
                if slot in self.needed_slots and slot is not flag and slot not in read:
                    read.append(slot)
        return read


def _read_before_written(stmts):
    """Slots some statement loads before a top-level store of this block assigns them, in order (a loop
    reads its exit flag before its body)."""
    written, out = set(), []
    for s in stmts:
        for t in [s, *(x for b in s.blocks() for x in N.walk(b))]:
            slot = t.slot if isinstance(t, N.LocalLoad) else _exit_flag(t)
            if slot is not None and slot not in written and slot not in out:
                out.append(slot)
        if isinstance(s, N.LocalStore):
            written.add(s.slot)
    return out


def _exit_flag(s):
    return s.exit_flag if isinstance(s, (N.RangeFor, N.While)) else None


def varied_outputs(task, flag="needs_grad"):
    """Indices of float arrays without a gradient (or dual) companion that `task` writes values into
    which depend on a differentiated input: the derivative chain would silently stop there."""
    act = Activity(task, flag)
    return {s.array.index for s in act.stmts
            if type(s).WRITES_ARRAY and s.field == "primal" and s.array.dtype.is_float
            and not getattr(s.array, flag) and s.value in act.varied}


def check_differentiable(kernel, task, mode):
    """Compile-time errors for what a derivative kernel cannot do. `mode`: "reverse" or "dual"."""
    used = {o for s in N.walk(task.body) for o in s.operands()}
    what = "a differentiated kernel" if mode == "reverse" else "a kernel run in forward mode"
    for s in N.walk(task.body):
        where = f"\n    at {s.loc}" if s.loc else ""
        if type(s).ACCESSES_ARRAY and s.field != "primal":
            raise AutodiffRuleError(f"kernel {kernel.name}: {what} must not access '{s.array.name}.{s.field}'"
                                    f"{where}")
        if not (isinstance(s, N.AtomicRMW) and s in used):
            continue
        # The old value an atomic returns depends on thread order: forward mode cannot pair it with the dual
        # buffer's own order (reverse mode refuses it only where its gradient needs it: thread_order.py).
        if mode == "dual" and s.array.needs_dual and s.array.dtype.is_float:
            raise AutodiffRuleError(f"kernel {kernel.name}: the value returned by sp.{s.op.value} on "
                                    f"'{s.array.name}' cannot be differentiated through"
                                    f"{' in forward mode' if mode == 'dual' else ''} (it depends on "
                                    f"thread order){where}")

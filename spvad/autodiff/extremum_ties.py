"""Derivatives of `sp.atomic_max` / `sp.atomic_min`: the final value is the extremum over the contributions
of a launch (and the value the array held before it). As `torch.amax` and `jnp.max` do, the derivative goes
to the winners, split equally among tied ones; when no contribution equals the final value, the value the
array held before the launch won and keeps all of it.

Winners are only known once every thread has contributed, so each task with such atomics gets two extra
tasks around its derivative task:
- a counting task: the task replayed without writes; each contribution equal to the final value adds 1 to
  a scratch count array (and, in forward mode, its tangent to a scratch sum array);
- a fix-up task over the elements of the array: reverse mode clears the .grad of elements some contribution
  won (the old value did not); forward mode sets .dual to the winners' mean tangent. It resets the scratch.
In reverse mode the derivative task between them gives each winner `adjoint / count`.
"""
from .. import types as T
from ..errors import AutodiffRuleError
from ..ir import nodes as N
from ..ir.emit import Emitter
from ..ir.ops import Op
from .array_states import load_phases, task_writes
from .depth_probe import replay_without_writes
from .rules import ATOMIC_RULES


class TieScratch:
    """The scratch arrays (kernel parameters after the user's arrays) of a derivative kernel's extremum
    atomics, one per (array, kind): "ties" counts winners (i32), "tangents" sums their tangents."""

    def __init__(self, arrays):
        self.arrays = arrays           # the derivative kernel's array list; scratch params are appended
        self.params = {}               # (array, kind) -> ArrayParam
        self.targets = []              # (kind, user array index) per scratch param, in parameter order

    def param(self, array, kind):
        p = self.params.get((array, kind))
        if p is None:
            dtype = T.i32 if kind == "ties" else array.dtype
            p = N.ArrayParam(f"{array.name}_{kind}", dtype, array.ndim, len(self.arrays))
            self.arrays.append(p)
            self.params[(array, kind)] = p
            self.targets.append((kind, array.index))
        return p


def active_extrema(task, act):
    """The atomic max/min statements (rule WINNERS) of `task` whose contributed value carries a derivative."""
    return [s for s in N.walk(task.body) if isinstance(s, N.AtomicRMW) and ATOMIC_RULES[s.op].winners
            and act.is_grad_array_access(s) and s.value in act.active]


def won(e, site, value, idx, field):
    """IR (through Emitter `e`) for `value == the contents of the site's element` read as `field`."""
    final = e.emit(N.GlobalLoad(site.array, idx, field))
    return e.compute(Op.EQ, value, final)


# ---- the counting task ----------------------------------------------------------------------------------
def counting_task(task, sites, scratch, skip=frozenset()):
    """`task` replayed without writes (nor the statements in `skip`); each site in `sites` instead counts its
    contribution if it won: `if v == final: ties[idx] += 1`. Its statements carry the site's source line
    (for debug checks)."""
    ids = {id(s) for s in sites}

    def count(site, m, out):
        if id(site) not in ids:
            return
        e = Emitter()
        e.block, e.loc = out, site.loc
        idx = tuple(m[i] for i in site.indices)
        branch = e.emit(N.If(won(e, site, m[site.value], idx, "final"), N.Block(), N.Block()))
        e.block = branch.then_body
        e.emit(N.AtomicRMW(Op.ATOMIC_ADD, scratch.param(site.array, "ties"), idx, e.const(1)))

    m = {}
    header = N.Block([N.clone_stmt(s, m) for s in task.header.stmts])
    body = replay_without_writes(task.body, m, on_write=count, skip=skip)
    return N.Task(task.name + "_ties", task.kind, header, m[task.num_threads], body)


# ---- the fix-up task ------------------------------------------------------------------------------------
def fixup_task(array, scratch, name, mode):
    """One thread per element of `array`: where contributions won (count > 0), reverse mode clears .grad
    (the old value lost) and forward mode sets .dual to the mean of the winners' tangents; resets scratch."""
    header, total, body, idx = each_element(array)
    emit = body.append
    ties = scratch.param(array, "ties")
    count = emit(N.GlobalLoad(ties, idx))
    zero = emit(N.Const(0, T.i32))
    branch = emit(N.If(emit(N.Compute(Op.GT, (count, zero), T.u1)), N.Block(), N.Block()))
    then = branch.then_body.append
    if mode == "reverse":
        then(N.GlobalStore(array, idx, then(N.Const(0.0, array.dtype)), "grad"))
    else:
        sums = scratch.param(array, "tangents")
        mean = then(N.Compute(Op.DIV, (then(N.GlobalLoad(sums, idx)),
                                       then(N.Compute(Op.CAST, (count,), array.dtype))), array.dtype))
        then(N.GlobalStore(array, idx, mean, "dual"))
        then(N.GlobalStore(sums, idx, then(N.Const(0.0, array.dtype))))
    then(N.GlobalStore(ties, idx, zero))
    return N.Task(name, "parallel", header, total, body)


def each_element(array):
    """(header, thread count, body, index tuple) of a task with one thread per element of `array`."""
    header = N.Block()
    total = header.append(N.Const(1, T.i32))
    for axis in range(array.ndim):
        total = header.append(N.Compute(Op.MUL, (total, header.append(N.ArrayShape(array, axis))), T.i32))
    body = N.Block()
    emit = body.append
    shapes = [emit(N.ArrayShape(array, axis)) for axis in range(array.ndim)]   # the body sees no header value
    idx, rest = [], emit(N.ThreadIndex())
    for dim in reversed(shapes):   # row-major: the last axis varies fastest
        idx.append(emit(N.Compute(Op.MOD, (rest, dim), T.i32)))
        rest = emit(N.Compute(Op.FLOORDIV, (rest, dim), T.i32))
    return header, total, body, tuple(reversed(idx))


def reverse_tie_tasks(task, sites, scratch, skip=frozenset()):
    """(tasks before, tasks after) the derivative task of `task` in a gradient kernel."""
    if not sites:
        return [], []
    targets = list(dict.fromkeys(s.array for s in sites))
    count = counting_task(task, sites, scratch, skip)
    fixups = [fixup_task(a, scratch, f"{task.name}_{a.name}_winners", "reverse") for a in targets]
    return [count], fixups


def check_dual_replay(kernel, task, sites):
    """Forward mode replays `task` after it ran, to find the winners: the arrays it reads must be unchanged."""
    if not sites:
        return
    written = task_writes(N.Kernel(kernel.name, kernel.arrays, kernel.scalars, [task]))[0]
    for a, phases in load_phases(task).items():
        if a in written and phases != {"after"}:
            name = kernel.arrays[a].name
            raise AutodiffRuleError(
                f"kernel {kernel.name}: the forward-mode derivative of sp.{sites[0].op.value} replays the loop "
                f"to find the winners, but the loop overwrites '{name}', which it reads; write to another "
                f"array\n    at {sites[0].loc}")

"""Atomics on one address for a whole subgroup, reduced first: the GPU way of `loss[None] += f(x[i])`.

An atomic add/min/max whose address is uniform (ir/uniformity.py) and whose old value nothing reads combines
the values of the subgroup's active invocations with one OpGroupNonUniform{F,I}Add / {F,S,U}Min / Max
(Reduce), and one elected invocation (OpGroupNonUniformElect) does the atomic with the result: one atomic per
subgroup instead of one per thread. Both are defined over the invocations that execute them, so this holds
under divergence, in loops and behind a bounds check (whose condition is uniform too). Float sums are
reordered, as float atomics already reorder them; integer sums and every min/max are exact.

Only where the device reports subgroup arithmetic and election in compute shaders (feature
"subgroup_reduce": rhi/vulkan/device.py); elsewhere atomics stay as they are. Metal's features leave it off.
"""
from .. import types as T
from ..ir.ops import Op as IROp
from ..ir.uniformity import uniform_atomics
from .spec import GLSL, Capability, GroupOperation, Op, Scope

FEATURE = "subgroup_reduce"
# (IR atomic, kind of dtype) -> the group operation combining the active invocations' values
GROUP_OPS = {
    (IROp.ATOMIC_ADD, "f"): Op.OpGroupNonUniformFAdd, (IROp.ATOMIC_ADD, "i"): Op.OpGroupNonUniformIAdd,
    (IROp.ATOMIC_ADD, "u"): Op.OpGroupNonUniformIAdd,
    (IROp.ATOMIC_MIN, "f"): Op.OpGroupNonUniformFMin, (IROp.ATOMIC_MIN, "i"): Op.OpGroupNonUniformSMin,
    (IROp.ATOMIC_MIN, "u"): Op.OpGroupNonUniformUMin,
    (IROp.ATOMIC_MAX, "f"): Op.OpGroupNonUniformFMax, (IROp.ATOMIC_MAX, "i"): Op.OpGroupNonUniformSMax,
    (IROp.ATOMIC_MAX, "u"): Op.OpGroupNonUniformUMax,
}
DTYPES = (T.f32, T.f64, T.i32, T.u32)   # f64 arrays exist only on devices with Float64, which reduces it too
# (IR atomic, kind) -> how one thread combines two values first (a coarsened task's four elements)
LANE_OPS = {
    (IROp.ATOMIC_ADD, "f"): (Op.OpFAdd, None), (IROp.ATOMIC_ADD, "i"): (Op.OpIAdd, None),
    (IROp.ATOMIC_ADD, "u"): (Op.OpIAdd, None),
    (IROp.ATOMIC_MIN, "f"): (None, GLSL.FMin), (IROp.ATOMIC_MIN, "i"): (None, GLSL.SMin),
    (IROp.ATOMIC_MIN, "u"): (None, GLSL.UMin),
    (IROp.ATOMIC_MAX, "f"): (None, GLSL.FMax), (IROp.ATOMIC_MAX, "i"): (None, GLSL.SMax),
    (IROp.ATOMIC_MAX, "u"): (None, GLSL.UMax),
}


def reducible_atomics(task, features):
    """The atomics of `task` this module lowers (none when the device lacks the feature, nor in a serial task:
    one thread)."""
    if not features.get(FEATURE) or task.kind != "parallel":
        return frozenset()
    return frozenset(s for s in uniform_atomics(task) if s.array.dtype in DTYPES)


def subgroup_atomic(L, s, atomic, value=None):
    """Lower AtomicRMW `s` (in reducible_atomics) as: total = reduce(value) over the active invocations; if
    elected: atomic(total). `atomic(value_id)` emits the plain atomic of `s` with that value; `value` (an id)
    replaces the statement's own. Returns the statement's value, 0: nothing reads it."""
    m, dt = L.m, s.array.dtype
    m.capability(Capability.GroupNonUniform)
    m.capability(Capability.GroupNonUniformArithmetic)
    scope = L.u32c(Scope.Subgroup)
    value = L.value(s.value) if value is None else value
    total = L.emit(GROUP_OPS[s.op, dt.kind], dt, scope, GroupOperation.Reduce, value)
    elected = L.emit(Op.OpGroupNonUniformElect, T.u1, scope)
    L.when(elected, lambda: atomic(total))
    return L.const(dt, 0)


def combine_lanes(L, s, values):
    """The value ids `values` (one per element a coarsened thread runs: spirv/lower_coarse.py) of reduced
    atomic `s` combined into one, in a pairwise tree."""
    opcode, inst = LANE_OPS[s.op, s.array.dtype.kind]
    values = list(values)
    while len(values) > 1:
        a, b = values.pop(0), values.pop(0)
        values.append(L.emit(opcode, s.array.dtype, a, b) if opcode else L.glsl(inst, s.array.dtype, a, b))
    return values[0]

"""Batching (`sp.vmap`): a kernel's IR -> the IR running B instances of it in one launch.

Each task runs B times as many threads: thread `tid` is thread `tid % n` of instance `tid // n` (n: the
task's own thread count, recomputed in the body as the header computes it). Batched arrays get the instance
as a leading index (their shape reads move one axis on, so `x.shape[0]` is the per-instance extent); a batched
scalar becomes a 1-D array of B values read at the instance; shared arrays are left as they are, so an atomic
add into one sums over the batch. The result is a plain kernel: autodiff differentiates it like any other.
"""
from .. import types as T
from ..errors import ArgumentError
from . import nodes as N
from .ops import Op

BATCHED = 0   # the value of in_axes that batches a parameter (None shares it)


def batch_kernel(kernel, bindings, in_axes, keys=()):
    """Batch `kernel` (as the frontend built it for one instance) over the parameters whose `in_axes` entry is
    0; `bindings` are its per-parameter (kind, param) pairs; `keys`: names of hidden u32 scalars keying random
    draws, mixed with the instance so that each instance draws its own numbers, as each launch of a loop
    would. Changes `kernel` in place (it is built afresh for every compile) and returns (kernel, bindings): a
    batched scalar's binding becomes ("array", its 1-D array parameter)."""
    name = kernel.name
    arrays, scalars, new_bindings = {}, {}, []   # batched ArrayParam -> True; ScalarParam -> its array
    for (kind, p), axis in zip(bindings, in_axes):
        if axis is None:
            new_bindings.append((kind, p))
        elif kind == "array":
            p.ndim += 1   # (the batch axis leads; element_shape, the trailing axes, is unchanged)
            arrays[p] = True
            new_bindings.append((kind, p))
        elif kind == "scalar":
            a = N.ArrayParam(p.name, p.dtype, 1, -1)
            scalars[p] = a
            new_bindings.append(("array", a))
        else:
            what = "a vector or matrix argument" if kind == "vector" else "an sp.template() argument"
            raise ArgumentError(f"sp.vmap({name}): in_axes=0 for {what} is not supported: batch an ndarray "
                                "(leading axis) or a scalar (a 1-D array of B values), or pass it with None")
    if not arrays and not scalars:
        raise ArgumentError(f"sp.vmap({name}): in_axes batches no argument: give 0 for at least one")
    _renumber(kernel, new_bindings, scalars)
    ref = next(iter(arrays), None) or next(iter(scalars.values()))   # its axis 0 is B
    for task in kernel.tasks:
        _batch_task(name, task, arrays, scalars, ref, frozenset(keys))
    return kernel, new_bindings


def _renumber(kernel, bindings, scalars):
    """Arrays in parameter order (batched scalars' arrays where their scalars were), then the captured ones;
    the scalars left; `kernel.distinct`'s array indices follow."""
    old = {id(a): a.index for a in kernel.arrays}
    params = [p for kind, p in bindings if kind == "array"]
    rest = [a for a in kernel.arrays if not any(a is p for p in params)]
    kernel.arrays = params + rest
    for k, a in enumerate(kernel.arrays):
        a.index = k
    by_old = {old[id(a)]: a.index for a in kernel.arrays if id(a) in old}
    kernel.distinct = tuple((by_old[i], by_old[j], why) for i, j, why in kernel.distinct)
    kernel.scalars = [s for s in kernel.scalars if s not in scalars]
    for k, s in enumerate(kernel.scalars):
        s.index = k


def _batch_task(name, task, arrays, scalars, ref, keys):
    for s in task.header.stmts:   # the host sizes the launch from the header: the same for every instance
        if isinstance(s, N.ScalarArg) and s.param in scalars:
            raise ArgumentError(f"sp.vmap({name}): scalar '{s.param.name}' sets how many threads a parallel loop "
                                "runs, which must be the same for every instance; pass it with in_axes None")
        if isinstance(s, N.GlobalLoad) and s.array in arrays:
            raise ArgumentError(f"sp.vmap({name}): a parallel loop's bounds read '{s.array.name}', which is "
                                "batched: every instance must run the same threads; pass it with in_axes None")
    mapping = {}
    prefix = [N.clone_stmt(s, mapping) for s in task.header.stmts]   # the per-instance count, in the body
    for s in task.header.stmts + prefix:
        if isinstance(s, N.ArrayShape) and s.array in arrays:
            s.axis += 1
    tid = N.ThreadIndex()
    if task.kind == "serial":   # one thread per instance
        instance, local = tid, N.Const(0, T.i32)
    else:
        n = mapping[task.num_threads]
        instance = N.Compute(Op.FLOORDIV, (tid, n), T.i32)
        local = N.Compute(Op.MOD, (tid, n), T.i32)
    old_threads = [s for s in N.walk(task.body) if isinstance(s, N.ThreadIndex)]
    body = _rewrite(name, task.body, (arrays, scalars, keys), instance, {t: local for t in old_threads})
    task.body = N.Block(prefix + [tid] + [s for s in (instance, local) if s is not tid] + body.stmts)
    b = task.header.append(N.ArrayShape(ref, 0))
    task.num_threads = task.header.append(N.Compute(Op.MUL, (task.num_threads, b), T.i32))
    task.kind = "parallel"


def _rewrite(name, block, batched, instance, mapping):
    """`block` with batched accesses indexed by the instance, batched scalars read from their arrays, random
    keys mixed with the instance and the old thread index replaced (mapping: old value -> new, filled as it
    goes; operands follow it)."""
    arrays, scalars, keys = batched
    out = []
    for s in block.stmts:
        s.replace_operands(mapping)
        if isinstance(s, N.ThreadIndex):
            continue   # (replaced by the per-instance index through `mapping`)
        if isinstance(s, N.ScalarArg) and s.param in scalars:
            load = N.GlobalLoad(scalars[s.param], (instance,))
            load.loc = s.loc
            mapping[s] = load
            out.append(load)
            continue
        if isinstance(s, N.ScalarArg) and s.param.name in keys:   # key + instance * 2**32 / golden ratio
            which = N.Compute(Op.CAST, (instance,), T.u32)
            golden = N.Const(0x9E3779B9, T.u32)
            spread = N.Compute(Op.MUL, (which, golden), T.u32)
            mapping[s] = N.Compute(Op.ADD, (s, spread), T.u32)
            out += [s, which, golden, spread, mapping[s]]
            continue
        if isinstance(s, N.ArrayShape) and s.array in arrays:
            s.axis += 1
        elif type(s).ACCESSES_ARRAY:
            if s.array in arrays:
                s.indices = (instance,) + tuple(s.indices)
            elif isinstance(s, N.GlobalStore):
                loc = f"\n    at {s.loc}" if s.loc else ""
                raise ArgumentError(
                    f"sp.vmap({name}): the kernel stores into '{s.array.name}', which is shared by every "
                    f"instance (in_axes None or a global): the instances would overwrite each other; batch it "
                    f"(in_axes 0) or accumulate with sp.atomic_add{loc}")
        for field in s.BLOCK_FIELDS:
            setattr(s, field, _rewrite(name, getattr(s, field), batched, instance, mapping))
        out.append(s)
    return N.Block(out)

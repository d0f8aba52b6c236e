"""The global-data-access checker (debug + `Tape(validation=True)`): instruments a forward kernel so a
launch that reads an array element and later overwrites it raises `AutodiffRuleError` at sync.

Per array that a launch both loads (in a task that has a gradient, so replays its loads) and stores
(atomics count as stores), a marker array of the same shape records loads (1 per element read); every
store first checks its element's marker and, if set, flags its store site in a violation array. Runs
on the device like any kernel; without debug nothing is instrumented.
"""
import copy

import numpy as np

from .. import types as T
from ..errors import AutodiffRuleError
from ..ir import nodes as N
from ..ir.ops import Op
from .activity import Activity


class CheckPlan:
    """What the launcher must add: marker arrays (same shape as `arrays[k]`) and one violation array."""

    def __init__(self, marked, sites):
        self.marked = marked    # indices (in kernel.arrays) of the arrays given a marker array
        self.sites = sites      # store sites: (array name, Loc)


def instrument(kernel, alias=None):
    """Returns (instrumented kernel, CheckPlan), or (kernel, None) when no array is read and written.
    `alias[k]`: the first array index bound to the same ndarray as array k (aliased arguments)."""
    alias = alias or list(range(len(kernel.arrays)))
    # only tasks with a gradient task replay their loads; a task without one (nothing differentiable in
    # it) may update what it reads, e.g. an int counter array, without harming any gradient
    replayed = [bool(Activity(t).rev_work) for t in kernel.tasks]
    loaded = {alias[s.array.index] for t, r in zip(kernel.tasks, replayed) if r for s in N.walk(t.body)
              if isinstance(s, N.GlobalLoad) and s.field == "primal"}
    # an atomic add/max/min changes the element as a store does: the gradient kernel's replay of an
    # earlier load would read the new value
    stored = {alias[s.array.index] for t in kernel.tasks for s in N.walk(t.body)
              if type(s).WRITES_ARRAY and s.field == "primal"}
    # markers for every array a launch reads or writes: they live as long as the Tape, so a store is
    # checked against the reads of this launch and of the launches recorded before it
    marked = sorted(loaded | stored)
    if not marked:
        return kernel, None
    arrays = list(kernel.arrays)
    markers = {}
    for k in marked:
        a = kernel.arrays[k]
        marker = N.ArrayParam(f"{a.name}__read", T.i32, a.ndim, len(arrays))
        arrays.append(marker)
        for j, rep in enumerate(alias):
            if rep == k:
                markers[j] = marker
    violations = N.ArrayParam("__violations", T.i32, 1, len(arrays))
    arrays.append(violations)
    sites = []
    out = N.Kernel(kernel.name, arrays, kernel.scalars, [], kernel.filename)
    for task, r in zip(kernel.tasks, replayed):
        t = copy.copy(task)
        t.body = _instrument_block(task.body, markers, violations, sites, mark_loads=r)
        out.tasks.append(t)
    return out, CheckPlan(marked, sites)


def _instrument_block(block, markers, violations, sites, mark_loads):
    stmts = []
    for s in block.stmts:
        for name in s.BLOCK_FIELDS:
            setattr(s, name, _instrument_block(getattr(s, name), markers, violations, sites, mark_loads))
        marker = markers.get(s.array.index) if type(s).ACCESSES_ARRAY and s.field == "primal" else None
        if marker is None or (isinstance(s, N.GlobalLoad) and not mark_loads):
            stmts.append(s)
        elif isinstance(s, N.GlobalLoad):
            one = N.Const(1, T.i32)
            stmts += [s, one, N.GlobalStore(marker, s.indices, one)]
        else:
            site = N.Const(len(sites), T.i32)
            sites.append((s.array.name, s.loc))
            was_read = N.GlobalLoad(marker, s.indices)
            zero, one = N.Const(0, T.i32), N.Const(1, T.i32)
            cond = N.Compute(Op.NE, (was_read, zero), T.u1)
            flag = N.Block([one, N.GlobalStore(violations, (site,), one)])
            stmts += [site, was_read, zero, cond, N.If(cond, flag, N.Block()), s]
    for s in stmts:
        if s.loc is None:
            s.loc = next((x.loc for x in stmts if x.loc is not None), None)
    return N.Block(stmts)


def violation_check(kernel_name, plan, violations, keep_alive):
    """A sync-time check: the AutodiffRuleError for the first flagged store site, or None."""
    def check():
        hits = np.flatnonzero(violations.buffer.view(np.int32)[: len(plan.sites)])
        if not len(hits):
            return None
        name, loc = plan.sites[hits[0]]
        return AutodiffRuleError(
            f"kernel {kernel_name} overwrites elements of '{name}' that were read before under this Tape (in "
            f"this launch or an earlier one), so the recorded gradients would be wrong (global data access "
            f"rule); the store is at {loc}")
    check.keep_alive = (violations, keep_alive)
    return check

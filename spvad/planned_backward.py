"""A Tape that followed its plan to the end (tape_plan.py) repeats the backward pass of the Tape before it: the
same gradient launches, of the same compiled kernels, with the same arrays, .grad companions and scalars.
After a pass run launch by launch where every launch repeated a replay (launch.replay.BoundReplay), its
dispatches are recorded once more into a device batch (rhi `record_batch`). A later pass whose Tape followed
the plan (the same kernels, compiled kernels, arrays and scalar values) and whose arrays have the same .grad
companions and launches the same push-constant bytes runs the batch in one call, doing on the host what a
replay does after its dispatches (error-flag checks, array versions). Anything else (a
launch off the replay path, a freed buffer, a released pipeline) drops the batch: the pass then runs launch
by launch, as it always could."""
import weakref

from . import runtime
from .launch.versions import bump_versions


class PlannedBackward:
    """A plan's batch; the .grad of each of the plan's arrays it binds (weakly; None: none); per launch in
    backward order, the replay it repeats and each dispatch's push constants."""
    __slots__ = ("batch", "grads", "steps")

    def __init__(self, batch, grads, steps):
        self.batch, self.grads, self.steps = batch, grads, steps


def run(follower, entries):
    """Run the gradients of `entries` (tape_plan.PlannedEntry of the plan `follower` followed to the end, in
    program order) as the plan's batch. Returns False when that cannot be: nothing was launched, and the
    caller runs them one by one."""
    plan = follower.plan
    kept = plan.backward
    if not kept:
        return False
    # The follower matched every launch's kernel, compiled kernel, arrays (so shapes and thread counts),
    # scalar dtypes and values: what else a replay checks is the .grad companions, and the push constants
    # (equal values may pack otherwise: -0.0 == 0.0)
    if len(kept.steps) != len(entries) or not _same_grads(kept.grads, follower.live) or \
            not all(r.push(entry.scalars) == push for (replay, pushes), entry in zip(kept.steps, reversed(entries))
                    for r, push in zip(replay.live, pushes)) or \
            not runtime.get().device.run_batch(kept.batch):
        _drop(plan)
        return False
    for (replay, _), entry in zip(kept.steps, reversed(entries)):   # the host's share of each relaunch
        for r in replay.live:
            if r.on_device.reports:
                r.on_device.after_launch(r.spec)
        bump_versions(replay.ck.facts.writes, entry.everything)
    return True


def launch_by_launch(tape, follower=None):
    """Run the gradients of `tape`'s entries in reverse order one by one; for the Tape that followed a plan to
    the end (`follower`), keep them as the plan's batch (unless it is done with batches)."""
    replays = []
    for entry in reversed(tape.entries):
        entry.backward(tape)
        replays.append(entry.kernel._grad_replay if follower is not None else None)   # (what it launched with)
    if follower is not None and follower.plan.backward is None:
        _record(follower, reversed(tape.entries), replays)


def _record(follower, entries, replays):
    """The plan's batch, when every launch of the pass (backward order) repeated a replay (else none: the
    next passes would find the same)."""
    plan = follower.plan
    plan.backward, steps, launches = False, [], []
    for entry, replay in zip(entries, replays):
        if replay is None or not replay.matches(entry.step.recipe.specs, entry.everything, entry.scalars):
            return
        pushes = []
        for r in replay.live:
            pipeline, buffers, _, *groups = r.recorded   # groups: ((x, y, z),), or an indirect (buffer, offset)
            pushes.append(r.push(entry.scalars))
            launches.append((pipeline, buffers, pushes[-1], groups[0] if len(groups) == 1 else tuple(groups)))
        steps.append((replay, pushes))
    batch = runtime.get().device.record_batch(launches) if launches else None
    if batch is not None:
        grads = [None if a.grad is None else weakref.ref(a.grad) for a in follower.live]
        plan.backward = PlannedBackward(batch, grads, steps)


def _same_grads(grads, arrays):
    for ref, a in zip(grads, arrays):
        if (ref() if ref else None) is not a.grad:
            return False
    return True


def _drop(plan):
    """The plan's batch is done with: what changed is likely to change again, so none is recorded for it."""
    kept, plan.backward = plan.backward, False
    kept.batch.release()

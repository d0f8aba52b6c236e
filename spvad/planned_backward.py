"""A Tape that followed its plan to the end (tape_plan.py) repeats the backward pass of the Tape before it: the
same gradient launches, of the same compiled kernels, with the same arrays, .grad companions and scalars.
After a pass run launch by launch, its dispatches are recorded once more into a device batch (rhi
`record_batch`); the next pass checks that every launch would replay exactly those dispatches
(launch.replay.BoundReplay.matches, and the same push constants) and runs the batch in one call, doing on
the host what a replay does after its dispatches (error-flag checks, array versions). Anything else (a
launch off the replay path, a freed buffer, a released pipeline) drops the batch: the pass then runs launch
by launch, as it always could."""
from . import runtime
from .launch.versions import bump_versions


class PlannedBackward:
    """A plan's batch and, per launch in backward order, the replay it repeats and each dispatch's push
    constants."""
    __slots__ = ("batch", "steps")

    def __init__(self, batch, steps):
        self.batch, self.steps = batch, steps


def run(plan, entries):
    """Run the gradients of `entries` (tape_plan.PlannedEntry of `plan`, in program order) as the plan's
    batch. Returns False when that cannot be: nothing was launched, and the caller runs them one by one."""
    kept = plan.backward
    if not kept:
        return False
    if len(kept.steps) != len(entries) or not all(
            _repeats(replay, pushes, entry) for (replay, pushes), entry in zip(kept.steps, reversed(entries))) or \
            not runtime.get().device.run_batch(kept.batch):
        _drop(plan)
        return False
    for (replay, _), entry in zip(kept.steps, reversed(entries)):   # the host's share of each relaunch
        for r in replay.live:
            if r.on_device.reports:
                r.on_device.after_launch(r.spec)
        bump_versions(replay.ck.facts.writes, entry.everything)
    return True


def launch_by_launch(tape, plan=None):
    """Run the gradients of `tape`'s entries in reverse order one by one; for the Tape that followed `plan`,
    keep them as the plan's batch (unless it is done with batches)."""
    replays = []
    for entry in reversed(tape.entries):
        entry.backward(tape)
        replays.append(entry.kernel._grad_replay if plan is not None else None)   # (what it launched with)
    if plan is not None and plan.backward is None:
        _record(plan, reversed(tape.entries), replays)


def _record(plan, entries, replays):
    """The plan's batch, when every launch of the pass (backward order) repeated a replay (else none: the
    next passes would find the same)."""
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
        plan.backward = PlannedBackward(batch, steps)


def _repeats(replay, pushes, entry):
    scalars = entry.scalars
    return replay.matches(entry.step.recipe.specs, entry.everything, scalars) and \
        all(r.push(scalars) == push for r, push in zip(replay.live, pushes))


def _drop(plan):
    """The plan's batch is done with: what changed is likely to change again, so none is recorded for it."""
    kept, plan.backward = plan.backward, False
    kept.batch.release()

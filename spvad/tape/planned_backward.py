"""A Tape that followed its plan to the end (tape/plan.py) repeats the backward pass of the Tape before it: the
same gradient launches, of the same compiled kernels, with the same arrays, .grad companions and scalars.
After a pass run launch by launch where every launch repeated a replay (launch.replay.BoundReplay), its
dispatches are recorded once more into a device batch (rhi `record_batch`), after the fills that start the
pass (gradient clears, the loss's seed). A later pass whose Tape followed the plan (the same kernels, compiled
kernels, arrays and scalar values), whose arrays have the same .grad companions, which starts from the same
fills and launches the same push-constant bytes runs the batch in one call, doing on the host what the fills
and a replay do besides their commands (array versions, error-flag checks). Anything else (a
launch off the replay path, a freed buffer, a released pipeline) drops the batch: the pass then runs launch
by launch, as it always could, and records the batch again (a few times per plan at most)."""
import weakref

from .. import runtime
from ..errors import DeviceError
from ..launch.versions import bump_versions
from ..ndarray import bump_set, fills_of


DROPS_KEPT = 3


class PlannedBackward:
    """A plan's batch; the .grad of each of the plan's arrays it binds (weakly; None: none); the (array, value)
    its fills set first (weakly); per launch in backward order, the replay it repeats and each dispatch's push
    constants."""
    __slots__ = ("batch", "grads", "starts", "steps")

    def __init__(self, batch, grads, starts, steps):
        self.batch, self.grads, self.starts, self.steps = batch, grads, starts, steps


def run(tape, follower, starts):
    """Run the backward pass of `tape`, which followed a plan to the end (`follower`), as the plan's batch:
    the gradient clears and seed (`starts`: Tape.gradient_starts), then the gradients of its entries
    (PlannedEntry, in program order) in reverse. Returns False when that cannot be: nothing was recorded, and
    the caller does it all one by one."""
    plan, entries = follower.plan, tape.entries
    kept = plan.backward
    if not kept:
        return False
    # The follower matched every launch's kernel, compiled kernel, arrays (so shapes and thread counts),
    # scalar dtypes and values: what else a replay checks is the .grad companions, and the push constants
    # (equal values may pack otherwise: -0.0 == 0.0)
    if len(kept.steps) != len(entries) or not _same_grads(kept.grads, follower.live) or \
            not _same_starts(kept.starts, starts) or \
            not all(r.push(entry.scalars) == push for (replay, pushes), entry in zip(kept.steps, reversed(entries))
                    for r, push in zip(replay.live, pushes)) or \
            not runtime.get().device.run_batch(kept.batch):
        _drop(plan)
        return False
    bump_set(starts)
    for (replay, _), entry in zip(kept.steps, reversed(entries)):   # the host's share of each relaunch
        for r in replay.live:
            if r.reports is not None:
                r.reports(r.spec)
        bump_versions(replay.ck.facts.writes, entry.everything)
    return True


def launch_by_launch(tape, follower=None, starts=()):
    """Run the gradients of `tape`'s entries in reverse order one by one, after the gradient starts were set;
    for a Tape that followed a plan to the end (`follower`), keep `starts` and the launches as the plan's
    batch (unless it is done with batches)."""
    replays = []
    for entry in reversed(tape.entries):
        entry.backward(tape)
        replays.append(entry.kernel._grad_replay if follower is not None else None)   # (what it launched with)
    if follower is not None and follower.plan.backward is None:
        _record(follower, reversed(tape.entries), replays, starts)


def _record(follower, entries, replays, starts):
    """The plan's batch, when every launch of the pass (backward order) repeated a replay (else none, ever:
    the next passes would find the same)."""
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
    try:
        batch = runtime.get().device.record_batch(launches, fills_of(starts))
    except DeviceError:   # (the pass ran: a batch the driver refuses only leaves the next ones launch by launch)
        return
    if batch is not None:
        grads = [None if a.grad is None else weakref.ref(a.grad) for a in follower.live]
        plan.backward = PlannedBackward(batch, grads, [(weakref.ref(a), v) for a, v in starts], steps)


def _same_starts(kept, starts):
    if len(kept) != len(starts):
        return False
    for (ref, value), (array, now) in zip(kept, starts):
        if ref() is not array or value != now:
            return False
    return True


def _same_grads(grads, arrays):
    for ref, a in zip(grads, arrays):
        if (ref() if ref else None) is not a.grad:
            return False
    return True


def _drop(plan):
    """The plan's batch is done with. The next pass records another (the Tapes may be stable again), but a plan
    whose batches keep being dropped (what changes keeps changing: two losses in turn) records none after
    DROPS_KEPT: each recording costs about what running the pass launch by launch does."""
    kept = plan.backward
    plan.dropped += 1
    plan.backward = None if plan.dropped < DROPS_KEPT else False
    kept.batch.release()

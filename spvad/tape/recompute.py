"""The backward pass of a Tape past its checkpoint_budget (replay_log.py recorded its forward and snapshots of
its state). Segment by segment from the last: the state is put back as the segment's snapshot holds it, the
segment's launches and host writes run again under a Tape of their own, which keeps what their gradients
read within what the budget leaves free, and that Tape's gradients run, adding into the same .grad arrays
(it neither clears them nor seeds the loss). A segment too long for what is free is split into pieces: its
events run once more without a Tape, leaving a snapshot at the start of each piece, and each piece, from the
last, is done the same way. So each level of splitting holds a few snapshots and costs one more forward over
its segment: multi-level checkpointing (a sqrt-like spacing per level, as a fixed-depth Revolve), with
memory about k snapshots per level and at most one more replay of a launch per level.

The replays repeat each launch with its compiled kernel, arrays and scalars (the random-number key among
them: the same numbers), so the gradients are those the Tape would give with all it needs kept."""

from ..errors import AutodiffRuleError
from .checkpoints import OverBudget
from .first_rows import live_nbytes, live_rows

MAX_LEVELS = 24      # levels of splitting (each one more forward over its segment) before a budget is too small
MAX_RESTARTS = 64    # pieces run again from their segment's start where no snapshot fits (quadratic)
KEEP_LAST_ROOM = 4   # snapshots' worth of room that must stay beside the last one for it to stay to the end
MARGIN = 0.875       # of the room a piece has, what its events may take at the rate seen so far (a recording
                     # Tape keeps a little more at its start than on average)

def run_backward(tape):
    """The gradients of `tape`'s recorded events, last first (the gradient starts are set already); the arrays
    end as the forward left them."""
    log = tape.replays
    log.flush()
    if tape.entries:   # (what the Tape records past the budget: copies and custom gradients, not replayed)
        raise not_replayable(tape.entries[0], log.budget)
    tops, end = log.tops, len(log.events)
    # the last snapshot stays for the end (the state the forward left: it and what followed it) where there
    # is room for it; else the end replays from the last snapshot left (the first copies at worst)
    keep_last = KEEP_LAST_ROOM * log.state_nbytes() <= log.budget - log.held
    for k in reversed(range(len(tops))):
        snap = tops[k]
        if snap.pos < end:
            log.restore(snap)
            _segment(tape, log, snap, end)
            end = snap.pos
        if k and (k < len(tops) - 1 or not keep_last):
            log.drop(snap)
    last = tops[-1] if keep_last else tops[0]
    log.restore(last)
    _replay(tape, log, last.pos, len(log.events), ())


def not_replayable(entry, budget):
    what = {"CopyEntry": "a copy (a.copy_from(b), sp.copy)", "CustomEntry": "a @sp.grad_replaced call"}.get(
        type(entry).__name__, type(entry).__name__)
    return AutodiffRuleError(
        f"sp.Tape: past checkpoint_budget={budget:,} bytes the Tape recomputes its forward during the backward, "
        f"but it recorded {what}, which it cannot run again; raise checkpoint_budget (or leave it out)")


def too_small(log, what, need=0):
    """The error of a budget too small for `what`; `need`: an estimate of the bytes that would do."""
    state, fixed = log.state_nbytes(), log.first.nbytes + log.host_nbytes
    return AutodiffRuleError(
        f"sp.Tape: checkpoint_budget={log.budget:,} bytes is too small to recompute this Tape's forward ({what}): "
        f"it keeps the rows of its arrays that launches read before its writes replace them, as it found them, "
        f"and the contents its host writes left ({fixed:,} bytes so far), and needs room beside them for "
        f"snapshots of the arrays it writes ({state:,} "
        f"bytes each) and for the contents the gradients of a few launches read; it needs " +
        (f"at least {fixed:,} bytes" if fixed > log.budget else f"more (about {max(log.budget + 1, int(need)):,} "
         "bytes or more)") + " and runs fewer launches again with more")


def _segment(tape, log, snap, end):
    """The gradients of events [snap.pos, end), the arrays holding the state of `snap`."""
    n, free = end - snap.pos, max(0, log.budget - log.held)
    if n == 1 or log.rate * n <= MARGIN * free:
        done = _leaf(tape, log, snap.pos, end, free)
        if done is None:
            return
        log.rate = max(log.rate, (free + 1) / max(done, 1))   # (it kept more than `free` in `done` events)
        log.restore(snap)
        if n == 1:
            raise too_small(log, "one launch's gradient reads more than the budget leaves")
    live = live_rows(log.events, snap.pos, end, log.written)   # (what the snapshots inside it hold)
    lengths = split(n, free, max(live_nbytes(live, snap.pos, end), 1), log.rate)
    if lengths is None:
        return _from_the_start(tape, log, snap, end, free)
    bounds = [snap.pos]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    k = len(lengths)
    snaps = [snap] + _replay(tape, log, snap.pos, bounds[k - 1], bounds[1:k], live)
    for j in reversed(range(k)):
        if j < k - 1:   # (the last piece's snapshot is the state the replay left)
            log.restore(snaps[j])
        _segment(tape, log, snaps[j], bounds[j + 1])
        if j:
            log.drop(snaps[j])


def _from_the_start(tape, log, snap, end, free):
    """No room for a snapshot: each piece, from the last, runs again from `snap` to its start and then under a
    Tape of its own (quadratic in the pieces: at most MAX_RESTARTS of them)."""
    stop = end
    while stop > snap.pos:
        length = stop - snap.pos if log.rate <= 0 else max(1, min(stop - snap.pos, int(MARGIN * free / log.rate)))
        if (stop - snap.pos) / length > MAX_RESTARTS:   # (room for a snapshot, or for longer pieces, would do)
            more = min(log.state_nbytes(), log.rate * (stop - snap.pos) / MAX_RESTARTS / MARGIN - free)
            raise too_small(log, f"{end - snap.pos:,} events do not fit in {free:,} bytes", log.budget + more + 1)
        log.restore(snap)
        _replay(tape, log, snap.pos, stop - length, ())
        done = _leaf(tape, log, stop - length, stop, free)
        if done is None:
            stop -= length
            continue
        log.rate = max(log.rate, (free + 1) / max(done, 1))
        if length == 1:
            raise too_small(log, "one launch's gradient reads more than the budget leaves")


def split(n, free, state, rate):
    """The lengths of the pieces to split n events into (at least two), with `free` bytes, a snapshot taking
    `state` and a recording Tape `rate` per event; None when no depth up to MAX_LEVELS fits. While piece j
    runs, the snapshots of pieces 1..j are held (the later ones were dropped), so piece j has j snapshots
    less room: with c_d(m) the most events d levels handle with room for m snapshots (plus the rest),
    c_0(m) = (rest + m * state) / rate and c_d(m) = c_{d-1}(m) + c_{d-1}(m - 1) + ... + c_{d-1}(0) (the
    binomial recurrence of Revolve). The fewest levels that reach n, then the fewest pieces."""
    if rate <= 0:   # (nothing seen kept yet)
        return [n - n // 2, n // 2] if n > 1 and free >= state else None
    slots, rest = min(free // state, n), free % state
    caps = [min(n, int(MARGIN * (rest + m * state) // rate)) for m in range(slots + 1)]   # c_0
    for _ in range(MAX_LEVELS):
        if slots < 1:
            return None
        if sum(caps) >= n:   # (piece j, j = 0 .. slots: caps[slots - j])
            lengths, left = [], n
            for j in range(slots + 1):
                length = min(left, caps[slots - j])
                if length:
                    lengths.append(length)
                    left -= length
                if not left:
                    break
            if len(lengths) > 1:
                return lengths
        total, summed = 0, []
        for c in caps:   # c_d from c_{d-1}: prefix sums
            total = min(n, total + c)
            summed.append(total)
        caps = summed
    return None


def _leaf(tape, log, start, end, free):
    """Events [start, end) again under a Tape keeping at most `free` bytes, then its gradients. None when
    done; else the number of events it replayed before passing `free` (it ran no gradient)."""
    inner = type(tape)(checkpoint_budget=free, clear_gradients=False)
    inner.plans, inner.recomputes = False, False
    done, events = 0, log.events
    try:
        with inner:
            for pos in range(start, end):
                events[pos].replay(inner)
                done += 1
                tape.recomputed_launches += events[pos].is_launch
    except OverBudget:
        return done
    log.rate = max(log.rate, inner.checkpoint_bytes / (end - start))
    log.peak = max(log.peak, log.held + inner.checkpoint_bytes)
    return None


def _replay(tape, log, start, stop, marks, live=None):
    """Events [start, stop) again without a Tape; returns the snapshots taken before each position in `marks`
    (ascending, the last may be `stop`), of the rows `live` names (first_rows.live_rows)."""
    snaps, marks, events = [], list(marks), log.events
    for pos in range(start, stop):
        if marks and marks[0] == pos:
            snaps.append(log.snapshot(marks.pop(0), live))
        events[pos].replay(None)
        tape.recomputed_launches += events[pos].is_launch
    if marks:
        snaps.append(log.snapshot(marks.pop(0), live))
    return snaps

"""What a Tape with a checkpoint_budget records so that it can recompute its forward: every launch (its
compiled kernel, arrays and scalars, the random-number key among them) and host write (the contents it left)
in program order, each array the launches and host writes change as the Tape found it (copied before its
first write: the state the replays start from), and, once it recomputes (past the budget), snapshots of that
state at launch positions spaced so that they hold a share of the budget (recompute.py runs the backward).

A snapshot at position p holds every array written before event p as it was then; an array first written
at or after p is restored from its first copy (no write changed it before p)."""
import numpy as np

from .. import runtime
from ..launch import launch
from .recompute import too_small

TOP_SHARE = 3   # the snapshots taken while recording hold at most 1/TOP_SHARE of what the budget leaves free


class LaunchEvent:
    """A recorded launch, repeated as it ran: the same compiled kernel (aliasing variant included), arrays
    and scalars (so the same random numbers: the key is one of the scalars)."""
    __slots__ = ("kernel", "specs", "arrays", "captured", "scalars", "ck")
    is_launch = True

    def __init__(self, kernel, specs, arrays, captured, scalars, ck):
        self.kernel, self.specs, self.arrays, self.captured = kernel, specs, list(arrays), list(captured)
        self.scalars, self.ck = scalars, ck

    def replay(self, tape):
        """Launch again; `tape` (a Tape recording the replay, or None) records it as the first launch did."""
        entry = None
        if tape is not None:
            entry = tape.before_launch(self.kernel, self.specs, self.arrays, self.captured, self.scalars, self.ck)
        launch(self.ck, self.arrays + self.captured, self.scalars)
        if entry is not None and entry.post:
            tape.after_launch(entry)


class HostWriteEvent:
    """A recorded host write (`fill`, `from_numpy`, `a[i] = v`): the contents it left (`buffer`, copied
    before the next event); `seen`: whether the recording Tape recorded it (a gradient reads past it), as
    a Tape recording the replay must."""
    __slots__ = ("array", "what", "index", "seen", "buffer")
    is_launch = False

    def __init__(self, array, what, index, seen):
        self.array, self.what, self.index, self.seen, self.buffer = array, what, index, seen, None

    def replay(self, tape):
        a = self.array
        if tape is not None and self.seen:
            tape.host_write(a, self.what, self.index)
        if self.index is None:
            a._runtime.device.copy_buffer(self.buffer, a.buffer, a.buffer.nbytes)
        else:   # (`a[i] = v`: only element i was kept)
            offset, _, size = element_region(a, self.index)
            a._runtime.device.copy_regions(self.buffer, a.buffer, np.array([[0, offset, size]], np.uint64))
        a.version += 1


def element_region(array, index):
    """(offset in the array, 0, bytes) of element `index` (a flat index) of `array`."""
    size = array.buffer.nbytes // max(array.size, 1)
    return (index * size, 0, size)


class Snapshot:
    """The state before event `pos`: array id -> (array, device copy of its contents)."""
    __slots__ = ("pos", "copies", "nbytes")

    def __init__(self, pos):
        self.pos, self.copies, self.nbytes = pos, {}, 0


class ReplayLog:
    def __init__(self, budget, checkpoints):
        self.budget, self.checkpoints = budget, checkpoints   # (the Tape's own copies share the budget)
        self.events = []
        self.first = Snapshot(0)   # every written array as the Tape found it
        self.written = {}          # id -> array: the state (what launches and host writes change)
        self.pending = None        # the HostWriteEvent whose contents are copied at the next event
        self.tops = None           # [Snapshot] by position once recomputing (the first copies first)
        self.anchor = 0            # the event the snapshots taken while recording start from
        self.interval = 1          # events between the snapshots taken while recording
        self.held = 0              # bytes of the copies held now
        self.host_nbytes = 0       # of them, those of the host writes' contents
        self.peak = 0              # the most bytes held at once (with the Tape's own copies)
        self.rate = 0.0            # bytes a recording Tape kept per launch replayed, as seen so far
        self.pool = {}             # nbytes -> buffers of released snapshots, for the next ones
        self.buffers = []          # every buffer taken, given back to the runtime at the end
        self.make_room = None      # the Tape's: past the budget, drop its own copies and start(...) here

    @property
    def recomputing(self):
        return self.tops is not None

    # ---- device copies ----
    def _copy(self, array, index=None):
        """A device copy of `array` (of its element `index` alone, when given)."""
        region = None if index is None else element_region(array, index)
        nbytes = array.buffer.nbytes if region is None else region[2]
        if self.tops is None and self.held + self.checkpoints.nbytes + nbytes > self.budget:
            self.make_room(len(self.events))   # (the Tape drops its own copies first: recomputing from here)
        spare = self.pool.get(nbytes)
        if spare:
            buffer = spare.pop()
        else:
            buffer = runtime.get().spare_buffers.take(nbytes)
            self.buffers.append(buffer)
        if region is None:
            array._runtime.device.copy_buffer(array.buffer, buffer, nbytes)
        else:
            array._runtime.device.copy_regions(array.buffer, buffer, np.array([region], np.uint64))
        self._hold(nbytes)
        return buffer

    def _hold(self, nbytes, others=0):
        self.held += nbytes
        self.checkpoints.reserved = self.held
        self.peak = max(self.peak, self.held + self.checkpoints.nbytes + others)

    def snapshot(self, pos):
        """A snapshot of the state as it is now, before event `pos`."""
        snap = Snapshot(pos)
        for key, a in self.written.items():
            snap.copies[key] = (a, self._copy(a))
            snap.nbytes += a.buffer.nbytes
        return snap

    def drop(self, snap):
        """A snapshot no longer needed: its buffers serve the next ones (queued copies stay in order)."""
        for a, buffer in snap.copies.values():
            self.pool.setdefault(buffer.nbytes, []).append(buffer)
        self.held -= snap.nbytes
        self.checkpoints.reserved = self.held
        snap.copies, snap.nbytes = {}, 0

    def restore(self, snap):
        """Put every array of the state back as it was at `snap` (on the device, in launch order)."""
        for key, a in self.written.items():
            _, buffer = snap.copies.get(key) or self.first.copies[key]
            a._runtime.device.copy_buffer(buffer, a.buffer, a.buffer.nbytes)
            a.version += 1

    def state_nbytes(self):
        return sum(a.buffer.nbytes for a in self.written.values())

    # ---- recording ----
    def _will_write(self, array):
        if id(array) not in self.written:
            self.first.copies[id(array)] = (array, self._copy(array))
            self.first.nbytes += array.buffer.nbytes
            self.written[id(array)] = array

    def flush(self):
        """Copy the contents the last host write left (its write is queued or done by now)."""
        event, self.pending = self.pending, None
        if event is not None:
            event.buffer = self._copy(event.array, event.index)
            self.host_nbytes += event.buffer.nbytes

    def launched(self, kernel, specs, arrays, captured, scalars, ck):
        """Before a launch is queued: note it, and keep what it changes as the Tape found it."""
        self.flush()
        everything = list(arrays) + list(captured)
        for ai, field in ck.facts.writes:
            if field == "primal":
                self._will_write(everything[ai])
        self._event(LaunchEvent(kernel, specs, arrays, captured, scalars, ck))

    def host_write(self, array, what, index, seen):
        """Before a host write changes `array`."""
        self.flush()
        self._will_write(array)
        self.pending = HostWriteEvent(array, what, index, seen)
        self._event(self.pending)

    def _event(self, event):
        pos, tops = len(self.events), self.tops
        if tops is not None and (pos - self.anchor) % self.interval == 0 and tops[-1].pos < pos and \
                self.state_nbytes() <= self._share():
            tops.append(self.snapshot(pos))
            self._thin()
        if tops is not None and self.held > self.budget:
            raise too_small(self, "the copies the Tape must keep pass it")
        self.events.append(event)

    def over_budget(self):
        return self.held + self.checkpoints.nbytes > self.budget

    def start(self, own_nbytes, launches, anchor):
        """Past the budget (the Tape's own copies, `own_nbytes` for `launches` launches, are dropped): from now
        on keep snapshots, from event `anchor` (the state now is the state before it) on."""
        self.rate = own_nbytes / max(launches, 1)
        self.tops, self.anchor = [self.first], anchor
        if self.state_nbytes() <= self._share():
            self.tops.append(self.snapshot(self.anchor))
        if self.held > self.budget:
            raise too_small(self, "the copies the Tape must keep pass it")

    def _share(self):
        """The bytes the snapshots taken while recording may hold: a share of what the budget leaves."""
        return (self.budget - self.first.nbytes - self.host_nbytes) // TOP_SHARE

    def _thin(self):
        """Keep every other snapshot while they hold more than their share of the budget: they stay evenly
        spaced, `interval` events apart from the first."""
        tops, share = self.tops, self._share()
        while len(tops) > 1 and sum(s.nbytes for s in tops[1:]) > share:
            self.interval *= 2
            kept = tops[:1]
            for s in tops[1:]:
                if (s.pos - self.anchor) % self.interval == 0 and (len(kept) > 1 or s.nbytes <= share):
                    kept.append(s)
                else:
                    self.drop(s)
            tops[:] = kept

    def release(self):
        """The buffers taken, for the runtime's spare pool (after the last sync)."""
        out, self.buffers, self.pool = self.buffers, [], {}
        self.events, self.written, self.tops, self.pending = [], {}, None, None   # (references to arrays, kernels)
        self.first = Snapshot(0)
        return out

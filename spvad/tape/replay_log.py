"""What a Tape with a checkpoint_budget records so that it can recompute its forward: every launch (its
compiled kernel, arrays and scalars, the random-number key among them) and host write (the contents it left)
in program order, the rows of the arrays that launches read before the Tape's writes replace them, as the
Tape found them (first_rows.py: the state the replays start from), and, once it recomputes (past the
budget), snapshots of the arrays written so far at launch positions spaced so that they hold a share of the
budget (recompute.py runs the backward).

A snapshot at position p holds every array written before event p as it was then; an array first written
at or after p gets back the rows first_rows.py copied (the others need none)."""
import numpy as np

from .. import runtime
from ..ir.rows import accessed_rows
from ..launch import launch
from .first_rows import FirstRows
from .kept_slices import Arena
from .recompute import too_small

TOP_SHARE = 3   # the snapshots taken while recording hold at most 1/TOP_SHARE of what the budget leaves free


class LaunchEvent:
    """A recorded launch, repeated as it ran: the same compiled kernel (aliasing variant included), arrays
    and scalars (so the same random numbers: the key is one of the scalars)."""
    __slots__ = ("kernel", "specs", "arrays", "captured", "scalars", "ck", "reads")
    is_launch = True

    def __init__(self, kernel, specs, arrays, captured, scalars, ck):
        self.kernel, self.specs, self.arrays, self.captured = kernel, specs, list(arrays), list(captured)
        self.scalars, self.ck = scalars, ck
        self.reads = []   # [(FirstRows, rows it reads (None: all))]

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
    before the next event; none for a write of zero bits, `zero`, which a replay repeats on the device);
    `seen`: whether the recording Tape recorded it (a gradient reads past it), as a Tape recording the replay
    must."""
    __slots__ = ("array", "what", "index", "zero", "seen", "buffer")
    is_launch = False
    reads = ()

    def __init__(self, array, what, index, zero, seen):
        self.array, self.what, self.index, self.zero, self.seen, self.buffer = array, what, index, zero, seen, None

    def replay(self, tape):
        a = self.array
        if tape is not None and self.seen:
            tape.host_write(a, self.what, self.index, self.zero)
        if self.zero:
            a._runtime.device.fill_buffers(a._fills(0, self.index))
        elif self.index is None:
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
    """The state before event `pos`: array id -> (array, device copy, None for a copy of the whole array, else
    the regions (offset in the copy, offset in the array, bytes) of the rows it holds)."""
    __slots__ = ("pos", "copies", "nbytes")

    def __init__(self, pos):
        self.pos, self.copies, self.nbytes = pos, {}, 0


class ReplayLog:
    def __init__(self, budget, checkpoints):
        self.budget, self.checkpoints = budget, checkpoints   # (the Tape's own copies share the budget)
        self.events = []
        self.first = Snapshot(0)   # the replays' start: no whole copies, the rows of `rows` (nbytes: theirs)
        self.rows = {}             # id -> FirstRows: rows read and written so far, those copied as found
        self.reads = {}            # id(compiled kernel) -> (it, ((array index, rows), ...) its launches read)
        self.arena = Arena()       # where the rows' copies lie
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
    def _room(self, nbytes):
        if self.tops is None and self.held + self.checkpoints.nbytes + nbytes > self.budget:
            self.make_room(len(self.events))   # (the Tape drops its own copies first: recomputing from here)

    def _copy(self, array, index=None):
        """A device copy of `array` (of its element `index` alone, when given)."""
        region = None if index is None else element_region(array, index)
        nbytes = array.buffer.nbytes if region is None else region[2]
        self._room(nbytes)
        buffer = self._take(nbytes)
        if region is None:
            array._runtime.device.copy_buffer(array.buffer, buffer, nbytes)
        else:
            array._runtime.device.copy_regions(array.buffer, buffer, np.array([region], np.uint64))
        self._hold(nbytes)
        return buffer

    def _take(self, nbytes):
        spare = self.pool.get(nbytes)
        if spare:
            return spare.pop()
        buffer = runtime.get().spare_buffers.take(nbytes)
        self.buffers.append(buffer)
        return buffer

    def _hold(self, nbytes, others=0):
        self.held += nbytes
        self.checkpoints.reserved = self.held
        self.peak = max(self.peak, self.held + self.checkpoints.nbytes + others)

    def snapshot(self, pos, live=None):
        """A snapshot of the state as it is now, before event `pos`: every array written so far; or, `live`
        (first_rows.live_rows for a segment that `pos` lies in), the rows a replay from `pos` to the segment's
        end reads and the events before `pos` wrote."""
        snap = Snapshot(pos)
        if live is None:
            for key, a in self.written.items():
                snap.copies[key] = (a, self._copy(a), None)
                snap.nbytes += a.buffer.nbytes
            return snap
        for tracker, rows, fw, lr in live:
            rows = rows[(fw < pos) & (pos <= lr)]
            if not len(rows):
                continue
            a = tracker.array
            regions, nbytes = tracker.regions(rows.tolist())
            buffer = self._take(nbytes)
            a._runtime.device.copy_regions(a.buffer, buffer, regions)
            self._hold(nbytes)
            snap.copies[id(a)] = (a, buffer, regions[:, [1, 0, 2]])
            snap.nbytes += nbytes
        return snap

    def drop(self, snap):
        """A snapshot no longer needed: its buffers serve the next ones (queued copies stay in order)."""
        for a, buffer, _ in snap.copies.values():
            self.pool.setdefault(buffer.nbytes, []).append(buffer)
        self.held -= snap.nbytes
        self.checkpoints.reserved = self.held
        snap.copies, snap.nbytes = {}, 0

    def restore(self, snap):
        """Put every array of the state back as it was at `snap` (on the device, in launch order)."""
        for key, a in self.written.items():
            held = snap.copies.get(key)
            if held is None or held[2] is not None:   # (rows a snapshot holds go over them)
                self.rows[key].restore()
            if held is not None and held[2] is None:
                a._runtime.device.copy_buffer(held[1], a.buffer, a.buffer.nbytes)
            elif held is not None:
                a._runtime.device.copy_regions(held[1], a.buffer, held[2])
            a.version += 1

    def state_nbytes(self):
        return sum(a.buffer.nbytes for a in self.written.values())

    # ---- recording ----
    def _tracker(self, array, slices, scalars):
        rows = self.rows.get(id(array))
        if rows is None:
            rows = self.rows[id(array)] = FirstRows(array, slices, scalars)
        return rows

    def _will_write(self, tracker, rows):
        """Before `rows` of the tracker's array are written: copy those read before and not copied yet."""
        if tracker.copied is not None:   # (None: every row copied already)
            due = tracker.due(rows)
            if due:
                self.first.nbytes += tracker.copy(due, self._place)
        if rows is not None or tracker.all_at is None:
            tracker.note_write(rows, len(self.events))
        self.written.setdefault(id(tracker.array), tracker.array)

    def _place(self, nbytes):
        """Room for `nbytes` of first rows, counted in the budget: (buffer, byte offset)."""
        self._room(nbytes)
        buffer, at, _ = self.arena.place(runtime.get().spare_buffers, nbytes)
        self._hold(nbytes)
        return buffer, at

    def _launch_reads(self, ck):
        known = self.reads.get(id(ck))
        if known is None:
            found = accessed_rows(ck.ir, writes=False)
            known = self.reads[id(ck)] = (ck, tuple((ai, slices) for (ai, field), slices in found.items()
                                                    if field == "primal"))
        return known[1]

    def flush(self):
        """Copy the contents the last host write left (its write is queued or done by now)."""
        event, self.pending = self.pending, None
        if event is not None and not event.zero:
            event.buffer = self._copy(event.array, event.index)
            self.host_nbytes += event.buffer.nbytes

    def launched(self, kernel, specs, arrays, captured, scalars, ck):
        """Before a launch is queued: note it, and keep what it changes as the Tape found it."""
        self.flush()
        everything, event = list(arrays) + list(captured), LaunchEvent(kernel, specs, arrays, captured, scalars, ck)
        trackers, reads = self.rows, event.reads
        for ai, slices in self._launch_reads(ck):   # (reads first: a launch may read what it writes)
            tracker = trackers.get(id(everything[ai])) or self._tracker(everything[ai], slices, scalars)
            rows = None if tracker.axis is None else tracker.rows(slices, scalars)
            if tracker.read is not None:   # (None: every row read already)
                tracker.note_read(rows)
            reads.append((tracker, rows))
        for ai, slices in ck.facts.primal_writes:
            tracker = trackers.get(id(everything[ai])) or self._tracker(everything[ai], slices, scalars)
            self._will_write(tracker, None if tracker.axis is None else tracker.rows(slices, scalars))
        self._event(event)

    def host_write(self, array, what, index, zero, seen):
        """Before a host write changes `array`."""
        self.flush()
        tracker = self._tracker(array, None, ())
        self._will_write(tracker, tracker.element_rows(index))
        tracker.covered = tracker.covered or index is None
        self.pending = HostWriteEvent(array, what, index, zero, seen)
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
        out, self.buffers, self.pool = self.buffers + self.arena.release(), [], {}
        self.events, self.written, self.tops, self.pending = [], {}, None, None   # (references to arrays, kernels)
        self.first, self.rows, self.reads = Snapshot(0), {}, {}
        return out

"""The state a Tape with a checkpoint_budget replays from (replay_log.py): not whole arrays as the Tape found
them, only the rows of them that a recorded launch may read before the Tape's writes have replaced them.

Rows lie along one axis per array (kept_slices.py's layout; the axis along which its first access names the
fewest rows, ir/rows.py; None: the whole array is one row). Per array the Tape notes the rows launches read
and the rows launches and host writes write, in program order; a row is copied just before the first write
to it that comes after some read of it (reads in a launch count before its writes). That copy serves every
replay from a position at or before the row's first write (later ones restore the row from a snapshot):
  - a read of the row before its first write sees it as the Tape found it: the copy was taken before any
    write to it, so it holds exactly that;
  - else every write to it before the copy came before every read of it, and the copy holds what those
    writes left beside the contents as found: a replay writes those elements again before it reads them
    (writes may cover part of a row), and reads the rest as found.
A row never written after a read needs no copy: a replay writes the same elements again before any read,
and elements no write touches keep their contents. So DiffTaichi's electric keeps its x[t] and v[t] (read by
nn1(t) before advance(t) writes them), not its hidden and gravitation columns (written first).

live_rows: the rows a snapshot taken inside a segment during the backward must hold (those later launches
of the segment read and earlier launches wrote: a scratch layer and x[t - 1], not every array written)."""
import math

import numpy as np

from .kept_slices import best_axis, itemsize, row_of_element, row_regions, rows_along, rows_nbytes


NEVER = 1 << 62   # the first write position of a row never written


class FirstRows:
    """One array's rows along `axis` read so far and those copied (None: every row), and where the copies are."""
    __slots__ = ("array", "axis", "count", "read", "copied", "pieces", "merged", "first_write", "all_at",
                 "covered")

    def __init__(self, array, slices, scalars):
        self.array = array
        axis, _ = best_axis(array, slices, scalars)
        shape = array.storage_shape
        if axis is not None and math.prod(shape[axis + 1:]) * itemsize(array) % 4:
            axis = None   # (a row's blocks are not whole words: device copies move multiples of 4 bytes)
        self.axis = axis
        self.count = 1 if axis is None else shape[axis]
        self.read, self.copied = set(), set()
        self.pieces = []     # (buffer, regions (offset in the array, offset in the copy, bytes)) of the copies
        self.merged = None   # [(buffer, regions from the copy to the array)], worked out at the first restore
        self.first_write = None   # event position of each row's first write (numpy, made at the first one)
        self.all_at = None        # position of the first write of every row at once
        self.covered = False      # a host write set every element: what is read after it, a replay writes again

    def rows(self, slices, scalars):
        """The rows that an access naming `slices` for `scalars` touches (None: every row, or unknown)."""
        return None if self.axis is None else rows_along(self.axis, self.array, slices, scalars)

    def element_rows(self, index):
        """The rows a host write touches (`index`: a flat element index, None: all)."""
        return None if index is None or self.axis is None else row_of_element(self.axis, self.array, index)

    def note_read(self, rows):
        """`rows` (None: all) are read, as the Tape found them unless a host write covered the array first (a
        launch's writes may cover a row in part: what it read there may still be as found)."""
        if self.read is None or self.covered:
            return
        if rows is None:
            self.read = None
        else:
            self.read |= rows

    def due(self, rows):
        """Of the rows about to be written (None: all), those to copy now: read before, not copied yet."""
        read, copied = self.read, self.copied
        if copied is None or read is not None and not read:
            return ()
        if rows is None and read is None:
            out = set(range(self.count))
        else:
            out = read if rows is None else rows if read is None else rows & read
        return sorted(out - copied if copied else out)

    def note_write(self, rows, pos):
        """`rows` (None: all) are written by event `pos` (positions only grow)."""
        if rows is None:
            if self.all_at is None:
                self.all_at = pos
            return
        if self.first_write is None:
            self.first_write = np.full(self.count, NEVER, np.int64)
        at = np.fromiter(rows, np.int64, len(rows))
        self.first_write[at] = np.minimum(self.first_write[at], pos)

    def first_writes(self, rows):
        """The positions of the first writes of `rows` (an index array)."""
        out = np.full(len(rows), NEVER if self.all_at is None else self.all_at, np.int64)
        return out if self.first_write is None else np.minimum(out, self.first_write[rows])

    def row_nbytes(self):
        a = self.array
        return a.buffer.nbytes if self.axis is None else rows_nbytes(a.storage_shape, itemsize(a), self.axis, 1)

    def regions(self, rows):
        """Regions (offset in the array, offset in a packed copy, bytes) of `rows` (sorted), and the bytes."""
        a = self.array
        if self.axis is None:
            return np.array([[0, 0, a.buffer.nbytes]], np.uint64), a.buffer.nbytes
        shape, item = a.storage_shape, itemsize(a)
        return row_regions(shape, item, self.axis, rows, 0, rows), rows_nbytes(shape, item, self.axis, len(rows))

    def copy(self, rows, place):
        """Copy `rows` (sorted) of the array now into room `place(nbytes)` gives ((buffer, byte offset));
        returns the bytes copied."""
        a, shape, item = self.array, self.array.storage_shape, itemsize(self.array)
        if self.axis is None:
            nbytes = a.buffer.nbytes
            buffer, at = place(nbytes)
            regions = np.array([[0, at, nbytes]], np.uint64)
        else:
            nbytes = rows_nbytes(shape, item, self.axis, len(rows))
            buffer, at = place(nbytes)
            regions = row_regions(shape, item, self.axis, rows, at, rows)
        a._runtime.device.copy_regions(a.buffer, buffer, regions)
        self.pieces.append((buffer, regions))
        self.copied.update(rows)
        if len(self.copied) == self.count:
            self.copied = None
        self.merged = None
        return nbytes

    def restore(self):
        """Put the copied rows back into the array (recorded on the device, in launch order)."""
        if not self.pieces:
            return
        if self.merged is None:
            by_buffer = {}
            for buffer, regions in self.pieces:
                by_buffer.setdefault(id(buffer), (buffer, []))[1].append(regions[:, [1, 0, 2]])
            self.merged = [(buffer, np.concatenate(parts)) for buffer, parts in by_buffer.values()]
        device = self.array._runtime.device
        for buffer, regions in self.merged:
            device.copy_regions(buffer, self.array.buffer, regions)


def live_rows(events, start, end, written):
    """[(tracker, rows, their first writes, their last reads)] of the rows of the arrays in `written` (id ->
    array) that events [start, end) read (`event.reads`: [(tracker, rows or None: all)]) and that are written
    before some position p in (start, end] and read at or after it: what a snapshot at p must hold for a
    replay of [p, end) (the others are read only after a replay wrote them, or as first_rows keeps them)."""
    last, last_all, trackers = {}, {}, {}
    for pos in range(start, end):
        for tracker, rows in events[pos].reads:
            key = id(tracker.array)
            if key not in written:
                continue
            trackers[key] = tracker
            if rows is None:
                last_all[key] = pos
            else:
                known = last.setdefault(key, {})
                for r in rows:
                    known[r] = pos
    out = []
    for key, tracker in trackers.items():
        known = last.get(key, {})
        if key in last_all:
            rows = np.arange(tracker.count, dtype=np.int64)
            lr = np.full(tracker.count, last_all[key], np.int64)
            if known:
                at = np.fromiter(known, np.int64, len(known))
                lr[at] = np.maximum(lr[at], np.fromiter(known.values(), np.int64, len(known)))
        else:
            rows = np.array(sorted(known), np.int64)
            lr = np.array([known[r] for r in rows.tolist()], np.int64)
        fw = tracker.first_writes(rows)
        keep = fw < lr
        if keep.any():
            out.append((tracker, rows[keep], fw[keep], lr[keep]))
    return out


def live_nbytes(live, start, end):
    """The most bytes a snapshot at a position in (start, end] holds (live_rows' answer)."""
    diff = np.zeros(end - start + 2, np.int64)
    for tracker, rows, fw, lr in live:
        begin = np.maximum(fw + 1, start + 1) - start
        stop = lr + 1 - start
        ok = begin < stop
        np.add.at(diff, begin[ok], tracker.row_nbytes())
        np.add.at(diff, stop[ok], -tracker.row_nbytes())
    return int(np.cumsum(diff).max(initial=0))

"""The contents a Tape keeps: device-side copies of the array contents that a recorded gradient will read and a
later write is about to destroy, and the views that bind them when the gradients run.

An array's contents are named by (array, version): every write bumps `version`. A recorded launch declares
the rows of a version its gradient reads (`need`); before any write, `protect` copies those rows if the
write's rows meet them. Rows lie along one axis per array (ir/rows.py: any axis whose index is an affine
expression of the launch's scalars; None: all of them), and needs are indexed by row, so a write meets only
the needs of the rows it touches: recording costs the same at the 10,000th launch as at the 10th. A need
whose rows no write touched is read from the array's own buffer. Copies hold only the rows needed, packed
into shared buffers (kept_slices.py), are made on the device, in launch order, and only then; a gradient
binds a full-size scratch buffer filled at those rows, which are all it reads (a large whole copy is bound
as it is).
"""
import numpy as np

from ..errors import AutodiffRuleError, SpvadError
from .kept_slices import Arena, best_axis, itemsize, row_of_element, row_regions, rows_along, rows_nbytes


class OverBudget(AutodiffRuleError):
    """Keeping a copy would pass the Tape's checkpoint_budget (a Tape that can recompute does so instead)."""


class _Watch:
    """The needs of one array still read from its own buffer, indexed by the rows along `axis` they read
    (axis None: every need reads all rows). They hold while the array is at version `expected`: a write the
    Tape did not see (another thread, a direct buffer write) breaks them."""
    __slots__ = ("axis", "expected", "needs", "by_row", "whole", "last")

    def __init__(self, axis, expected):
        self.axis, self.expected = axis, expected
        self.needs = {}     # version -> set of rows along `axis`, or None (all rows)
        self.by_row = {}    # row -> set of versions reading it
        self.whole = set()  # versions read whole
        self.last = None    # (version, rows object) added last, while no row has left since: a repeat of it
                            # (a weight's constant rows, launch after launch) adds nothing

    def add(self, version, rows):
        last = self.last
        if last is not None and last[1] is rows and last[0] == version:
            return
        self.last = (version, rows)
        known = self.needs.get(version, ())
        if known is None:
            return
        if rows is None:
            self.pop(version)
            self.needs[version] = None
            self.whole.add(version)
            return
        if version not in self.needs:
            known = self.needs[version] = set()
        for r in rows:
            if r not in known:
                known.add(r)
                self.by_row.setdefault(r, set()).add(version)

    def pop(self, version):
        """Forget the need of `version` (all its rows)."""
        self.last = None
        rows = self.needs.pop(version, ())
        if rows is None:
            self.whole.discard(version)
        else:
            self._unindex(version, rows)

    def _unindex(self, version, rows):
        for r in rows:
            versions = self.by_row[r]
            versions.discard(version)
            if not versions:
                del self.by_row[r]

    def take_meeting(self, rows):
        """{version: rows met (None: all)} of the needs that read some of `rows` (None: all rows): what a write
        of those rows destroys. The rows met leave the watch; a need's other rows stay in the array's buffer."""
        self.last = None
        if rows is None:
            met = dict(self.needs)
            self.needs, self.by_row, self.whole = {}, {}, set()
            return met
        met = {}
        if self.whole:
            for v in self.whole:
                met[v] = None
                del self.needs[v]
            self.whole = set()
        by_row = self.by_row
        for r in rows:
            versions = by_row.pop(r, None)
            if versions:   # (a time loop writing a row no gradient read yet: none)
                for v in versions:
                    met.setdefault(v, set()).add(r)
        for v, gone in met.items():
            left = self.needs.get(v)
            if left:
                left -= gone
                if not left:
                    del self.needs[v]
        return met


class _Kept:
    """A kept copy, at byte `at` of `buffer`, of `rows` (a sorted tuple; None: all) along `axis`: packed one
    block after another as kept_slices.row_regions lays them out. `own`: the buffer is a copy of the whole
    array, bound as it is."""
    __slots__ = ("buffer", "at", "axis", "rows", "own")

    def __init__(self, buffer, at, axis, rows, own=False):
        self.buffer, self.at, self.axis, self.rows, self.own = buffer, at, axis, rows, own

    def fill(self, array, target, rows):
        """Record copying `rows` (None: all it holds) of the copy to their places in `target`."""
        device = array._runtime.device
        if self.own and rows is None:
            device.copy_buffer(self.buffer, target, array.buffer.nbytes)
            return
        shape, item = array.storage_shape, itemsize(array)
        if rows is None and self.rows is None or self.axis is None:   # all of the array, in its own layout
            regions = np.array([[0, self.at, array.buffer.nbytes]], np.uint64)
        else:
            among = range(shape[self.axis]) if self.rows is None else self.rows
            regions = row_regions(shape, item, self.axis, among if rows is None else rows, self.at, among)
        device.copy_regions(self.buffer, target, regions[:, [1, 0, 2]])


class Checkpoints:
    def __init__(self, budget=None):
        self.budget = budget
        self.pending = {}   # id(array) -> _Watch: needs (or rows of them) the array's own buffer still holds
        self.kept = {}      # (id(array), version) -> [_Kept]: copies of the rows of that need writes destroyed
        self.broken = set()   # (id(array), version) of needs a write the Tape did not see destroyed
        self.nbytes = 0     # bytes kept so far (what `Tape.checkpoint_bytes` reports)
        self.reserved = 0   # bytes the Tape holds besides, under the same budget (replay_log.py)
        self.arena = Arena()
        self.scratch = {}   # (id(array), field) -> [full-size buffer gradients bind, (version, rows) it holds]

    def _watch(self, array, version):
        """The array's watch while its needs hold, `version` being the array's version (now, or at a launch a
        Tape followed from its plan); a write the Tape did not see (another thread, a direct buffer write)
        breaks them all: buffer_of refuses them."""
        watch = self.pending.get(id(array))
        if watch is not None and watch.expected != version:
            self.broken.update((id(array), v) for v in watch.needs)
            del self.pending[id(array)]
            return None
        return watch

    def need(self, array, version, slices=None, scalars=()):
        """A recorded gradient reads `array` as it is at `version` (its version now, or at a launch a Tape
        followed from its plan, tape/plan.py): the rows `slices` names for the launch's `scalars` ({axis: row
        expressions} of ir/rows.py; None: all). Returns those rows along the array's axis (None: all), for
        buffer_of."""
        watch = self._watch(array, version)
        if watch is None or watch.axis is None and not watch.needs:
            axis, rows = best_axis(array, slices, scalars)
            if watch is None:
                watch = self.pending[id(array)] = _Watch(axis, version)
            watch.axis = axis
        else:
            rows = rows_along(watch.axis, array, slices, scalars)
        watch.add(version, rows)
        return rows

    def watches(self, array):
        """Whether a write to `array` must be protected first (some recorded gradient reads its contents)."""
        return id(array) in self.pending

    def protect(self, array, name, writer, slices=None, scalars=(), bumps=1, element=None, now=None):
        """Keep the rows of `array` that recorded gradients read and that `writer` (a description such as "the
        launch of kernel step") is about to change: the rows `slices` names for `scalars` (as in `need`), or
        the row of `element` (a flat element index: a host write `a[i] = v`), after which the array's version
        has grown by `bumps`. Call before the write; or, `now` the array's version then, after it, for a
        write that destroyed nothing a gradient reads (a launch a Tape followed from its plan)."""
        if now is None:
            now = array.version
        watch = self._watch(array, now)
        if watch is None:
            return
        rows = rows_along(watch.axis, array, slices, scalars) if element is None else \
            row_of_element(watch.axis, array, element)
        met = watch.take_meeting(rows)
        watch.expected = now + bumps
        if not watch.needs:
            del self.pending[id(array)]
        if met and now != array.version:   # (the contents are gone: a plan's Tape kept none, so none is due)
            raise SpvadError(f"sp.Tape: internal error: {writer} destroyed contents of {name} that a gradient "
                             "reads, in a launch the Tape followed from its plan")
        if met:
            rows = None if any(r is None for r in met.values()) else set().union(*met.values())
            kept = self._copy(array, name, writer, watch.axis, rows)
            for version, rows in met.items():   # the copy may hold other versions' rows too
                self.kept.setdefault((id(array), version), []).append((kept, rows))

    def _copy(self, array, name, writer, axis, rows):
        shape, item = array.storage_shape, itemsize(array)
        whole = rows is None or len(rows) == shape[axis]
        size = array.buffer.nbytes if whole else rows_nbytes(shape, item, axis, len(rows))
        if self.budget is not None and self.reserved + self.nbytes + size > self.budget:
            raise OverBudget(
                f"sp.Tape: {writer} overwrites {name}, whose contents the gradient of an earlier recorded "
                f"launch reads; keeping a copy ({size:,} bytes) would pass checkpoint_budget={self.budget:,} "
                f"bytes ({self.nbytes:,} kept so far). Write each step into its own array (e.g. a row of a "
                "time-indexed array) instead of overwriting one, or raise checkpoint_budget")
        rt = array._runtime
        buffer, at, own = self.arena.place(rt.spare_buffers, size)
        self.nbytes += size
        if whole and own:   # bound as it is
            rt.device.copy_buffer(array.buffer, buffer, size)
            return _Kept(buffer, 0, axis, None, own=True)
        if whole:
            rt.device.copy_regions(array.buffer, buffer, np.array([[0, at, size]], np.uint64))
            return _Kept(buffer, at, axis, None)
        rows = tuple(sorted(rows))
        rt.device.copy_regions(array.buffer, buffer, row_regions(shape, item, axis, rows, at, rows))
        return _Kept(buffer, at, axis, rows)

    def buffer_of(self, array, version, rows, name, kernel_name, field="primal"):
        """The buffer holding `rows` (need's answer) of `array` at `version` for a gradient: the array's own
        while no write changed them, else a kept copy, or a scratch buffer of the array's size (for `field`'s
        binding) filled at those rows from the copies and from the array (the rows no write met)."""
        if array.version == version:
            return array.buffer
        key = (id(array), version)
        watch = self._watch(array, array.version)
        pending = watch is not None and version in watch.needs
        left = watch.needs[version] if pending else set()   # rows still in the array's buffer (None: all)
        parts = self.kept.get(key, ())
        if key in self.broken or not (parts or pending):
            raise AutodiffRuleError(
                f"sp.Tape: the gradient of kernel {kernel_name} needs {name} as it was at its launch, but it "
                "was changed since by a write the Tape did not record; keep such writes inside the Tape "
                "(on the recording thread)")
        if pending and (left is None or (rows is not None and rows <= left)):
            return array.buffer
        if len(parts) == 1 and parts[0][0].own:   # every row this version reads, kept at once
            return parts[0][0].buffer
        rt = array._runtime
        scratch = self.scratch.get((id(array), field))
        if scratch is None:
            scratch = self.scratch[(id(array), field)] = [rt.spare_buffers.take(array.buffer.nbytes), None]
        held = scratch[1]   # (the gradient launched last may have read the same rows of this version)
        if held is None or held[0] != version or not (held[1] is None or (rows is not None and rows <= held[1])):
            for kept, met in parts:   # only this version's rows of each copy
                wanted = met if rows is None else rows if met is None else met & rows
                if wanted is None or wanted:
                    kept.fill(array, scratch[0], wanted)
            from_array = left if rows is None else left & rows
            if from_array:
                regions = row_regions(array.storage_shape, itemsize(array), watch.axis, from_array, 0,
                                      range(array.storage_shape[watch.axis]))
                rt.device.copy_regions(array.buffer, scratch[0], regions)
            scratch[1] = (version, rows)
        return scratch[0]

    def release(self, spare):
        """Hand the copies and scratch buffers to `spare` (a runtime's SparePool), for the next Tape."""
        spare.give(self.arena.release() + [buffer for buffer, _ in self.scratch.values()])
        self.kept, self.pending, self.scratch, self.broken = {}, {}, {}, set()


class StateView:
    """An ndarray as a gradient launch binds it: its primal contents from `primal` (a kept copy, a scratch
    buffer filled at the kept rows, or the array's own buffer) and, for atomic max/min winners, the contents
    the launch left from `final`."""
    _spvad_ndarray = True

    def __init__(self, array, primal, final):
        self.array, self.buffer, self.final_buffer = array, primal, final
        self.grad, self.dual = array.grad, array.dual
        self.storage_shape, self.dtype, self.ndim = array.storage_shape, array.dtype, array.ndim

    def scratch(self, kind):
        return self.array.scratch(kind)

    def buffer_for(self, field):
        if field == "primal":
            return self.buffer
        if field == "final":
            return self.final_buffer
        return getattr(self.array, field).buffer

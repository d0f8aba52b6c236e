"""The contents a Tape keeps: device-side copies of array contents that a recorded gradient will read and a
later write is about to destroy, and the views that bind them when the gradients run.

An array's contents are named by (array, version): every write bumps `version`. A recorded launch
declares the rows of a version its gradient reads (`need`); before any write, `protect` copies the array if
the write's rows meet rows still needed (rows: first-axis indices, ir/rows.py; None: all of them). A need
whose rows no write touched is read from the array's own buffer. Copies are made on the device, in launch
order, and only then.
"""
from .errors import AutodiffRuleError


class _Need:
    """Rows of one version of an array that recorded gradients read, still equal in the array's own buffer
    while the array is at version `valid_at` (a write the Tape did not see breaks that)."""
    __slots__ = ("rows", "valid_at")

    def __init__(self, rows, valid_at):
        self.rows, self.valid_at = rows, valid_at


class Checkpoints:
    def __init__(self, budget=None):
        self.budget = budget
        self.pending = {}   # id(array) -> {version: _Need}: needs the array's own buffer still holds
        self.kept = {}      # (id(array), version) -> device buffer holding the rows its gradients read
        self.nbytes = 0     # bytes kept so far (what `Tape.checkpoint_bytes` reports)

    def need(self, array, version, rows=None):
        """A recorded gradient reads `rows` (a frozenset of first-axis indices; None: all) of `array` as it
        is now, at `version`."""
        needs = self.pending.setdefault(id(array), {})
        known = needs.get(version)
        if known is None:
            needs[version] = _Need(rows, array.version)
        elif known.rows is not None:
            known.rows = None if rows is None else known.rows | rows

    def watches(self, array):
        """Whether a write to `array` must be protected first (some recorded gradient reads its contents)."""
        return id(array) in self.pending

    def protect(self, array, name, writer, rows=None, bumps=1):
        """Keep `array`'s current contents if a recorded gradient reads rows that `writer` (a description
        such as "the launch of kernel step") is about to change: its `rows` (None: all), after which the
        array's version has grown by `bumps`. Call before the write."""
        needs = self.pending.get(id(array))
        if not needs:
            return
        meeting = []
        for version, need in list(needs.items()):
            if need.valid_at != array.version:   # changed by a write the Tape did not see: buffer_of says so
                del needs[version]
            elif need.rows is None or rows is None or need.rows & rows:
                meeting.append(version)
                del needs[version]
            else:
                need.valid_at = array.version + bumps
        if not needs:
            del self.pending[id(array)]
        if meeting:
            copy = self._copy(array, name, writer)
            for version in meeting:
                self.kept[(id(array), version)] = copy

    def _copy(self, array, name, writer):
        size = array.buffer.nbytes
        if self.budget is not None and self.nbytes + size > self.budget:
            raise AutodiffRuleError(
                f"sp.Tape: {writer} overwrites {name}, whose contents the gradient of an earlier recorded "
                f"launch reads; keeping a copy ({size:,} bytes) would pass checkpoint_budget={self.budget:,} "
                f"bytes ({self.nbytes:,} kept so far). Write each step into its own array (e.g. a row of a "
                "time-indexed array) instead of overwriting one, or raise checkpoint_budget")
        rt = array._runtime
        copy = rt.spare_buffers.take(size)
        rt.device.copy_buffer(array.buffer, copy, size)
        self.nbytes += size
        return copy

    def buffer_of(self, array, version, name, kernel_name):
        """The buffer holding the rows of `array` at `version` that its gradients read: the array's own while
        no write changed them."""
        if array.version == version:
            return array.buffer
        kept = self.kept.get((id(array), version))
        if kept is not None:
            return kept
        need = self.pending.get(id(array), {}).get(version)
        if need is not None and need.valid_at == array.version:
            return array.buffer
        # a write the Tape did not see (another thread, a direct buffer write)
        raise AutodiffRuleError(
            f"sp.Tape: the gradient of kernel {kernel_name} needs {name} as it was at its launch, but it "
            "was changed since by a write the Tape did not record; keep such writes inside the Tape "
            "(on the recording thread)")

    def release(self, spare):
        """Hand the copies to `spare` (a runtime's SparePool), for the next Tape."""
        spare.give(list({id(b): b for b in self.kept.values()}.values()))
        self.kept, self.pending = {}, {}


class StateView:
    """An ndarray as a gradient launch binds it: its primal contents from `primal` (a kept copy or the
    array's own buffer) and, for atomic max/min winners, the contents the launch left from `final`."""
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

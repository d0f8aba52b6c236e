"""The contents a Tape keeps: device-side copies of array contents that a recorded gradient will read and a
later write is about to destroy, and the views that bind them when the gradients run.

An array's contents are named by (array, version): every write bumps `version`. A recorded launch
declares the versions its gradient reads (`need`); before any write, `protect` copies the array if its
current version is needed and not kept yet. Copies are made on the device, in launch order, and only then.
"""
from .errors import AutodiffRuleError


class Checkpoints:
    def __init__(self, budget=None):
        self.budget = budget
        self.needed = {}    # (id(array), version) -> array: contents some recorded gradient reads
        self.kept = {}      # (id(array), version) -> device buffer holding those contents
        self.nbytes = 0     # bytes kept so far (what `Tape.checkpoint_bytes` reports)

    def need(self, array, version):
        self.needed[(id(array), version)] = array

    def protect(self, array, name, writer):
        """Keep `array`'s current contents if a recorded gradient needs them; call before `writer`
        (a description such as "the launch of kernel step") changes them."""
        key = (id(array), array.version)
        if key not in self.needed or key in self.kept:
            return
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
        self.kept[key] = copy
        self.nbytes += size

    def buffer_of(self, array, version, name, kernel_name):
        """The buffer holding `array` at `version`: the array's own while nothing overwrote it."""
        if array.version == version:
            return array.buffer
        kept = self.kept.get((id(array), version))
        if kept is None:   # a write the Tape did not see (another thread, a direct buffer write)
            raise AutodiffRuleError(
                f"sp.Tape: the gradient of kernel {kernel_name} needs {name} as it was at its launch, but it "
                "was changed since by a write the Tape did not record; keep such writes inside the Tape "
                "(on the recording thread)")
        return kept

    def release(self, spare):
        """Hand the copies to `spare` (a runtime's SparePool), for the next Tape."""
        spare.give(self.kept.values())
        self.kept, self.needed = {}, {}


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

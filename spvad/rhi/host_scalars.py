"""An ndarray's scalars as host memory: numpy views of its buffer's pieces, read and written as one flat
array. One piece for nearly every buffer (plain numpy slicing, as a single view); an array past the
device's largest memory allocation is in several (rhi/vulkan/buffers.py), and an element may straddle two."""
import numpy as np

FILL_BLOCK_SCALARS = 1 << 20   # a vector fill writes this many scalars at a time across pieces


class HostScalars:
    def __init__(self, pieces, size):
        self.pieces, self.size = pieces, size

    def _parts(self, start, stop):
        """(view of piece memory, offset from `start`) for the scalars [start, stop)."""
        at = 0
        for p in self.pieces:
            lo, hi = max(start, at), min(stop, at + len(p))
            if lo < hi:
                yield p[lo - at: hi - at], lo - start
            at += len(p)

    def read(self, start=0, stop=None):
        """A copy of the scalars [start, stop)."""
        stop = self.size if stop is None else stop
        if len(self.pieces) == 1:
            return self.pieces[0][start:stop].copy()
        out = np.empty(stop - start, self.pieces[0].dtype)
        for part, at in self._parts(start, stop):
            out[at: at + len(part)] = part
        return out

    def write(self, start, data):
        """Store the flat `data` over the scalars from `start`."""
        for part, at in self._parts(start, start + len(data)):
            part[:] = data[at: at + len(part)]

    def fill(self, value, width):
        """Every scalar = `value` (width 0), or every row of `width` scalars = the array `value`."""
        if not width:
            for part, _ in self._parts(0, self.size):
                part[:] = value
        elif len(self.pieces) == 1:
            self.pieces[0][: self.size].reshape(-1, width)[:] = value
        else:   # rows may straddle pieces: whole rows written as flat blocks
            block = np.tile(value, max(FILL_BLOCK_SCALARS // width, 1))
            for start in range(0, self.size, len(block)):
                self.write(start, block[: min(len(block), self.size - start)])

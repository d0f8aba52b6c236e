"""Where a Tape's kept rows go: the byte regions of rows of an array along one axis, in the array's buffer and
packed in a compact copy (for Device.copy_regions), and the arena of device buffers the compact copies share.
Row r of axis k of a C-ordered array of shape S is prod(S[:k]) blocks of prod(S[k+1:]) scalars, one per
index of the axes before k; consecutive rows merge into one region per block."""
import math

import numpy as np


def rows_nbytes(shape, itemsize, axis, count):
    """Bytes of `count` rows along `axis` of an array of storage shape `shape`."""
    return math.prod(shape[:axis]) * count * math.prod(shape[axis + 1:]) * itemsize


def row_regions(shape, itemsize, axis, rows, at, among=None):
    """(n, 3) uint64 regions (offset in the array, offset in the copy, bytes) of `rows` along `axis` in a
    compact copy starting at byte `at` that holds the rows `among` (a sorted sequence; default `rows`), each
    block of the array's rows after the one before it."""
    block = math.prod(shape[axis + 1:]) * itemsize
    among = sorted(rows) if among is None else among
    place = {r: k for k, r in enumerate(among)} if len(among) < shape[axis] else None   # None: r is its place
    runs = []   # [first row, its place in the copy, rows in the run]
    for r in sorted(rows):
        if runs and r == runs[-1][0] + runs[-1][2]:
            runs[-1][2] += 1
        else:
            runs.append([r, r if place is None else place[r], 1])
    base = np.array([(r * block, at + k * block, n * block) for r, k, n in runs], np.uint64)
    outer = math.prod(shape[:axis])
    if outer == 1:
        return base
    stride = np.array([shape[axis] * block, len(among) * block, 0], np.uint64)
    return (np.arange(outer, dtype=np.uint64)[:, None, None] * stride + base).reshape(-1, 3)


class Arena:
    """Device buffers holding a Tape's copies: small ones packed one after another into chunks of CHUNK bytes
    (no buffer, descriptor set or allocation of their own), larger ones in buffers of their own; all taken
    from and given back to the runtime's spare pool, so the next Tape finds them again."""
    CHUNK = 1 << 20

    def __init__(self):
        self.buffers, self.chunk, self.used = [], None, 0

    def place(self, spare, nbytes):
        """(buffer, byte offset, whether the buffer is the copy's own, of exactly `nbytes` bytes)."""
        if nbytes > self.CHUNK // 4:
            own = spare.take(nbytes)
            self.buffers.append(own)
            return own, 0, True
        if self.chunk is None or self.used + nbytes > self.CHUNK:
            self.chunk, self.used = spare.take(self.CHUNK), 0
            self.buffers.append(self.chunk)
        at, self.used = self.used, self.used + nbytes
        return self.chunk, at, False

    def release(self):
        """The buffers to give back; the arena is empty afterwards."""
        out, self.buffers, self.chunk, self.used = self.buffers, [], None, 0
        return out

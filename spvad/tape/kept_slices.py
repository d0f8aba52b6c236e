"""Where a Tape's kept rows go: the byte regions of rows of an array along one axis, in the array's buffer and
packed in a compact copy (for Device.copy_regions), and the arena of device buffers the compact copies share.
Row r of axis k of a C-ordered array of shape S is prod(S[:k]) blocks of prod(S[k+1:]) scalars, one per
index of the axes before k; consecutive rows merge into one region per block. Also which rows of an array a
launch's slices name (ir/rows.py expressions), for checkpoints.py and first_rows.py."""
import math

import numpy as np

from ..ir import rows as row_exprs


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


def itemsize(array):
    """Bytes of one scalar of `array` as its buffer stores it."""
    return array.buffer.nbytes // max(array.size, 1)


def rows_along(axis, array, slices, scalars):
    """The rows along `axis` of `array` that `slices` names for `scalars` (None: all, or unknown)."""
    if axis is None or slices is None:
        return None
    exprs = slices.get(axis)
    return None if exprs is None else row_exprs.evaluate(exprs, scalars, array.storage_shape[axis])


def row_of_element(axis, array, element):
    """{the row along `axis` of element number `element` of `array`}; None (all rows) for a component axis."""
    if axis is None or axis >= len(array.shape):
        return None
    return frozenset({element // math.prod(array.shape[axis + 1:]) % array.shape[axis]})


def best_axis(array, slices, scalars):
    """(axis, its rows): the axis along which `slices` names the smallest share of `array` ((None, None): no
    axis names any)."""
    best, share = (None, None), 2.0   # (all rows of an axis still beat None: later accesses may name fewer)
    for axis in slices or ():
        rows = rows_along(axis, array, slices, scalars)
        if rows is not None and len(rows) / array.storage_shape[axis] < share:
            best, share = (axis, rows), len(rows) / array.storage_shape[axis]
    return best

"""The host side of kernel `print(...)`: one print buffer per runtime, bound to every printing launch, and
its records turned into text on sys.stdout at the next sync (a pending check, like the flag buffers).

Launches run one after another (each ends with a barrier before the next starts), so one buffer with one
cursor keeps each launch's lines after the previous launch's; the threads of one launch race for the
cursor, so their lines come in any order (each thread's in program order). Record layout: ir/print_format.py.
"""
import os
import sys

import numpy as np

from ..errors import SpvadError
from ..ir import print_format as P

CAPACITY_ENV = "SPVAD_PRINT_BUFFER_BYTES"   # bytes of the print buffer, read when a runtime first prints
DEFAULT_CAPACITY_BYTES = 1 << 20
MIN_CAPACITY_BYTES = 4 * (P.HEADER_WORDS + 1)


def print_buffer(rt, low):
    """The runtime's print buffer (made on first use), knowing the formats of lowered task `low`."""
    prints = rt.prints
    if prints is None:
        prints = rt.prints = PrintBuffer(rt)
    prints.learn(low.print_formats)
    return prints.buffer


def capacity_bytes():
    raw = os.environ.get(CAPACITY_ENV, "") or str(DEFAULT_CAPACITY_BYTES)
    try:
        nbytes = int(raw)
    except ValueError:
        raise SpvadError(f"{CAPACITY_ENV}={raw!r}: expected a number of bytes") from None
    if nbytes < MIN_CAPACITY_BYTES:
        raise SpvadError(f"{CAPACITY_ENV}={raw!r}: the print buffer needs at least {MIN_CAPACITY_BYTES} bytes")
    return nbytes


class PrintBuffer:
    def __init__(self, rt):
        self.rt = rt
        self.nbytes = capacity_bytes() // 4 * 4
        limit = rt.device.info["limits"]["max_storage_buffer_range"]
        if self.nbytes > limit:   # bound as one storage buffer, never by address
            raise SpvadError(f"{CAPACITY_ENV}={self.nbytes}: more than this device's largest storage-buffer binding "
                             f"({limit:,} bytes)")
        self.buffer = rt.device.create_buffer(self.nbytes)
        self.words = self.buffer.view(np.uint32)
        self.words[:] = 0   # a record that did not fit leaves its words zero: the decoding stops there
        self.words[P.CAPACITY] = self.nbytes // 4 - P.HEADER_WORDS
        self.decoders = {}       # format id -> print_format.Decoder
        self.scheduled = False   # a flush waits among the runtime's pending checks

    def learn(self, formats):
        for fid, pieces, dtypes in formats:
            known = self.decoders.get(fid)
            if known is None:
                self.decoders[fid] = P.Decoder(pieces, dtypes)
            elif known.pieces != pieces or known.dtypes != tuple(dtypes):   # a 31-bit hash collision
                raise SpvadError(f"two kernel print formats share the id {fid}: {known.pieces!r} and "
                                 f"{pieces!r}; change the text of one print")

    def after_launch(self):
        """A launch that may print was queued: flush at the next sync."""
        if not self.scheduled:
            self.scheduled = True
            self.rt.pending_checks.append(self.flush)

    def flush(self):
        """At sync (the device idle): write the text of the records since the last flush, and a notice when
        some were dropped; empty the buffer for the next launches. Returns None (a pending check's error)."""
        self.scheduled = False
        words = self.words
        used = min(int(words[P.CURSOR]), int(words[P.CAPACITY]))
        dropped = int(words[P.DROPPED])
        area = words[P.HEADER_WORDS:P.HEADER_WORDS + used]
        text, unread = P.decode(area.copy(), self.decoders)
        area[:] = 0
        words[P.CURSOR] = words[P.DROPPED] = 0
        if unread:
            text += (f"[spvad] {unread} words of kernel print output could not be read (a record of an "
                     "unknown format); lines after them are lost\n")
        if dropped:
            text += (f"[spvad] {dropped} kernel print line(s) dropped: the print buffer ({self.nbytes:,} bytes) "
                     f"filled up before the sync; set {CAPACITY_ENV} to a larger number of bytes (read when a "
                     "runtime first prints, e.g. before sp.init()) or sync more often\n")
        if text:
            sys.stdout.write(text)
        return None

    @property
    def pending(self):
        return self.scheduled

"""What a kernel `print(...)` writes and the text it stands for: one definition shared by the SPIR-V lowering,
the interpreter (which write records) and the host (which turns them into text at sync).

The print buffer (u32 words, one per runtime, shared by every printing launch between two syncs):
    word CURSOR     words of records reserved so far (atomic add), may pass the capacity
    word DROPPED    records that did not fit (atomic add)
    word CAPACITY   words of the record area, written by the host
    HEADER_WORDS..  records, back to back: the format id, then each value's raw bits (f64: two words,
                    low word first; bool: 0 or 1)
A record is written only when the whole of it fits, so the host never reads a partial one.

A format is the statement's `pieces`: literal text (str) or a value slot `(shape, spec)`, shape () for a
scalar, (n,) for a vector, (rows, cols) for a matrix, `spec` a Python format spec ("" when none), taking
prod(shape) values in order. Its id is a hash of the pieces and value dtypes, so the same print in any
kernel, process or cache entry has the same id and the host needs no table from the device.
"""
import functools
import hashlib
import math
import struct

import numpy as np

from .. import types as T
from . import nodes as N

CURSOR, DROPPED, CAPACITY = 0, 1, 2
HEADER_WORDS = 3
_UNPACK = {"f32": "f", "f64": "d", "i32": "i", "u32": "I", "u1": "I"}


def format_id(pieces, dtypes):
    """A nonzero 31-bit id of a format (stable across processes: not Python's salted hash)."""
    return _format_id(pieces, tuple(dt.name for dt in dtypes))


def id_of(stmt):
    """The format id of a Print statement."""
    return format_id(stmt.pieces, [v.dtype for v in stmt.values])


@functools.lru_cache(maxsize=1024)
def _format_id(pieces, dtype_names):
    text = repr((pieces, dtype_names)).encode()
    value = int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") & 0x7FFFFFFF
    return value or 1


def value_words(dtype):
    return 2 if dtype.nbytes == 8 else 1


def record_words(dtypes):
    """Words of one record: the id and every value's bits."""
    return 1 + sum(value_words(dt) for dt in dtypes)


def formats_of(task):
    """(format id, pieces, value dtypes) of every Print of `task`: what the host decodes its records with."""
    seen = {}
    for s in N.walk(task.body):
        if isinstance(s, N.Print):
            seen.setdefault(id_of(s), (id_of(s), s.pieces, tuple(v.dtype for v in s.values)))
    return tuple(seen.values())


# ---- writing (the interpreter; the SPIR-V lowering emits the same steps) ---------------------------------
def value_bits(value, dtype):
    """The u32 words a value of `dtype` takes in a record."""
    if dtype.is_bool:
        return [1 if value else 0]
    raw = np.asarray(value, dtype=dtype.np).tobytes()
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def append_record(buf, words):
    """Append one record (a list of u32 ints) to the print buffer `buf` (a u32 numpy view), or count it
    dropped when it does not fit, as the device does."""
    size, cap = len(words), int(buf[CAPACITY])
    start = int(buf[CURSOR])
    if start + size > cap:
        buf[DROPPED] = (int(buf[DROPPED]) + 1) & 0xFFFFFFFF
        return
    buf[CURSOR] = start + size
    buf[HEADER_WORDS + start: HEADER_WORDS + start + size] = words


# ---- reading (the host) -----------------------------------------------------------------------------
class Decoder:
    """Turns the records of one format into text."""
    __slots__ = ("pieces", "dtypes", "words", "unpack")

    def __init__(self, pieces, dtypes):
        self.pieces, self.dtypes = pieces, tuple(dtypes)
        self.words = record_words(self.dtypes)
        self.unpack = struct.Struct("<" + "".join(_UNPACK[dt.name] for dt in self.dtypes)).unpack_from

    def text(self, data, offset):
        """The text of the record whose values start at byte `offset` of `data`."""
        values = iter(zip(self.unpack(data, offset), self.dtypes))
        out = []
        for p in self.pieces:
            if isinstance(p, str):
                out.append(p)
                continue
            shape, spec = p
            flat = [scalar_text(v, dt, spec) for v, dt in (next(values) for _ in range(math.prod(shape)))]
            out.append(nested_text(flat, shape))
        return "".join(out)


def scalar_text(value, dtype, spec=""):
    """A value as Python would print it; a float32 as the shortest decimal that reads back as the same
    float32, laid out as Python's repr (`0.1`, `123456790.0`, `1e-05`). With a format spec, Python's format()
    of the exact value."""
    if dtype.is_bool:
        value = bool(value)
    if spec:
        try:
            return format(value, spec)
        except (ValueError, TypeError):   # a spec that does not suit this dtype: the plain text
            pass
    if dtype == T.f32:
        value = float(str(np.float32(value)))   # shortest float32 digits; repr() lays them out
    return repr(value) if isinstance(value, float) else str(value)


def nested_text(flat, shape):
    """Components of a value of `shape` as Python lists print: `[1.0, 2.0]`, `[[1, 2], [3, 4]]`."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return "[" + ", ".join(flat) + "]"
    step = math.prod(shape[1:])
    return "[" + ", ".join(nested_text(flat[k * step:(k + 1) * step], shape[1:])
                           for k in range(shape[0])) + "]"


def decode(words, decoders):
    """Text of the records in the record area `words` (u32 numpy array of the words reserved), and the
    number of words left unread (a record of an unknown format stops the reading). A zero word ends the
    records: the words of a record that did not fit stay zero, and only the last records can miss."""
    data = words.tobytes()
    out, k, n = [], 0, len(words)
    while k < n:
        fid = int(words[k])
        if fid == 0:
            break
        dec = decoders.get(fid)
        if dec is None or k + dec.words > n:
            return "".join(out), n - k
        out.append(dec.text(data, 4 * (k + 1)))
        k += dec.words
    return "".join(out), 0

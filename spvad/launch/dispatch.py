"""One dispatch of a lowered task: bind its buffers, pack its push constants, fold large launches into 2-D."""
import struct

from .. import runtime
from ..spirv.lower_addressed import several_blocks
from ..spirv.lower_memory import PUSH_FORMAT
from .scalar_table import scalar_table
from .shape_table import shape_table


def dispatch(rt, low, pipeline, arrays, scalars, shapes, n, extra_buffers=(), local=None, push=None):
    """Record one dispatch of a lowered task over `n` threads (launches past the device's group-count
    limit fold into 2-D), or, `n` a (buffer, byte offset) pair, over the group counts the device wrote there
    (a count read from arrays: device_count.py). Returns (the prepared launch, which records it again for
    push-constant bytes, its device arguments) for a replay.
    `push`: the PushPacker of the dispatch, when the caller keeps it (a replay repacks its scalars)."""
    buffers = [_buffer(arrays[ai], field) for ai, field in low.bindings] + list(extra_buffers)
    push = push or PushPacker(low, shapes, rt)
    if push.shape_page is not None:   # bound last (spirv/lower_memory.py)
        buffers.append(push.shape_page)
    if push.spill is not None:   # after it, the scalar table
        buffers.append(push.spill[0].buffer)
    if type(n) is tuple:
        send, groups = rt.device.prepare_launch_indirect(pipeline, buffers, *n), n
    else:
        count = -(-low.threads(n) // (local or low.local_size))
        gx = min(count, rt.device.info["limits"]["max_workgroup_count"][0])
        groups = ((gx, -(-count // gx), 1),)
        send = rt.device.prepare_launch(pipeline, buffers, *groups)
    pushed = push(scalars)
    send(pushed)
    return send, (pipeline, buffers, pushed, *groups)


class BufferArg:
    """A device buffer bound like an ndarray: a counting kernel's output (depth probe, thread count)."""

    def __init__(self, buffer):
        self.buffer = buffer


class PushPacker:
    """The push constants of one recorded dispatch, whose arrays (hence shapes) stay fixed: only the scalars
    are converted and packed again on a replay. Extents past the push-constant budget are an entry of the
    runtime's shape table (`shape_page`, bound last; the push constants hold its offset). Scalars past it are
    an entry of the runtime's scalar table (`spill`: the table, the entry's struct, its slots), placed again
    at each packing: the push constants end with its position."""
    __slots__ = ("struct", "values", "slots", "shape_page", "spill")

    def __init__(self, low, shapes, rt=None):
        self.struct = struct.Struct(low.push_format) if low.push_size else None
        self.shape_page, entry = None, None
        spilled = getattr(low, "spilled_shapes", ())
        if spilled:
            self.shape_page, entry = shape_table(rt or runtime.get()).place(
                tuple(shapes[f[1]][f[2]] for f in spilled))
        self.values = [None if f[0] in ("scalar", "scalar_table") else entry if f[0] == "shape_table" else
                       shapes[f[1]][f[2]] for f in low.push_fields]
        self.slots = [(k, f[1], _CONVERT[(f[2].is_bool, f[2].is_float)])
                      for k, f in enumerate(low.push_fields) if f[0] == "scalar"]
        spilled, self.spill = getattr(low, "spilled_scalars", ()), None
        if spilled:
            self.spill = (scalar_table(rt or runtime.get()),
                          struct.Struct("<" + "".join(PUSH_FORMAT[f[2].name] for f in spilled)),
                          [(f[1], _CONVERT[(f[2].is_bool, f[2].is_float)]) for f in spilled], len(self.values) - 1)

    def __call__(self, scalars):
        if self.struct is None:
            return b""
        values = self.values
        for k, i, convert in self.slots:
            values[k] = convert(scalars[i])
        if self.spill is not None:   # (the last push constant: scalar_table)
            table, entry, slots, k = self.spill
            values[k] = table.place(entry.pack(*[convert(scalars[i]) for i, convert in slots]))
        return self.struct.pack(*values)


_CONVERT = {(True, False): lambda v: int(bool(v)), (False, True): float, (False, False): int}


def _buffer(arr, field):
    return arr.buffer if field == "primal" else arr.buffer_for(field)


def addressed_bindings(low, arrays):
    """The bindings of `low` that hold addressed buffers (arrays past the device's largest binding), and a
    `several_blocks` mark for each whose memory is in several blocks: the lowering reaches them through their
    address tables (spirv/lower_addressed.py), one block's without reading the table per access."""
    out = set()
    for key in low.bindings:
        buffer = _buffer(arrays[key[0]], key[1])
        if buffer.addressed:
            out.add(key)
            if buffer.blocks > 1:
                out.add(several_blocks(key))
    return frozenset(out)


"""One dispatch of a lowered task: bind its buffers, pack its push constants, fold large launches into 2-D."""
import struct


def dispatch(rt, low, pipeline, arrays, scalars, shapes, n, extra_buffers=(), local=None):
    """Record one dispatch of a lowered task over `n` threads (launches past the device's group-count
    limit fold into 2-D); returns the device.launch arguments."""
    buffers = [_buffer(arrays[ai], field) for ai, field in low.bindings] + list(extra_buffers)
    groups = -(-low.threads(n) // (local or low.local_size))
    gx = min(groups, rt.device.info["limits"]["max_workgroup_count"][0])
    recorded = (pipeline, buffers, push_constants(low, scalars, shapes), (gx, -(-groups // gx), 1))
    rt.device.launch(*recorded)
    return recorded


def push_constants(low, scalars, shapes):
    """The push-constant bytes of a launch: the scalars and array extents the task reads, in its format."""
    if not low.push_size:
        return b""
    return struct.pack(low.push_format, *[_push_value(f, scalars, shapes) for f in low.push_fields])


def _buffer(arr, field):
    return arr.buffer if field == "primal" else arr.buffer_for(field)


def _push_value(f, scalars, shapes):
    if f[0] == "scalar":
        v = scalars[f[1]]
        dt = f[2]
        return int(bool(v)) if dt.is_bool else (float(v) if dt.is_float else int(v))
    return shapes[f[1]][f[2]]

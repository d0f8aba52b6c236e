"""The launch side: a compiled kernel's tasks queued on the runtime's device, with their pipelines, flag
buffers, adstack homes and depth probes (device_task.py), replays of recorded launches (replay.py) and
the array versions a Tape follows (versions.py)."""
from .. import runtime
from ..spirv.lower import LOCAL_SIZE_SPEC_ID
from .device_task import task_on_device
from .dispatch import PushPacker, dispatch
from .prints import print_buffer
from .replay import BoundReplay, Record, Replay, relaunch, same_threads
from .versions import bump_versions, companion

NARROW_GROUP, SMALL_LAUNCH = 64, 256

__all__ = ["launch", "dispatch", "Replay", "BoundReplay", "relaunch", "same_threads", "bump_versions",
           "companion"]


def launch(ck, arrays, scalars, extra=(), views=None):
    """Queue every task of a compiled kernel on the device (asynchronous) and bump the versions of what it
    writes. `arrays`: the ndarrays it binds, the arguments' then those of its global names (Kernel.arrays'
    order). Returns the recorded dispatches when repeating them needs no host work (no adstacks), else None.
    `views`: array index -> an object bound instead of that array (a Tape's kept contents)."""
    rt = runtime.get()
    arrays = list(arrays) + list(extra)
    if views:
        for k, view in views.items():
            arrays[k] = view
    for kind, k in ck.ir.scratch:   # a derivative kernel's scratch arrays (extremum winners)
        arrays.append(arrays[k].scratch(kind))
    shapes = [a.storage_shape for a in arrays]   # vector ndarrays add a trailing axis
    records = []
    for ct in ck.tasks:
        n = ct.num_threads(scalars, shapes)
        on_device = task_on_device(rt, ct)
        if n <= 0:
            if records is not None:   # a replay must know this task ran no thread
                records.append(Record(None, on_device, None, None, n, shapes))
            continue
        spec = ct.spec_constants(scalars, shapes, n)
        if ct.depth_probe is not None:
            spec = {**(spec or {}), **on_device.measure_depths(arrays, scalars, shapes, n)}
        low, extra_buffers = ct.lowered, []
        if low.adstacks:   # the stack homes, hence the module variant, depend on the capacities
            low = ct.variant(on_device.homes(spec))
            records = None
        if low.flag_binding is not None:
            extra_buffers.append(on_device.flag_buffer())
        if low.stack_heap is not None:
            extra_buffers.append(on_device.stack_heap(low, spec, n))
        if low.print_binding is not None:
            extra_buffers.append(print_buffer(rt, low))
        local = low.local_size
        if LOCAL_SIZE_SPEC_ID in low.spec_ids and n <= SMALL_LAUNCH:
            # a narrow group for a small launch (lavapipe runs every lane of a group); one narrow width
            # only, so a kernel compiles at most two pipelines
            local = min(local, NARROW_GROUP)
            spec = {**(spec or {}), LOCAL_SIZE_SPEC_ID: local}
        for part in (low, low.tail):   # a coarsened task's last n % 4 elements are a second dispatch
            if part is None or (part is low.tail and not part.threads(n)):
                continue
            push = PushPacker(part, shapes)
            recorded = dispatch(rt, part, on_device.pipeline(spec, part), arrays, scalars, shapes, n,
                                extra_buffers, local, push)
            on_device.after_launch(spec)
            if records is not None:
                records.append(Record(recorded, on_device, spec, push, n, shapes))
    bump_versions(ck.facts.writes, arrays)
    return records

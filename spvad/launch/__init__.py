"""The launch side: a compiled kernel's tasks queued on the runtime's device, with their pipelines, flag
buffers, adstack homes and depth probes (device_task.py), thread counts read from arrays (device_count.py),
replays of recorded launches (replay.py), launches captured once and replayed as one batch (capture.py:
sp.capture) and the array versions a Tape follows (versions.py).

May import: runtime, arguments, pipeline's products, spirv and ir constants, frontend specs, autodiff's sizes.
Never kernel.py, ndarray.py or a Tape: they call it."""
from .. import runtime
from ..errors import ArgumentError
from ..spirv.lower import LOCAL_SIZE_SPEC_ID
from ..spirv.lower_adstack import BUFFER
from .device_task import task_on_device
from .dispatch import PushPacker, addressed_bindings, dispatch
from .group_width import group_width
from .prints import print_buffer
from .replay import BoundReplay, Record, Replay, relaunch, same_threads
from .versions import bump_versions, companion

__all__ = ["launch", "dispatch", "Replay", "BoundReplay", "relaunch", "same_threads", "bump_versions",
           "companion"]


def launch(ck, arrays, scalars, extra=(), views=None):
    """Queue every task of a compiled kernel on the device (asynchronous) and bump the versions of what it
    writes. `arrays`: the ndarrays it binds, the arguments' then those of its global names (Kernel.arrays'
    order). Returns the recorded dispatches when repeating them needs no host work (no adstacks), else None.
    `views`: array index -> an object bound instead of that array (a Tape's kept contents)."""
    rt = runtime.get()
    arrays = list(arrays) + list(extra)
    for i, j, why in ck.distinct:   # one ndarray under two names where the kernel needs two (pipeline.py)
        if arrays[i] is arrays[j]:
            raise ArgumentError(why)
    if views:
        for k, view in views.items():
            arrays[k] = view
    for kind, k in ck.ir.scratch:   # a derivative kernel's scratch arrays (extremum winners)
        arrays.append(arrays[k].scratch(kind))
    shapes = [a.storage_shape for a in arrays]   # vector ndarrays add a trailing axis
    big = any(a.buffer.addressed for a in arrays)   # an array past the device's largest binding
    records = []
    for ct in ck.tasks:
        on_device = task_on_device(rt, ct)
        # the thread count, or None when only the device knows it (read from arrays: device_count.py)
        n = ct.num_threads(scalars, shapes) if on_device.count is None else None
        if n is None and count_on_host(ct, on_device, scalars, shapes):
            n = on_device.count.on_host(arrays, shapes, scalars)
        if n is not None and n <= 0:
            if records is not None:   # a replay must know this task ran no thread
                records.append(Record(None, None, on_device, None, None, n, shapes))
            continue
        spec = ct.spec_constants(scalars, shapes, n)
        if ct.depth_probe is not None:
            spec = {**(spec or {}), **on_device.measure_depths(arrays, scalars, shapes, n)}
        low, extra_buffers = ct.lowered, []
        local = low.local_size
        if LOCAL_SIZE_SPEC_ID in low.spec_ids and n is not None:
            # narrower groups where too few would leave lavapipe's workers idle (group_width.py)
            local = group_width(local, low.threads(n), rt.device.info.get("workers", 1))
            if local != low.local_size:
                spec = {**(spec or {}), LOCAL_SIZE_SPEC_ID: local}
        if low.adstacks:   # the stack homes, hence the module variant, depend on the capacities (and driver)
            low = on_device.variant(spec)
            records = None
        addressed = addressed_bindings(low, arrays) if big else None
        if addressed:
            low = ct.variant(low.homes, addressed)
        if low.flag_binding is not None:
            extra_buffers.append(on_device.flag_buffer())
        if low.stack_heap is not None:
            extra_buffers.append(on_device.stack_heap(low, spec, n))
        if low.print_binding is not None:
            extra_buffers.append(print_buffer(rt, low))
        if n is None:   # the counting launch first: the dispatches below read the groups it writes
            send, recorded, push = on_device.count.launch(arrays, scalars, shapes)
            if records is not None:
                records.append(Record(send, recorded, on_device, spec, push, None, shapes))
        for part in (low, low.tail):   # a coarsened task's last n % 4 elements are a second dispatch
            if part is None or (part is low.tail and n is not None and not part.threads(n)):
                continue
            push = PushPacker(part, shapes, rt)
            threads = on_device.count.groups(part) if n is None else n
            send, recorded = dispatch(rt, part, on_device.pipeline(spec, part), arrays, scalars, shapes, threads,
                                      extra_buffers, local, push)
            on_device.after_launch(spec)
            if records is not None:
                records.append(Record(send, recorded, on_device, spec, push, n, shapes))
    bump_versions(ck.facts.writes, arrays)
    return records


def count_on_host(ct, on_device, scalars, shapes):
    """Whether a launch of `ct`, whose thread count is read from arrays, needs that count on the host: to run
    the depth probe over it, or to size its adstacks' storage buffer (a slice per thread)."""
    return ct.depth_probe is not None or BUFFER in on_device.homes(ct.spec_constants(scalars, shapes, None))

"""What a runtime holds for one compiled task: its pipelines (per stack homes and specialisation), its
flag buffer, the storage-buffer home of its adstacks, and the depth probe sizing them before a launch."""
import os
import weakref

import numpy as np

from ..autodiff.adstack import round_up_pow2
from ..errors import DeviceError, PipelineCreationError, SpvadError
from ..spirv.lower_adstack import BUFFER, FUNCTION, HOMES, choose_homes, function_budget_words
from .capture import refuse_host_step
from .device_count import DeviceCount
from .dispatch import BufferArg, addressed_bindings, dispatch
from .flags import overflow_error, read_flags

HOME_ENV = "SPVAD_ADSTACK_HOME"   # function | buffer | auto (default): where adstacks live, read at launch


def task_on_device(rt, ct):
    """What `rt` holds for compiled task `ct`, made on first use (runtime.release_tasks frees it)."""
    held = rt.tasks.get(id(ct))
    if held is None:
        held = rt.tasks[id(ct)] = DeviceTask(rt, ct)
    return held


class DeviceTask:
    """Per runtime, per CompiledTask `ct` (held, so id(ct) stays unique while this lives)."""

    def __init__(self, rt, ct):
        self.rt, self.ct = rt, ct
        self.pipelines = {}    # (homes, spec items) -> runtime.SharedPipeline
        self.flags = None      # the flag buffer (u32 words, lower_memory.Layout.flag_words)
        self.heap = None       # the buffer-home stacks' storage buffer (grown, never shrunk)
        self.heap_keeper = None   # (a weak reference to) the latest capture binding it: it frees the heap then
        self.probe = None      # (depth probe pipelines by addressed bindings, its counters buffer)
        self.last_spec = None  # specialisation of the last launch: the capacities an overflow message names
        # a thread count read from arrays: its counting launch (device_count.py)
        self.count = DeviceCount(rt, ct) if ct.thread_count is not None else None
        self.refused = set()   # (homes, spec items) whose Function-scope stacks the driver refused
        # whether a launch leaves something for the next sync (prints, flags, a count): else after_launch is idle
        self.reports = ct.lowered.print_binding is not None or ct.lowered.flag_binding is not None or \
            self.count is not None

    def release(self):
        """Give back everything (the device defers destruction while recorded launches may use it)."""
        for ref in self.pipelines.values():
            ref.release()
        pipes, counts = self.probe or ({}, None)
        self._drop_heap()
        for obj in (self.flags, self.count, counts, *pipes.values()):
            if obj is not None:
                obj.release()
        self.pipelines, self.flags, self.probe = {}, None, None

    # ---- what a launch needs ----
    def homes(self, spec):
        """Home of each adstack for capacities `spec`: SPVAD_ADSTACK_HOME when set to function/buffer, else
        Function scope while the stacks fit the device's budget (see lower_adstack.FUNCTION_BUDGET_WORDS)
        and the driver did not refuse them (see `variant`)."""
        mode = os.environ.get(HOME_ENV, "auto") or "auto"
        if mode not in HOMES + ("auto",):
            raise SpvadError(f"{HOME_ENV}={mode!r}: expected 'function', 'buffer' or 'auto'")
        homes = choose_homes(self.ct.stack_shapes, spec, function_budget_words(self.rt.device.info), mode)
        if mode == "auto" and (homes, _items(spec)) in self.refused:
            return (BUFFER,) * len(homes)
        return homes

    def variant(self, spec):
        """The module a launch with specialisation `spec` runs (a task with adstacks): its pipeline is made
        here, so that when the driver refuses the Function-scope stacks (NVIDIA: "failed to validate local
        memory", a limit no device reports) the launch retries once with every stack in the storage buffer,
        and remembers it for this specialisation. A forced SPVAD_ADSTACK_HOME is never overridden."""
        homes = self.homes(spec)
        low = self.ct.variant(homes)
        if FUNCTION not in homes or (os.environ.get(HOME_ENV) or "auto") != "auto":
            return low
        try:
            self.pipeline(spec, low)
            return low
        except PipelineCreationError as refused:
            self.refused.add((homes, _items(spec)))
            fallback = self.ct.variant((BUFFER,) * len(homes))
            try:
                self.pipeline(spec, fallback)
            except PipelineCreationError as again:
                again.args = (f"{again.args[0]}\n(first refused with its adstacks in Function scope: "
                              f"{refused.args[0]})",)
                raise again from None
            return fallback

    def pipeline(self, spec, low):
        key = (low.homes, low.rest, low.addressed, _items(spec))
        ref = self.pipelines.get(key)
        if ref is None:
            ref = self.pipelines[key] = self.rt.shared_pipelines.get(low, self.ct.kernel_name, spec)
        return ref.pipeline

    def flag_buffer(self):
        if self.flags is None:   # every stack-home variant has the same words (lower_memory.Layout.flag_words)
            self.flags = self.rt.device.create_buffer(4 * self.ct.lowered.flag_words)
        return self.flags

    def stack_heap(self, low, spec, n):
        """The storage buffer holding `n` threads' slices of the buffer-home stacks."""
        nbytes = n * low.stack_heap.bytes_per_thread(spec)
        limit = self.rt.device.info["limits"]["max_storage_buffer_range"]
        if nbytes > limit:
            raise DeviceError(
                f"kernel {self.ct.kernel_name}: its adstacks need {nbytes:,} bytes of storage buffer ({n:,} "
                f"threads x {nbytes // n:,} bytes), more than this device's maxStorageBufferRange ({limit:,} "
                "bytes); launch fewer threads at a time or pass a smaller ad_stack_size")
        if self.heap is None or self.heap.nbytes < nbytes:
            self._drop_heap()
            self.heap = self.rt.device.create_buffer(nbytes)
        if self.rt.capture is not None:
            self.heap_keeper = weakref.ref(self.rt.capture)
        return self.heap

    def _drop_heap(self):
        """Release the heap (destroyed once no queued launch uses it), or leave it to the capture binding it."""
        keeper = self.heap_keeper and self.heap_keeper()
        if keeper is not None:
            keeper.give([self.heap])
        elif self.heap is not None:
            self.heap.release()
        self.heap, self.heap_keeper = None, None

    def measure_depths(self, arrays, scalars, shapes, n):
        """Run the depth probe now (it syncs) and return capacities for the measured stacks."""
        rt, ct = self.rt, self.ct
        refuse_host_step(rt, ct.kernel_name, "its adstack capacities are measured",
                         "fix them with ad_stack_size=N (the kernel's option or sp.init's)")
        if self.probe is None:
            self.probe = ({}, rt.device.create_buffer(4 * ct.depth_words))
        pipes, counts = self.probe
        low = ct.depth_probe
        if any(a.buffer.addressed for a in arrays):
            low = ct.probe_variant(addressed_bindings(low, arrays + [BufferArg(counts)]))
        pipe = pipes.get(low.addressed)
        if pipe is None:
            pipe = pipes[low.addressed] = rt.device.create_pipeline(
                low.code, name=ct.kernel_name + " (depth probe)", num_buffers=low.num_buffers,
                push_constant_size=low.push_size, fast_math=low.fast_math)
        rt.sync()
        view = counts.view(np.int32)[: ct.depth_words]
        view[:] = 0
        flags = [rt.device.create_buffer(4 * low.flag_words)] if low.flag_binding is not None else []
        dispatch(rt, low, pipe, arrays + [BufferArg(counts)], scalars, shapes + [(ct.depth_words,)], n, flags)
        rt.sync()
        error = None
        for b in flags:   # its loops and (debug) accesses are checked like any kernel's
            where = f"{ct.kernel_name} ({ct.task.name}, measuring adstack depths)"
            error = read_flags(where, ct.kernel_name + " (measuring adstack depths)", rt, low,
                               b.view(np.uint32)[: low.flag_words], overflow=None)
            b.release()
        if error is not None:
            raise error
        return {sid: round_up_pow2(int(view[sid])) for sid in ct.stack_sizes.measured}

    # ---- device-side error flags: adstack overflow, a loop cut short, an out-of-bounds access (debug) ----
    def after_launch(self, spec):
        if self.rt.capture is not None:   # each replay of the capture reports again (capture.py)
            self.rt.capture.reports[self] = spec
        if self.ct.lowered.print_binding is not None:   # its lines are printed at the next sync
            self.rt.prints.after_launch()
        if self.ct.lowered.flag_binding is None and self.count is None:
            return
        self.last_spec = spec
        rt = self.rt
        if self not in rt.pending_checks_owners:
            rt.pending_checks_owners.add(self)
            rt.pending_checks.append(self.check_flags)

    def check_flags(self):
        """At sync: the error the launches since the last sync flagged, the words cleared for the next ones.
        A count that failed comes first (its launch ran no thread)."""
        self.rt.pending_checks_owners.discard(self)
        low = self.ct.lowered
        failed = self.count.error() if self.count is not None else None
        if low.flag_binding is None:
            return failed
        words = self.flag_buffer().view(np.uint32)[: low.flag_words]
        error = read_flags(f"{self.ct.kernel_name} ({self.ct.task.name})", self.ct.kernel_name, self.rt, low,
                           words, overflow=lambda: overflow_error(self.ct.kernel_name, low.adstacks, words,
                                                                   self.capacity))
        words[:] = 0
        return failed or error

    def capacity(self, stack):
        return (self.last_spec or {}).get(stack.capacity_spec_id, stack.capacity)


def _items(spec):
    """A specialisation as a hashable key."""
    return tuple(sorted(spec.items())) if spec else ()

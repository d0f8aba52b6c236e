"""The compile pipeline of one kernel specialisation: frontend, passes, lowering, validation, pipelines.

`run_passes` lists the passes in order; each is a `Kernel -> Kernel` function in its own module.
"""
import os
from dataclasses import dataclass, field

import numpy as np

from .autodiff.adstack import round_up_pow2
from .autodiff.array_states import ArrayFacts, array_facts
from .autodiff.forward import forward_task
from .autodiff.reverse import reverse_task
from .autodiff.extremum_ties import TieScratch
from .autodiff.loop_exits import eliminate_loop_exits as _loop_exits_of_task
from .autodiff.validation import instrument
from .errors import AdStackOverflowError, DeviceError, SpvadError
from .ir import nodes as N
from .ir import simplify, verify
from .ir.frontend import build_kernel
from .ir.interp import eval_num_threads, out_of_bounds_message
from .spirv import tools
from .spirv.lower import lower_task
from .spirv.lower_adstack import FUNCTION, HOMES, choose_homes, function_budget_words, stack_shapes
from .spirv.lower_bounds import read_violation

HOME_ENV = "SPVAD_ADSTACK_HOME"   # function | buffer | auto (default): where adstacks live, read at launch


@dataclass(eq=False)
class CompiledTask:
    """A lowered task. `lowered` keeps every adstack in Function scope; other stack homes (chosen at
    launch, once capacities are known) are lowered on first use and cached in `variants`."""
    task: object
    lowered: object
    kernel_name: str
    depth_probe: object = None   # lowered counting task measuring data-dependent loop depths, or None
    relower: object = None       # homes -> validated LoweredTask of another stack-home variant
    variants: dict = field(default_factory=dict)   # homes tuple -> LoweredTask

    def __post_init__(self):
        self.variants[(FUNCTION,) * len(self.lowered.adstacks)] = self.lowered
        self.stack_shapes = stack_shapes(self.task) if self.lowered.adstacks else []

    def num_threads(self, scalars, shapes):
        """Threads of a launch: the task header evaluated on the host, memoised per scalars and shapes."""
        cache = self.__dict__.setdefault("_threads", {})
        key = (tuple(scalars), tuple(shapes))
        n = cache.get(key)
        if n is None:
            if len(cache) > 256:
                cache.clear()
            n = cache[key] = eval_num_threads(self.task, scalars, shapes)
        return n

    @property
    def sizer(self):
        return getattr(self.task, "stack_sizes", None)

    # ---- stack homes ----
    def homes(self, rt, spec):
        """Home of each adstack for capacities `spec`: SPVAD_ADSTACK_HOME when set to function/buffer, else
        Function scope while the stacks fit the device's budget (see lower_adstack.FUNCTION_BUDGET_WORDS)."""
        mode = os.environ.get(HOME_ENV, "auto") or "auto"
        if mode not in HOMES + ("auto",):
            raise SpvadError(f"{HOME_ENV}={mode!r}: expected 'function', 'buffer' or 'auto'")
        return choose_homes(self.stack_shapes, spec, function_budget_words(rt.device.info), mode)

    def variant(self, homes):
        low = self.variants.get(homes)
        if low is None:
            low = self.variants[homes] = self.relower(homes)
        return low

    def stack_heap(self, rt, low, spec, n):
        """The storage buffer holding `n` threads' slices of the buffer-home stacks (grown, never shrunk)."""
        nbytes = n * low.stack_heap.bytes_per_thread(spec)
        limit = rt.device.info["limits"]["max_storage_buffer_range"]
        if nbytes > limit:
            raise DeviceError(
                f"kernel {self.kernel_name}: its adstacks need {nbytes:,} bytes of storage buffer ({n:,} threads "
                f"x {nbytes // n:,} bytes), more than this device's maxStorageBufferRange ({limit:,} bytes); "
                "launch fewer threads at a time or pass a smaller ad_stack_size")
        key = ("heap", id(self))
        entry = rt.pipelines.get(key)
        if entry is None or entry[0].nbytes < nbytes:
            if entry is not None:
                entry[0].release()   # destroyed once no recorded launch uses it
            entry = rt.pipelines[key] = (rt.device.create_buffer(nbytes), self)
        return entry[0]

    def spec_constants(self, scalars, shapes, num_threads):
        sizer = self.sizer
        if sizer is None or not sizer.launch_bounds:
            return None
        return sizer.spec_constants(scalars, shapes, num_threads)

    def pipeline(self, rt, spec=None, low=None):
        low = low or self.lowered
        key = (id(self), low.homes, tuple(sorted(spec.items())) if spec else ())
        entry = rt.pipelines.get(key)
        if entry is None:   # holding self keeps id(self) unique
            entry = rt.pipelines[key] = (rt.shared_pipelines.get(low, self.kernel_name, spec), self)
        return entry[0].pipeline

    # ---- device-side error flags: adstack overflow, a loop cut short, an out-of-bounds access (debug) ----
    def flag_buffer(self, rt):
        key = ("flags", id(self))
        entry = rt.pipelines.get(key)
        if entry is None:   # every stack-home variant has the same words (lower_memory.Layout.flag_words)
            entry = rt.pipelines[key] = (rt.device.create_buffer(4 * self.lowered.flag_words), self)
        return entry[0]

    def after_launch(self, rt, spec):
        if self.lowered.flag_binding is None:
            return
        self.last_spec = spec
        if self not in rt.pending_checks_owners:
            rt.pending_checks_owners.add(self)
            rt.pending_checks.append(lambda: self.check_flags(rt))

    def check_flags(self, rt):
        """At sync: the error the launches since the last sync flagged, the words cleared for the next ones.
        An out-of-bounds access comes first: what it skipped can explain the rest."""
        rt.pending_checks_owners.discard(self)
        low = self.lowered
        words = self.flag_buffer(rt).view(np.uint32)[: low.flag_words]
        error = bounds_error(f"{self.kernel_name} ({self.task.name})", low, words)
        if error is None and words[N.FLAG_WORDS_HEADER + len(low.adstacks)]:
            error = loop_cut_error(self.kernel_name, rt)
        if error is None and words[0]:
            error = self.overflow_error(words)
        words[:] = 0
        return error

    def overflow_error(self, words):
        stacks = self.lowered.adstacks
        # depth words are written only by overflowing pushes (bit k of word 0 saturates at 31 stacks)
        hit = [k for k in range(len(stacks)) if words[N.FLAG_WORDS_HEADER + k]]
        needed = max(int(words[N.FLAG_WORDS_HEADER + k]) for k in hit)
        caps = [self.capacity(stacks[k]) for k in hit]
        return AdStackOverflowError(
            f"kernel {self.kernel_name}: an adstack overflowed on the device (capacity {max(caps)}, the "
            f"loop needed {needed}); pass ad_stack_size>={needed} (kernel option or sp.init)")

    def measure_depths(self, rt, arrays, scalars, shapes, n):
        """Run the counting kernel now (it syncs) and return capacities for the measured stacks."""
        key = ("depths", id(self))
        entry = rt.pipelines.get(key)
        if entry is None:
            low = self.depth_probe
            pipe = rt.device.create_pipeline(low.spirv, name=self.kernel_name + " (depth probe)",
                                             num_buffers=low.num_buffers, push_constant_size=low.push_size)
            entry = rt.pipelines[key] = (pipe, rt.device.create_buffer(4 * self.depth_words), self)
        pipe, counts, _ = entry
        rt.sync()
        view = counts.view(np.int32)[: self.depth_words]
        view[:] = 0
        from .kernel import dispatch
        probe_arrays = arrays + [_Counters(counts)]
        flags, low = [], self.depth_probe
        if low.flag_binding is not None:   # its loops and (debug) accesses are checked like any kernel's
            flags = [rt.device.create_buffer(4 * low.flag_words)]
        dispatch(rt, low, pipe, probe_arrays, scalars, shapes + [(self.depth_words,)], n, flags)
        rt.sync()
        error = None
        for b in flags:
            words = b.view(np.uint32)[: low.flag_words]
            error = bounds_error(f"{self.kernel_name} ({self.task.name}, measuring adstack depths)", low, words)
            if error is None and words[N.FLAG_WORDS_HEADER]:
                error = loop_cut_error(self.kernel_name + " (measuring adstack depths)", rt)
            b.release()
        if error is not None:
            raise error
        return {sid: round_up_pow2(int(view[sid])) for sid in self.sizer.measured}

    def capacity(self, stack):
        spec = getattr(self, "last_spec", None) or {}
        return spec.get(stack.capacity_spec_id, stack.capacity)


class _Counters:
    """The counting kernel's output buffer, bound like an ndarray."""

    def __init__(self, buffer):
        self.buffer = buffer


def bounds_error(where, lowered, words):
    """The DeviceError of the out-of-bounds access recorded in the flag `words` (lower_bounds.py), or None."""
    found = read_violation(lowered, words)
    if found is None:
        return None
    (what, array, field, _, loc), index, shape = found
    effect = "it read 0" if what == "load" else "it was skipped"
    return DeviceError(
        f"kernel {where}: out-of-bounds {what}: {out_of_bounds_message(array, field, index, shape, loc)}\n"
        f"(sp.init(debug=True) checks every access: {effect} and the thread went on; this is the first "
        "out-of-bounds access of the launches since the last sync)")


def loop_cut_error(kernel_name, rt):
    info = rt.device.info
    return DeviceError(
        f"kernel {kernel_name}: the driver stopped a loop before it finished, so the results are wrong "
        f"({info['name']} runs at most {info['limits'].get('max_loop_iterations')} loop iterations per thread, "
        "all loops of the thread together); split the loop across launches or threads")


@dataclass(eq=False)
class CompiledKernel:
    ir: object
    param_bindings: list
    captured: list
    tasks: list
    check_plan: object = None    # mode "checked": the access checker's extra arrays
    facts: ArrayFacts = ArrayFacts()   # what a launch writes and (gradients) which array contents it reads


def run_passes(kernel, mode, rt, ad_stack_size):
    """The pass pipeline, in order. The IR is verified after every pass in tests and debug runs."""
    check = rt.debug or rt.validate_spirv
    steps = [simplify.simplify, eliminate_loop_exits]
    if mode in ("reverse", "reverse-aliased"):
        private = mode == "reverse"
        steps += [lambda k: make_reverse_kernel(k, ad_stack_size, private), simplify.simplify]
    elif mode == "dual":
        steps += [make_dual_kernel, simplify.simplify]
    elif mode.startswith("checked"):   # "checked" or "checked:0,0,2" (array k shares array alias[k]'s buffer)
        plan = []
        alias = [int(k) for k in mode.partition(":")[2].split(",")] if ":" in mode else None
        steps.append(lambda k: _keep_plan(instrument(k, alias), plan))
    elif mode != "forward":
        raise NotImplementedError(f"{mode} mode is not available yet")
    if check:
        verify.verify(kernel)
    for step in steps:
        kernel = step(kernel)
        if check:
            verify.verify(kernel)
    kernel.check_plan = plan[0] if mode.startswith("checked") else None
    return kernel


def _keep_plan(result, plan):
    kernel, p = result
    plan.append(p)
    return kernel


def make_reverse_kernel(kernel, ad_stack_size, thread_private=True):
    """The gradient kernel: each task's gradient task, in reverse task order. `thread_private`: plain
    (non-atomic) gradient updates are allowed where indices differ per thread (no aliased arguments)."""
    opts = {"ad_stack_size": ad_stack_size}
    scratch = TieScratch(list(kernel.arrays))
    tasks = []
    for i in reversed(range(len(kernel.tasks))):
        grads = reverse_task(kernel, kernel.tasks[i], opts, scratch, thread_private)
        for g in grads:
            g.source = i
        tasks += grads
    return N.Kernel(kernel.name + "_grad", scratch.arrays, kernel.scalars, tasks, kernel.filename,
                    tuple(scratch.targets))


def eliminate_loop_exits(kernel):
    for task in kernel.tasks:
        _loop_exits_of_task(task)
    return kernel


def make_dual_kernel(kernel):
    """The forward-mode kernel: primal and dual values of every task, in task order."""
    scratch = TieScratch(list(kernel.arrays))
    tasks = [d for t in kernel.tasks for d in forward_task(kernel, t, scratch)]
    return N.Kernel(kernel.name + "_fwd", scratch.arrays, kernel.scalars, tasks, kernel.filename,
                    tuple(scratch.targets))


class Lowering:
    """Lowers one task for a given stack-home assignment (validated when validation is on); picklable, so
    compiled kernels can go to the disk cache."""

    def __init__(self, kernel, task, local_size, features, validate, kernel_name, bounds_check=False):
        self.kernel, self.task, self.local_size = kernel, task, local_size
        self.features, self.validate, self.kernel_name = features, validate, kernel_name
        self.bounds_check = bounds_check   # sp.init(debug=True): every global access checks its indices

    def __call__(self, homes=None):
        low = lower_task(self.kernel, self.task, local_size=self.local_size, features=self.features, homes=homes,
                         bounds_check=self.bounds_check)
        if self.validate:
            tools.validate(low.spirv, kernel_name=f"{self.kernel_name} ({self.task.name})")
        return low


def compile_kernel(kobj, specs, mode, rt, target=None):
    forward, bindings, captured = build_kernel(kobj.fn, specs)
    ir = run_passes(forward, mode, rt,
                    kobj.ad_stack_size if kobj.ad_stack_size is not None else rt.ad_stack_size)
    features = target or rt.device.info["features"]
    tasks = []
    for task in ir.tasks:
        local = 1 if task.kind == "serial" else rt.device.info.get("preferred_local_size", 128)

        lower = Lowering(ir, task, local, features, rt.validate_spirv, kobj.name, rt.debug)
        ct = CompiledTask(task, lower(), kobj.name, relower=lower)
        count = getattr(task, "count_kernel", None)
        if count is not None:
            count_kernel, ct.depth_words = count
            ct.depth_probe = lower_task(count_kernel, count_kernel.tasks[0], local_size=local, features=features,
                                        bounds_check=rt.debug)
            if rt.validate_spirv:
                tools.validate(ct.depth_probe.spirv, kernel_name=f"{kobj.name} ({task.name} depth probe)")
        tasks.append(ct)
    probes = [(t.source, t.count_kernel[0]) for t in ir.tasks if getattr(t, "count_kernel", None) is not None]
    derivative = "reverse" if mode.startswith("reverse") else "dual" if mode == "dual" else None
    facts = array_facts(forward, ir, derivative, probes)
    return CompiledKernel(ir, bindings, captured, tasks, getattr(ir, "check_plan", None), facts)

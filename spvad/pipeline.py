"""The compile pipeline: a Python function and its argument specs -> a compiled kernel.

    frontend -> passes (runtime-indexed locals, in-kernel derivatives, simplify, loop exits, the derivative
              of `mode`, simplify) -> lowering -> validation

Everything a launch needs comes back in the CompiledKernel: the tasks' code, the check plan of a checked
build, the depth probes of data-dependent adstacks, what a launch writes and reads. Nothing here touches a
device: a `Target` says what the code is for (SPIR-V for Vulkan and Metal, or IR for the interpreter).
"""
import functools
from dataclasses import dataclass, field, replace
from typing import ClassVar, Optional

from .autodiff.array_states import ArrayFacts, array_facts
from .autodiff.dual import dual_task
from .autodiff.extremum_ties import TieScratch
from .autodiff.inline_derivatives import expand_derivatives
from .autodiff.launch_states import keep_launch_states
from .autodiff.loop_exits import eliminate_loop_exits
from .autodiff.reverse import reverse_task
from .autodiff.store_or_recompute import store_or_recompute
from .autodiff.validation import instrument
from .errors import CompileError, SpvadError
from .ir import nodes as N
from .ir import simplify, verify
from .ir.batching import batch_kernel
from .ir.deep_stack import call_with_deep_stack
from .frontend import ArraySpec, build_kernel
from .frontend.random_numbers import RANDOM_KEY
from .ir.interp import eval_num_threads
from .ir.thread_count import build_count_kernel, counts_on_device, header_loads
from .ir.libm.expand import expand_math
from .ir.licm import hoist_loop_invariants
from .ir.locals import forward_locals
from .ir.slot_arrays import expand_slot_arrays, expand_small_slot_arrays
from .spirv import tools
from .spirv.lower import LOOP_CHECK_SPEC_ID, lower_task
from .spirv.loop_cap import LoopCheck
from .spirv.lower_adstack import FUNCTION, stack_shapes


@dataclass(frozen=True)
class Mode:
    """What to compile: the kernel itself (`primal`), its reverse-mode gradient (`reverse`), its
    forward-mode derivative (`dual`), or the primal instrumented to catch overwritten reads (`checked`)."""
    kind: str = "primal"
    aliased: bool = False         # a buffer is bound twice (kernel.shares_buffers): reverse, updates stay
                                  # atomic; primal, no depth probe sizes in-kernel derivatives' stacks;
                                  # both, a write may change any array of its dtype (ir/nodes.may_write)
    alias: Optional[tuple] = None  # checked: alias[k] = the first array sharing array k's buffer
    batch: Optional[tuple] = None  # sp.vmap: in_axes per parameter (0 or None); the specs are then the batched
                                   # arguments' (instance_specs)
    KINDS: ClassVar[tuple] = ("primal", "reverse", "dual", "checked")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise SpvadError(f"unknown compile mode {self.kind!r}; expected one of {', '.join(self.KINDS)}")

    @property
    def distinct(self):
        """Whether the launches of this build bind a buffer of their own to every array and companion, so a
        write changes only the array it names (primal and reverse builds are chosen per launch for that)."""
        return self.kind in ("primal", "reverse") and not self.aliased

    @property
    def derivative(self):
        """"reverse", "dual" or None: which derivative the compiled kernel computes."""
        return self.kind if self.kind in ("reverse", "dual") else None


PRIMAL, REVERSE, DUAL = Mode(), Mode("reverse"), Mode("dual")


@dataclass(frozen=True)
class Target:
    """What the code is for: `code` "spirv" (Vulkan, Metal) or "ir" (the interpreter backend), the device's
    features (sorted (name, value) pairs) and workgroup width, and the build's checks."""
    code: str = "spirv"
    features: tuple = ()
    local_size: int = 128
    bounds_check: bool = False   # sp.init(debug=True): every global access checks its indices
    validate: bool = False       # spirv-val every module; verify the IR after every pass
    skip: tuple = ()             # optimiser passes left out (names of OPTIMISE)
    fast_math: bool = True       # False: float operations exact as written (spirv/module.py FLOAT_ARITHMETIC)
    native_math: bool = False    # True: transcendentals are the driver's (GLSL.std.450), not ir/libm's expansions


@dataclass(eq=False)
class CompiledTask:
    """A lowered task. `lowered` keeps every adstack in Function scope and binds no addressed buffer; other
    stack homes (chosen at launch, once capacities are known) and bindings of addressed buffers (arrays past
    the device's largest binding) are lowered on first use by `relower` and kept in `variants`."""
    task: N.Task
    lowered: object
    kernel_name: str
    relower: object = None       # (homes, addressed) -> LoweredTask of another variant
    stack_sizes: object = None   # autodiff.adstack.StackSizer of a gradient task with adstacks
    depth_probe: object = None   # lowered counting task measuring data-dependent loop depths, or None
    depth_words: int = 0         # counters the depth probe writes
    thread_count: object = None  # a count read from arrays: the lowered task computing its dispatch's
                                 # groups on the device (ir/thread_count.py), else None
    variants: dict = field(default_factory=dict)   # homes tuple [, addressed bindings] -> LoweredTask
    probe_relower: object = None   # addressed bindings -> the depth probe lowered for them

    def __post_init__(self):
        self.variants[(FUNCTION,) * len(self.lowered.adstacks)] = self.lowered
        self.stack_shapes = stack_shapes(self.task) if self.lowered.adstacks else []

    def num_threads(self, scalars, shapes):
        """Threads of a launch: the task header evaluated on the host, memoised per scalars and shapes (a
        count read from arrays: launch.device_count)."""
        assert self.thread_count is None, "a thread count read from arrays is known on the device only"
        cache = self.__dict__.setdefault("_threads", {})
        # only the scalars the header reads: a random key differs every launch (frontend/random_numbers.py)
        key = (tuple(scalars[i] for i in self.header_scalars), tuple(shapes))
        n = cache.get(key)
        if n is None:
            if len(cache) > 256:
                cache.clear()
            n = cache[key] = eval_num_threads(self.task, scalars, shapes)
        return n

    @functools.cached_property
    def header_scalars(self):
        """Indices of the scalar arguments the thread count depends on."""
        return sorted({s.param.index for s in self.task.header.stmts if isinstance(s, N.ScalarArg)})

    def spec_constants(self, scalars, shapes, num_threads):
        """What a launch specialises (spec id -> value), or None: adstack capacities known once the launch's
        scalars and shapes are, and a loop-cap check turned off (spirv/loop_cap.py)."""
        sizer, check = self.stack_sizes, self.loop_check
        spec = sizer.spec_constants(scalars, shapes, num_threads) if sizer and sizer.launch_bounds else None
        if check is not None and not check.needed(scalars, shapes, num_threads):
            spec = {**spec, LOOP_CHECK_SPEC_ID: 0} if spec else {LOOP_CHECK_SPEC_ID: 0}
        return spec

    @functools.cached_property
    def loop_check(self):
        """spirv.loop_cap.LoopCheck when the module checks the driver's loop cap, else None."""
        low = self.lowered
        return LoopCheck(self.task, low.cas_atomics) if LOOP_CHECK_SPEC_ID in (low.spec_ids or ()) else None

    def variant(self, homes, addressed=frozenset()):
        key = (homes, addressed) if addressed else homes
        low = self.variants.get(key)
        if low is None:
            low = self.variants[key] = self.relower(homes, addressed)
        return low

    def probe_variant(self, addressed):
        """The depth probe for launches whose `addressed` bindings hold addressed buffers."""
        if not addressed:
            return self.depth_probe
        probes = self.__dict__.setdefault("_probes", {})
        if addressed not in probes:
            probes[addressed] = self.probe_relower(addressed=addressed)
        return probes[addressed]


@dataclass(eq=False)
class CompiledKernel:
    ir: N.Kernel
    param_bindings: list
    captured: list               # (ArrayParam, GlobalName, array type): what a launch looks up for its arrays
    tasks: list
    check_plan: object = None    # mode "checked": the access checker's extra arrays
    facts: ArrayFacts = ArrayFacts()   # what a launch writes and (derivatives) which array contents it reads
    distinct: tuple = ()   # (array index, array index, message): never one ndarray for both (N.Kernel.distinct)


def compile_kernel(fn, specs, mode, target, ad_stack_size=None, name=None):
    """Compile `fn` for argument `specs` (frontend ArraySpec / VectorArgSpec / DType per parameter)."""
    name = name or fn.__name__
    return nested_safely(name, _compile_kernel, fn, specs, mode, target, ad_stack_size, name)


def nested_safely(kernel_name, fn, *args):
    """fn(*args); past the recursion limit (code nesting hundreds of levels: the frontend, passes and lowering
    recurse per level), again on a deep stack (ir/deep_stack.py), and past that a CompileError, never a
    RecursionError. Compiling and lowering change nothing outside what they return, so they can run again."""
    try:
        return fn(*args)
    except RecursionError:
        pass   # (retried outside the handler: its traceback holds a thousand frames)
    try:
        return call_with_deep_stack(fn, *args)
    except RecursionError as e:
        raise CompileError(f"kernel {kernel_name}: an expression (or `if`) is nested too deeply to compile ({e}); "
                           "split it into several statements") from None


def _compile_kernel(fn, specs, mode, target, ad_stack_size, name):
    if mode.batch:   # sp.vmap: the kernel for one instance, then B of them in one launch
        primal, bindings, captured = build_kernel(fn, instance_specs(specs, mode.batch))
        primal, bindings = batch_kernel(primal, bindings, mode.batch, keys=(RANDOM_KEY,))
    else:
        primal, bindings, captured = build_kernel(fn, specs)
    refuse_deep_control_flow(primal, name)
    distinct = primal.distinct + refuse_rewritten_counts(primal)
    ir, check_plan = run_passes(primal, mode, ad_stack_size, target.validate, target.skip, target.native_math)
    tasks = [compile_task(ir, task, target, name) for task in ir.tasks]
    probes = [(t.task.source, t.task.depth_probe[0]) for t in tasks if t.depth_probe is not None]
    facts = array_facts(primal, ir, mode.derivative, probes)
    return CompiledKernel(ir, bindings, captured, tasks, check_plan, facts, distinct)


def instance_specs(specs, in_axes):
    """The specs of one instance of an sp.vmap launch: a batched ndarray's without its leading axis; a batched
    scalar (an ArraySpec of ndim 0 among the batched specs: its values come in a 1-D ndarray) its dtype."""
    return [s if axis is None else s.dtype if s.ndim == 0 else
            ArraySpec(s.dtype, s.ndim - 1, s.needs_grad, s.needs_dual) for s, axis in zip(specs, in_axes)]


# The optimiser's IR passes: name -> (pass before autodiff, pass after it), each Kernel -> Kernel. A primal
# compile runs only the second form (no derivative follows).
OPTIMISE = {
    "locals": (lambda k, distinct: forward_locals(k),) * 2,
    "licm": (lambda k, distinct: hoist_loop_invariants(k, distinct=distinct),
             lambda k, distinct: hoist_loop_invariants(k, guard_loads=True, distinct=distinct)),
}
# What SPVAD_SKIP_PASSES can leave out (to measure what each buys; part of the cache key): the IR passes,
# store or recompute (gradient kernels, autodiff/store_or_recompute.py), four elements per thread for
# elementwise tasks and vector views of vector / matrix elements (lowering, spirv/lower_coarse.py and
# spirv/lower_vectors.py).
PASSES = (*OPTIMISE, "store", "coarsen", "vectors")


def optimiser(phase, skip=(), distinct=False):
    """The optimiser's passes of `phase` (0: before autodiff, 1: after), then simplify; `distinct`: Mode.distinct."""
    return [functools.partial(passes[phase], distinct=distinct) for name, passes in OPTIMISE.items()
            if name not in skip] + [functools.partial(simplify.simplify, distinct=distinct)]


def run_passes(kernel, mode, ad_stack_size=None, verify_each=False, skip=(), native_math=False):
    """The passes of `mode`, in order; returns (kernel, check plan of a checked build or None). Last, unless
    `native_math`, the math library's expansions (after autodiff: derivatives keep the Op-level rules)."""
    # in-kernel derivatives (sp.grad & co) first: every later pass, kernel-level autodiff too, sees plain IR;
    # before them, runtime-indexed locals become selects wherever a derivative will be taken
    distinct = mode.distinct
    steps = [lambda k: expand_derivatives(k, mode.kind == "primal", ad_stack_size, probe=not mode.aliased),
             functools.partial(simplify.simplify, distinct=distinct), eliminate_all_loop_exits]
    if mode.kind != "primal" or any(isinstance(s, N.Derivative) for t in kernel.tasks for s in N.walk(t.body)):
        steps.insert(0, expand_slot_arrays)
    else:   # small groups run faster as selects (ir/slot_arrays.py)
        steps.insert(0, expand_small_slot_arrays)
    plan = []
    if mode.kind == "reverse":
        steps += optimiser(0, skip, distinct) + [lambda k: reverse_kernel(k, ad_stack_size, not mode.aliased)]
        steps += optimiser(1, skip, distinct)
        if "store" not in skip:   # leaves nothing for simplify: it drops what it replaces, reuses what exists
            steps.append(store_or_recompute)
    elif mode.kind == "dual":
        steps += optimiser(0, skip) + [dual_kernel] + optimiser(1, skip)
    elif mode.kind == "primal":   # no derivative follows: the passes' last form at once
        steps += optimiser(1, skip, distinct)
        if "store" not in skip:   # adstacks of in-kernel derivatives in reverse mode
            steps.append(store_or_recompute)
    elif mode.kind == "checked":
        steps += optimiser(0, skip)
        steps.append(lambda k: _keep(instrument(k, list(mode.alias) if mode.alias else None), plan))
    if not native_math:
        steps.append(expand_math)
    if verify_each:
        verify.verify(kernel)
    for step in steps:
        kernel = step(kernel)
        if verify_each:
            verify.verify(kernel)
    return kernel, (plan[0] if plan else None)


def _keep(result, plan):
    kernel, p = result
    plan.append(p)
    return kernel


def eliminate_all_loop_exits(kernel):
    for task in kernel.tasks:
        eliminate_loop_exits(task)
    return kernel


def reverse_kernel(kernel, ad_stack_size, thread_private=True):
    """The gradient kernel: each task's gradient tasks, in reverse task order. `thread_private`: plain
    (non-atomic) gradient updates are allowed where indices differ per thread (no aliased arguments)."""
    scratch = TieScratch(list(kernel.arrays))
    tasks = []
    for i in reversed(range(len(kernel.tasks))):
        grads = reverse_task(kernel, kernel.tasks[i], {"ad_stack_size": ad_stack_size}, scratch, thread_private)
        for g in grads:
            g.source = i
        tasks += grads
    if thread_private:   # (one ndarray bound to two parameters: a copy of each could not stay one array)
        tasks = keep_launch_states(kernel, tasks, scratch)
    for t in tasks:   # a depth probe binds its counters after every array of the launch, scratch included
        if t.depth_probe is not None:
            probe = t.depth_probe[0]
            counters = probe.arrays[-1]
            counters.index = len(scratch.arrays)
            probe.arrays = scratch.arrays + [counters]
    return N.Kernel(kernel.name + "_grad", scratch.arrays, kernel.scalars, tasks, kernel.filename,
                    tuple(scratch.targets))


def dual_kernel(kernel):
    """The forward-mode kernel: primal and dual values of every task, in task order."""
    scratch = TieScratch(list(kernel.arrays))
    tasks = [d for t in kernel.tasks for d in dual_task(kernel, t, scratch)]
    return N.Kernel(kernel.name + "_fwd", scratch.arrays, kernel.scalars, tasks, kernel.filename,
                    tuple(scratch.targets))


class Lowering:
    """Lowers one task of a kernel for a target and a stack-home assignment (validated when the target
    says so); picklable, so compiled kernels can go to the disk cache."""

    def __init__(self, kernel, task, target, kernel_name):
        self.kernel, self.task, self.target, self.kernel_name = kernel, task, target, kernel_name

    @property
    def validate(self):
        return self.target.validate

    @validate.setter
    def validate(self, on):   # a kernel loaded from the disk cache validates what it lowers later too
        self.target = replace(self.target, validate=on)

    def __call__(self, homes=None, addressed=frozenset()):
        return nested_safely(self.kernel_name, self._lower, homes, addressed)   # (also at launch: a variant)

    def _lower(self, homes, addressed):
        t = self.target
        local = 1 if self.task.kind == "serial" else t.local_size
        if t.code == "ir":   # (the interpreter backend's lowering: imported when it is used)
            from .rhi.interp.program import lower_for_interp
            return lower_for_interp(self.kernel, self.task, local_size=local, homes=homes)
        low = lower_task(self.kernel, self.task, local_size=local, features=dict(t.features), homes=homes,
                         bounds_check=t.bounds_check, coarsen="coarsen" not in t.skip, fast_math=t.fast_math,
                         addressed=addressed, vectors="vectors" not in t.skip)
        if t.validate:   # a coarsened task's second module (its last n % 4 elements) reaches the driver too
            for module in (low, low.tail) if low.tail is not None else (low,):
                tools.validate(module.spirv, kernel_name=f"{self.kernel_name} ({self.task.name})")
        return low


def compile_task(ir, task, target, kernel_name):
    lower = Lowering(ir, task, target, kernel_name)
    low = lower()
    if not low.adstacks:   # the optimiser dropped every stack (none was read): nothing to size
        task.stack_sizes = task.depth_probe = None
    ct = CompiledTask(task, low, kernel_name, relower=lower, stack_sizes=task.stack_sizes)
    if task.depth_probe is not None:
        count_kernel, ct.depth_words = task.depth_probe
        ct.probe_relower = Lowering(count_kernel, count_kernel.tasks[0], target, kernel_name)
        ct.depth_probe = ct.probe_relower()
    if counts_on_device(task):   # every stack-home variant has the same width and elements per thread
        count_kernel = simplify.simplify(build_count_kernel(ir, task, low.local_size, low.per_thread))
        if target.validate:
            verify.verify(count_kernel)
        # it checks its loads itself, always (so it needs no flag buffer)
        ct.thread_count = Lowering(count_kernel, count_kernel.tasks[0], replace(target, bounds_check=False),
                                   kernel_name)()
    return ct


# The deepest nesting of ifs and loops a kernel may have (a chain `a if c else b if ...` or `p and q and ...` nests
# one if per term): SPIR-V allows 1,023 levels of structured control flow, which the lowering's own constructs
# (loop flags, bounds checks) take from, and the gradient of such a chain replays each level's inner ones, so its
# compile grows with the cube of the depth (measured: 0.4 s at 50 levels, 3 s at 100, 27 s at 200).
MAX_CONTROL_NESTING = 128


def refuse_deep_control_flow(kernel, kernel_name):
    """A CompileError, naming the line, when ifs and loops nest past MAX_CONTROL_NESTING (walked in a loop)."""
    for task in kernel.tasks:
        pending = [(task.body, 0)]
        while pending:
            block, depth = pending.pop()
            for s in block.stmts:
                if not s.BLOCK_FIELDS:
                    continue
                if depth == MAX_CONTROL_NESTING:
                    loc = s.loc
                    text = loc.source.strip() if loc else ""
                    raise CompileError(
                        f"kernel {kernel_name}: ifs and loops nested too deeply (more than {MAX_CONTROL_NESTING} "
                        "levels; a chain `a if c else b if ...` or `p and q and ...` nests one if per term): "
                        "split it into several statements, or choose with sp.select", loc and loc.filename,
                        loc and loc.lineno, text[:120] + (" ..." if len(text) > 120 else ""))
                pending.extend((b, depth + 1) for b in s.blocks())


def refuse_rewritten_counts(kernel):
    """A parallel loop whose bounds read an array element it also writes: Python evaluates range() once,
    before the loop, but the loop's threads read the bounds while others write them. Returns the pairs
    (bound array, written array, message) that a launch must not bind to one ndarray."""
    pairs = {}
    for task in kernel.tasks:
        written = {s.array.index: s.array for s in N.walk(task.body) if type(s).WRITES_ARRAY and s.field == "primal"}
        for load in header_loads(task):
            a, loc = load.array, load.loc
            if a.index in written:
                raise CompileError(
                    f"this parallel loop's bounds read '{a.name}', which the loop writes: its threads "
                    "would read the bounds while others change them; copy the bound to another array (or a "
                    "scalar argument) before the loop", loc and loc.filename, loc and loc.lineno, loc and loc.source)
            for w in written.values():   # another parameter, which the same ndarray may be bound to
                if (w.dtype, w.ndim) == (a.dtype, a.ndim):
                    pairs.setdefault((a.index, w.index), (
                        f"kernel {kernel.name}: one ndarray is bound to both '{a.name}' and '{w.name}', but the "
                        f"parallel loop at line {loc.lineno if loc else '?'} reads its bounds from '{a.name}' and "
                        f"writes '{w.name}': its threads would read the bounds while others change them; pass two "
                        "different ndarrays"))
    return tuple((i, j, why) for (i, j), why in pairs.items())

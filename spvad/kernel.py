"""`@sp.kernel` and `@sp.func`: argument checking, specialisation per argument types, compile cache, launch."""
import functools
import os
import weakref

import numpy as np

from . import arguments, cache, recording, runtime
from . import types as T
from .autodiff.validation import violation_check
from .errors import ArgumentError, AutodiffRuleError, CompileError, SpvadError
from .frontend import ArraySpec, TemplateSpec
from .frontend.random_numbers import launch_key, random_key_index
from .ir.printer import format_kernel
from .frontend.source import FunctionSource
from .launch import BoundReplay, Replay, launch
from .launch.global_names import binds, captured_now, note_rebound
from .lang import Array
from .ndarray import Ndarray, from_numpy
from .pipeline import DUAL, PASSES, PRIMAL, REVERSE, Mode, Target, compile_kernel
from .spirv import tools


class Func:
    """`@sp.func`: a helper inlined into kernels (may return values)."""
    _spvad_func = True

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._source = None

    def source(self):
        if self._source is None:
            self._source = FunctionSource.of(self.fn)
        return self._source

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __get__(self, obj, cls=None):   # a method of a class, called from Python (kernels bind it themselves)
        return self if obj is None else functools.partial(self.fn, obj)


def func(fn):
    return Func(fn)


def _with_numpy_arrays(kernel, args):
    """A launch with numpy arrays for `sp.Array` parameters, as Taichi takes them: each is copied into a new
    ndarray (sp.from_numpy's dtype) and the ndarray's contents back into it after the launch. False: no
    argument was one (the launch is the caller's)."""
    args, copies = list(args), []
    for k, ((name, ann), a) in enumerate(zip(kernel.params, args)):
        if ann is Array and type(a) is np.ndarray:
            try:
                args[k] = from_numpy(a)
            except ArgumentError as e:
                raise ArgumentError(f"kernel {kernel.name}: numpy argument '{name}': {e}") from None
            copies.append((name, a, args[k]))
    if not copies:
        return False
    kernel(*args)
    for name, host, dev in copies:
        new = dev.to_numpy()
        if host.flags.writeable:
            host[...] = new
        elif not np.array_equal(new, host):   # never a silently lost write
            raise ArgumentError(f"kernel {kernel.name} wrote into argument '{name}', a read-only numpy array; "
                                "pass a writeable copy (np.array(a)) or an sp.ndarray")
    return True


class Kernel:
    """A compiled-on-demand kernel. Call it to launch; `.grad`/`.fwd` launch its derivatives."""
    _spvad_kernel, bound_to = True, None   # bound_to: the instance of a method (`obj.step`)

    def __get__(self, obj, cls=None):
        """`obj.step`: the kernel with `self` bound to `obj` (a @sp.data_oriented class), one per instance."""
        if obj is None or self.bound_to is not None:
            return self
        return arguments.bound_method(self, obj, lambda: Kernel(self.fn, self.ad_stack_size, self.fast_math,
                                                                   self.native_math))

    def __init__(self, fn, ad_stack_size=None, fast_math=None, native_math=None):
        self.fn = fn
        self.name = fn.__name__
        self.ad_stack_size = runtime.checked_ad_stack_size(ad_stack_size, "@sp.kernel")   # None: sp.init's
        self.fast_math = runtime.checked_fast_math(fast_math, "@sp.kernel")   # None: sp.init's
        self.native_math = runtime.checked_fast_math(native_math, "@sp.kernel", "native_math")   # likewise
        functools.update_wrapper(self, fn)
        self.params = arguments.parameters(fn, self.name)
        self._cache = {}           # options key -> compiled variants, one per type of the ndarrays its
        #                            global names refer to (a name re-bound to another type compiles again)
        self._replay = None        # the last launch, repeated as is when called again with the same objects
        self._grad_replay = None   # the last gradient launch, likewise
        self._random_key = None    # (runtime serial, key) of the latest forward launch drawing random numbers
        self._globals_seen = None  # (runtime serial, cache.global_values) at the first compile that succeeded
        self.tape_recipes = {}     # what a Tape works out once per compiled kernel and arguments (tape.Recipe)
        # a kernel dropped by its program takes its pipelines and per-task buffers with it
        weakref.finalize(self, _release_compiled, self._cache)

    # ---- argument checking and specialisation (arguments.py) ----
    def _positional(self, args, kwargs):
        return arguments.positional(self.name, self.params, args, kwargs)

    def _bind(self, args):
        """Check arguments before anything reaches the device; returns (spec key, arrays, scalars)."""
        if self.bound_to is not None:   # a method: `self`, a compile-time object, first (arguments.bound_method)
            return arguments.bind(self.name, self.method_params, (self.bound_to, *args))
        return arguments.bind(self.name, self.params, args)

    def _compiled(self, specs, mode=PRIMAL, features=None, captured=None):
        """The compiled specialisation for `specs` and `mode` (pipeline.Mode); `features` = a features
        dict overriding the device's (e.g. Metal's, for kernel.msl). Its global ndarray names must refer to
        ndarrays of the types it was compiled for: now, or in `captured` (the objects a recorded launch
        bound, for its gradient)."""
        rt = runtime.get()
        mode = Mode(mode) if isinstance(mode, str) else mode   # a kind's name: "primal", "reverse", ...
        skip = skipped_passes()
        fast_math = rt.fast_math if self.fast_math is None else self.fast_math   # the kernel's option wins
        native_math = rt.native_math if self.native_math is None else self.native_math
        key = (tuple(s if isinstance(s, T.DType) else s.key if isinstance(s, TemplateSpec) else
                     (s.dtype, s.ndim, s.needs_grad, s.needs_dual) for s in specs), mode,
               self.ad_stack_size or rt.ad_stack_size,
               tuple(sorted(features.items())) if features else None, skip, fast_math, native_math, rt.debug,
               rt.serial)
        variants = self._cache.get(key, ())
        for ck in variants:
            if binds(ck, captured):
                return ck
        values = self._check_globals(rt)
        info = rt.device.info
        target = Target(code=rt.code, features=tuple(sorted((features or info["features"]).items())),
                        local_size=info.get("preferred_local_size", 128), bounds_check=rt.debug,
                        validate=rt.validate_spirv, skip=skip, fast_math=fast_math, native_math=native_math)
        disk_key = None
        if rt.code == "spirv" and cache.cache_dir() is not None and not any(   # the interpreter's are made
                isinstance(s, TemplateSpec) and s.by_identity for s in specs):     # afresh
            # (the fingerprint in it describes what the global names refer to now)
            disk_key = cache.entry_key(self, key[:-1], (list(target.features), target.local_size, rt.debug))
        ck = cache.load_compiled(disk_key, self, rt)
        if ck is None:
            try:
                ck = compile_kernel(self.fn, specs, mode, target,
                                    self.ad_stack_size if self.ad_stack_size is not None else rt.ad_stack_size,
                                    self.name)
            except CompileError as e:
                raise note_rebound(e, self.name, variants) from None
            cache.store_compiled(disk_key, ck, self.fn)
        if not binds(ck, captured):   # a recorded launch's arrays, and its names bound to others since
            raise AutodiffRuleError(f"kernel {self.name}: a global name it reads was bound to an ndarray of "
                                    "another type after a recorded launch; its gradient cannot be compiled")
        self._cache.setdefault(key, []).append(ck)
        if self._globals_seen is None or self._globals_seen[0] != rt.serial:
            self._globals_seen = (rt.serial, values)
        return ck

    def _check_globals(self, rt):
        """What the kernel's names resolve to now (cache.global_values). Its compiled launches keep the
        module-level values they were compiled with, as Taichi's do; a variant compiled after one changed (a
        gradient, a forward-mode launch, another dtype) would disagree with them, e.g. a loss from the old
        value and its gradient from the new one: refused, naming what changed."""
        try:
            now = cache.global_values(self.fn)
        except Exception:   # (describing an object ran code that failed: nothing to compare by)
            return None
        seen = self._globals_seen
        if seen is None or seen[0] != rt.serial or seen[1] is None:
            return now
        # (a name that referred to an ndarray is looked up at each launch: launch/global_names.py says what
        # it refers to now if that cannot be bound)
        changed = [n for n in sorted(set(seen[1]) | set(now)) if seen[1].get(n) not in (now.get(n), "ndarray")]
        if changed:
            raise CompileError(
                f"kernel {self.name}: {', '.join(changed)} changed since the kernel was first compiled. Its "
                "compiled launches keep the values they were compiled with (module-level values are "
                "compile-time constants, as in Taichi), and a launch compiled now for other types or another "
                "mode (a gradient, forward mode) would use the new ones and disagree with them. Define the "
                "kernel again after changing them (re-run its definition), or pass such values as arguments")
        return now

    def captured_now(self, ck):
        """The ndarrays a launch of `ck` binds for its global names: those the names refer to now."""
        return captured_now(self.name, ck)

    # ---- launch ----
    def __call__(self, *args, **kwargs):
        if kwargs:   # before the fast path, which compares positional arguments
            args = self._positional(args, kwargs)
        if np.ndarray in map(type, args) and _with_numpy_arrays(self, args):
            return
        with runtime.LOCK:
            modes = recording.modes
            if modes.fwd:
                return self._launch_dual(modes.fwd[-1], args)
            tapes = modes.tapes
            recorder = tapes[-1] if tapes else None
            fast = self._replay
            if fast is not None and (recorder is None or not recorder.validation or not recording.validating(self)):
                scalars = fast.new_scalars(self, args)   # the recorded list itself for the very same objects
                if scalars is not None and (scalars is fast.scalars or fast.threads_fixed or
                                            fast.same_threads(scalars)) and (   # a method's self: the same numbers
                        self.bound_to is None or fast.bound_key == arguments.method_key(self.bound_to)):
                    if fast.draws_random:   # a new list: run() packs the push constants again
                        scalars = self._fresh_random_key(fast.ck, scalars)
                    entry = recorder and recorder.before_launch(self, fast.specs, fast.arrays(args),
                                                                fast.captured(), scalars, fast.ck, fast)
                    fast.run(args, scalars)
                    if entry and entry.post:
                        recorder.after_launch(entry)
                    return
            self._launch(args, recorder)

    def _launch(self, args, recorder):
        """A launch off the fast path: check and bind everything, compile if needed, record a replay."""
        specs, arrays, scalars = self._bind(args)
        ck = self._compiled(specs)
        captured = self.captured_now(ck)
        if shares_buffers(arrays + captured):   # one buffer under two names: a write to one changes the other
            ck = self._compiled(specs, ALIASED)   # (and a depth probe, run without the launch's writes, sizes
                                                  # nothing there)
        scalars = self._fresh_random_key(ck, scalars)   # a Tape's entry keeps it for the gradient
        entry = recorder and recorder.before_launch(self, specs, arrays, captured, scalars, ck)
        if recorder is not None and recording.validating(self):
            self._checked_launch(specs, arrays, captured, scalars)
        else:
            records = launch(ck, arrays + captured, scalars)
            immutable = all(isinstance(a, (int, float, bool, np.generic)) or getattr(a, "_spvad_ndarray", False)
                            for a in args)   # a 0-d numpy array or a list could change in place
            bound = self.bound_to is not None   # a method: replayed while `self` holds the same numbers
            self._replay = Replay(args, specs[bound:], scalars, records, ck, captured) \
                if records is not None and immutable else None
            if bound and self._replay is not None:
                self._replay.specs, self._replay.bound_key = specs, specs[0].key
        if entry and entry.post:
            recorder.after_launch(entry)

    def _launch_dual(self, mode, args):
        """A launch inside sp.FwdMode: the dual (forward-mode) kernel, after temporary .dual companions where the
        derivative would otherwise stop."""
        specs, arrays, scalars = self._bind(args)
        specs, ck = self.derivative_with_companions(specs, arrays, DUAL, mode.give_dual)
        everything = arrays + self.captured_now(ck)
        mode.prepare(everything)
        launch(ck, everything, self._fresh_random_key(ck, scalars))

    def _checked_launch(self, specs, arrays, captured, scalars):
        """Run the instrumented variant that detects a read element being overwritten (debug only)."""
        everything = arrays + captured
        # one ndarray bound to several parameters shares one marker (`k(x, x)` reading one, writing other)
        first = {}
        alias = [first.setdefault(id(a), k) for k, a in enumerate(everything)]
        mode = Mode("checked", alias=None if alias == list(range(len(alias))) else tuple(alias))
        ck = self._compiled(specs, mode)
        plan = ck.check_plan
        if plan is None:
            return launch(ck, everything, scalars)
        markers = [recording.read_marker(everything[k]) for k in plan.marked]
        violations = Ndarray(T.i32, (len(plan.sites),))
        launch(ck, everything, scalars, extra=markers + [violations])
        runtime.get().pending_checks.append(violation_check(self.name, plan, violations, markers))

    # ---- what a Tape asks of a launch ----
    def array_names(self, ck):
        """Parameter names of the ndarrays of a launch: the arguments, then the captured globals."""
        return [p.name for kind, p in ck.param_bindings if kind == "array"] + [p.name for p, _, _ in ck.captured]

    @staticmethod
    def specs_now(specs, arrays):
        """`specs` with each ndarray's companions as they are now (a Tape may have added a .grad)."""
        it, out = iter(arrays), []
        for s in specs:
            if isinstance(s, ArraySpec):
                a = next(it)
                s = ArraySpec(s.dtype, s.ndim, a.grad is not None, a.dual is not None)
            elif hasattr(s, "now"):   # a dataclass's ndarrays (frontend/structs.py)
                s = s.now(it)
            out.append(s)
        return out

    def derivative_with_companions(self, specs, arrays, mode, give):
        """(specs, compiled derivative kernel of pipeline.Mode `mode`) after `give(array, parameter name,
        captured)` added a .grad (.dual) to every array that would carry the derivative without one (`give`
        may raise instead, or add none: the array is a constant of the derivative). Every derivative launch
        (k.grad, k.fwd, Tape, FwdMode) asks here first, so what no launch can compute is refused before
        anything runs."""
        everything = arrays + self.captured_now(self._compiled(specs))
        field = "dual" if mode.kind == "dual" else "grad"
        for _ in range(len(everything) + 1):   # each round adds companions; at most one per array
            specs = self.specs_now(specs, arrays)
            ck = self._compiled(specs, mode)
            missing = [ai for ai in ck.facts.varied_outputs if getattr(everything[ai], field) is None]
            if not missing:
                break
            names = self.array_names(ck)
            for ai in missing:
                give(everything[ai], names[ai], ai >= len(arrays))
            if all(getattr(everything[ai], field) is None for ai in missing):
                break   # `give` keeps them constants of the derivative (sp.Tape(needs_grad_only=True))
        self._refuse_mid_launch_reads(ck)
        return specs, ck

    def _refuse_mid_launch_reads(self, ck):
        """A gradient that would read contents existing only in the middle of the launch: its replay (and
        the depth probe sizing its adstacks) would see other values than the launch did, a wrong number or
        a loop that never ends."""
        if ck.facts.grad_middle:
            name = self.array_names(ck)[ck.facts.grad_middle[0]]
            raise AutodiffRuleError(
                f"kernel {self.name}: its gradient reads '{name}' as it was in the middle of the launch: a loop "
                f"reads elements of '{name}' that an earlier iteration of the same loop wrote and a later one "
                "writes again (or, with one ndarray bound to two of its parameters, that an earlier loop wrote "
                "and a later one overwrites), so neither k.grad (which reads the arrays as they are) nor "
                "sp.Tape (which keeps the contents between launches, and between the loops of a launch) can "
                "provide them. Keep the value in a local variable, or bind distinct ndarrays")

    @staticmethod
    def reverse_mode(everything):
        """One buffer bound twice (shares_buffers): per-thread gradient updates could race, keep atomics."""
        return ALIASED_REVERSE if shares_buffers(everything) else REVERSE

    def fwd(self, *args, **kwargs):
        """Launch the forward-mode derivative: computes the primal outputs and, from the inputs' .dual,
        the outputs' .dual (directional derivatives)."""
        args = self._positional(args, kwargs) if kwargs else args
        with runtime.LOCK:
            specs, arrays, scalars = self._bind(args)
            _, ck = self.derivative_with_companions(specs, arrays, DUAL, self._refuse_missing("dual"))
            launch(ck, arrays + self.captured_now(ck), self._fresh_random_key(ck, scalars))   # new numbers

    def grad(self, *args, **kwargs):
        """Launch the reverse-mode derivative: reads the outputs' .grad, accumulates into the inputs' .grad."""
        args = self._positional(args, kwargs) if kwargs else args
        with runtime.LOCK:
            specs, arrays, scalars = self._bind(args)
            ck = self._compiled(specs)
            captured = self.captured_now(ck)
            everything = arrays + captured
            if all(a.grad is None for a in everything):
                names = self.array_names(ck)
                raise ArgumentError(
                    f"kernel {self.name}: k.grad(...) has nothing to differentiate: none of its arrays "
                    f"({', '.join(repr(n) for n in names) or 'none'}) has a .grad; create the inputs to "
                    "differentiate (and the outputs) with needs_grad=True")
            self.derivative_with_companions(specs, arrays, self.reverse_mode(everything),
                                            self._refuse_missing("grad"))
            self.grad_bound(specs, arrays, self._last_random_key(ck, scalars), captured=captured)

    # ---- sp.random / sp.randn: the hidden key scalar (frontend/random_numbers.py) ----
    def _fresh_random_key(self, ck, scalars):
        """`scalars` and, for a kernel that draws random numbers, a fresh key: every forward launch (plain,
        k.fwd, sp.FwdMode) draws new ones. Remembered for k.grad, which differentiates the latest."""
        at = random_key_index(ck.ir)
        if at is None:
            return scalars
        rt = runtime.get()
        key = launch_key(rt.random_seed, rt.random_launches)
        rt.random_launches += 1
        self._random_key = (rt.serial, key)
        return _with_key(scalars, at, key)

    def _last_random_key(self, ck, scalars):
        """`scalars` and, for a kernel that draws random numbers, the key of its latest forward launch."""
        at = random_key_index(ck.ir)
        if at is None:
            return scalars
        serial, key = self._random_key or (None, None)
        if serial != runtime.get().serial:
            raise AutodiffRuleError(
                f"kernel {self.name} draws random numbers (sp.random/sp.randn) and k.grad differentiates its "
                "latest forward launch, with that launch's numbers, but it has not been launched since "
                "sp.init(); launch it first (or record the launches with sp.Tape)")
        return _with_key(scalars, at, key)

    def _refuse_missing(self, what):
        """For derivative_with_companions outside a Tape / FwdMode: an output without a .grad (.dual) whose
        values depend on inputs that have one is an error, since the derivative would silently stop there."""
        def refuse(array, name, captured):
            raise ArgumentError(
                f"kernel {self.name}: output '{name}' has no .{what} but its values depend on "
                f"needs-{what} inputs, so their derivatives would silently miss what flows through it; create "
                f"it with needs_{what}=True (or use sp.{'FwdMode' if what == 'dual' else 'Tape'}, which adds a "
                "temporary one)")
        return refuse

    def grad_bound(self, specs, arrays, scalars, views=None, captured=None):
        """`grad` with arguments already checked (a Tape replaying what it recorded). `views`: array index ->
        StateView, binding contents a Tape kept instead of the array's current ones; `captured`: the ndarrays
        the launch bound for its global names (default: those they refer to now)."""
        if captured is None:
            captured = self.captured_now(self._compiled(specs))
        everything = arrays + captured
        fast = self._grad_replay
        if fast is not None and fast.rerun(specs, everything, scalars, views):
            return
        ck = self._compiled(specs, self.reverse_mode(everything), captured=captured)
        records = launch(ck, everything, scalars, views=views)
        self._grad_replay = BoundReplay(specs, everything, records, ck, views) if records is not None else None

    def spirv(self, *args, grad=False, **kwargs):
        args = self._positional(args, kwargs) if kwargs else args
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            mods = [t.lowered.spirv for t in self._compiled(specs, REVERSE if grad else PRIMAL).tasks]
        return mods[0] if len(mods) == 1 else mods

    def disassemble(self, *args, grad=False, **kwargs):
        mods = self.spirv(*args, grad=grad, **kwargs)
        mods = [mods] if isinstance(mods, bytes) else mods
        return "\n".join(tools.disassemble(m) for m in mods)

    def msl(self, *args, grad=False, **kwargs):
        """Metal Shading Language for these argument types (SPIR-V compiled for Metal's features, translated
        by SPIRV-Cross); one string per task, joined."""
        from .rhi.metal.translate import METAL_FEATURES, translate   # (not imported on other platforms)
        args = self._positional(args, kwargs) if kwargs else args
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            ck = self._compiled(specs, REVERSE if grad else PRIMAL, features=METAL_FEATURES)
        return "\n".join(translate(t.lowered, t.task.name).source for t in ck.tasks)

    def ir(self, *args, grad=False, **kwargs):
        args = self._positional(args, kwargs) if kwargs else args
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            return format_kernel(self._compiled(specs, REVERSE if grad else PRIMAL).ir)


ALIASED, ALIASED_REVERSE = Mode("primal", aliased=True), Mode("reverse", aliased=True)


def shares_buffers(arrays):
    """Whether a launch binding `arrays` (and their .grad / .dual) could bind one buffer twice: an ndarray
    bound to two parameters, or one's .grad or .dual bound as another. Builds for launches that do not
    (pipeline.Mode.distinct) let a write change only the array it names."""
    seen = set()
    for a in arrays:
        for b in (a, a.grad, a.dual):
            if b is not None:
                if id(b) in seen:
                    return True
                seen.add(id(b))
    return False


def _with_key(scalars, at, key):
    """The launch's scalars with `key` at index `at`: appended to the arguments' values, or replacing the
    key a replayed launch's scalars hold."""
    return [*scalars[:at], key, *scalars[at + 1:]]


_skipped = ("", ())   # SPVAD_SKIP_PASSES as last read, and its names: every compiled-kernel lookup asks


def skipped_passes():
    """Optimiser passes SPVAD_SKIP_PASSES leaves out (comma-separated names of pipeline.PASSES)."""
    global _skipped
    text = os.environ.get("SPVAD_SKIP_PASSES", "")
    if text != _skipped[0]:
        names = tuple(sorted(n for n in text.split(",") if n))
        unknown = [n for n in names if n not in PASSES]
        if unknown:
            raise SpvadError(f"SPVAD_SKIP_PASSES: unknown pass {unknown[0]!r}; the passes are {', '.join(PASSES)}")
        _skipped = (text, names)
    return _skipped[1]


def _release_compiled(compiled):
    """Free what the current runtime holds for these compiled kernels (a kernel object went away)."""
    rt = runtime.current()
    if rt is not None:
        with runtime.LOCK:
            rt.release_tasks({id(ct) for variants in compiled.values() for ck in variants for ct in ck.tasks})


def kernel(fn=None, *, ad_stack_size=None, fast_math=None, native_math=None):
    if fn is None:
        return lambda f: Kernel(f, ad_stack_size, fast_math, native_math)
    return Kernel(fn, ad_stack_size, fast_math, native_math)

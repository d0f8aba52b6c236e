"""`@sp.kernel` and `@sp.func`: argument checking, specialisation per argument types, compile cache, launch."""
import functools
import inspect
import struct
import weakref

import numpy as np

from . import cache, recording, runtime, tape
from . import types as T
from .compiler import compile_kernel
from .errors import ArgumentError
from .ir.frontend import ArraySpec, VectorArgSpec
from .ir.source import FunctionSource
from .lang import Array
from .spirv.lower import LOCAL_SIZE_SPEC_ID

NARROW_GROUP, SMALL_LAUNCH = 64, 256


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

    def __call__(self, *args):
        return self.fn(*args)


def func(fn):
    return Func(fn)


def _annotation(fn, name, ann):
    if isinstance(ann, str):
        try:
            ann = eval(ann, fn.__globals__)
        except Exception:
            raise ArgumentError(f"cannot evaluate the annotation {ann!r} of parameter '{name}'") from None
    return ann


class Kernel:
    """A compiled-on-demand kernel. Call it to launch; `.grad`/`.fwd` launch its derivatives."""

    def __init__(self, fn, ad_stack_size=None):
        self.fn = fn
        self.name = fn.__name__
        self.ad_stack_size = ad_stack_size
        functools.update_wrapper(self, fn)
        sig = inspect.signature(fn)
        self.params = []
        for p in sig.parameters.values():
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
                raise ArgumentError(f"kernel {self.name}: parameter '{p.name}' must be positional without default")
            ann = _annotation(fn, p.name, p.annotation) if p.annotation is not p.empty else None
            self.params.append((p.name, ann))
        self._cache = {}
        self._replay = None        # the last launch, repeated as is when called again with the same objects
        self._grad_replay = None   # the last gradient launch, likewise
        # a kernel dropped by its program takes its pipelines and per-task buffers with it
        weakref.finalize(self, _release_compiled, self._cache)

    # ---- argument checking and specialisation ----
    def _bind(self, args):
        """Check arguments before anything reaches the device; returns (spec key, arrays, scalars)."""
        if len(args) != len(self.params):
            raise ArgumentError(f"kernel {self.name} takes {len(self.params)} arguments "
                                f"({', '.join(n for n, _ in self.params)}), got {len(args)}")
        specs, arrays, scalars = [], [], []
        rt = runtime.get()
        for (name, ann), value in zip(self.params, args):
            if getattr(value, "_spvad_ndarray", False):
                if ann is not None and ann is not Array:
                    raise ArgumentError(f"kernel {self.name}: argument '{name}' is annotated {ann!r} "
                                        f"but got an ndarray")
                if value._runtime is not rt:
                    raise ArgumentError(f"kernel {self.name}: argument '{name}' was created before "
                                        "sp.reset()/sp.init(); create it again")
                specs.append(ArraySpec(value.dtype, value.ndim, value.grad is not None, value.dual is not None))
                arrays.append(value)
                continue
            if ann is Array:
                raise ArgumentError(f"kernel {self.name}: argument '{name}' must be an sp.ndarray, got "
                                    f"{type(value).__name__}" + (" (use sp.from_numpy)" if hasattr(
                                        value, "__array__") else ""))
            if isinstance(ann, T.Vector):   # a vector by value: one push constant per component
                specs.append(VectorArgSpec(ann))
                scalars.extend(self._vector_components(name, ann, value))
                continue
            dtype = self._scalar_dtype(name, ann, value)
            specs.append(dtype)
            scalars.append(value)
        return specs, arrays, scalars

    def _vector_components(self, name, vtype, value):
        """The components of a vector argument annotated `vtype` (a sequence or numpy array of n numbers)."""
        comps = T.numeric_components(value, vtype.n)
        if comps is None:
            raise ArgumentError(f"kernel {self.name}: argument '{name}' is annotated {vtype} but got "
                                f"{type(value).__name__} {value!r} (expected {vtype.n} numbers)")
        for c in comps:
            if vtype.dtype.is_int and isinstance(c, float):
                raise ArgumentError(f"kernel {self.name}: argument '{name}' is {vtype} but got float components")
            if not T.fits(c, vtype.dtype):
                raise ArgumentError(f"kernel {self.name}: argument '{name}': component {c!r} does not fit in "
                                    f"{vtype.dtype}")
        return comps

    def _scalar_dtype(self, name, ann, value):
        if hasattr(value, "__array__") and not isinstance(value, (int, float, bool)) and getattr(
                value, "ndim", 1) != 0:
            raise ArgumentError(f"kernel {self.name}: argument '{name}' must be an sp.ndarray or a scalar, got "
                                f"{type(value).__name__} (use sp.from_numpy, or annotate a vector argument with "
                                "its type, e.g. sp.vec3)")
        dtype = {float: T.f32, int: T.i32, bool: T.u1}.get(ann, ann)
        if dtype is None:
            dtype = T.python_scalar_dtype(value)
        if not isinstance(dtype, T.DType):
            raise ArgumentError(f"kernel {self.name}: argument '{name}' has unsupported type "
                                f"{type(value).__name__}")
        vt = T.python_scalar_dtype(value)
        if vt is None:
            raise ArgumentError(f"kernel {self.name}: argument '{name}' must be a number, got "
                                f"{type(value).__name__}")
        if dtype.is_int and vt.is_float:
            raise ArgumentError(f"kernel {self.name}: argument '{name}' is {dtype} but got float {value!r}")
        if not T.fits(value, dtype):
            raise ArgumentError(f"kernel {self.name}: argument '{name}' = {value!r} does not fit in {dtype}")
        return dtype

    def _compiled(self, specs, grad_mode="forward", target=None):
        """The compiled specialisation for `specs`; `target` = a features dict overriding the device's
        (e.g. Metal's, for kernel.msl)."""
        rt = runtime.get()
        key = (tuple(s if isinstance(s, T.DType) else (s.dtype, s.ndim, s.needs_grad, s.needs_dual)
                     for s in specs), grad_mode, self.ad_stack_size or rt.ad_stack_size,
               tuple(sorted(target.items())) if target else None, rt.debug, rt.serial)
        ck = self._cache.get(key)
        if ck is None:
            features = target or rt.device.info["features"]
            disk_key = cache.entry_key(self, key[:-1], (sorted(features.items()), rt.device.info.get(
                "preferred_local_size", 128), rt.debug))
            ck = cache.load_compiled(disk_key, self, rt)
            if ck is None:
                ck = compile_kernel(self, specs, grad_mode, rt, target)
                cache.store_compiled(disk_key, ck)
            self._cache[key] = ck
        return ck

    # ---- launch ----
    def __call__(self, *args):
        with runtime.LOCK:
            modes = recording.modes
            if modes.fwd:
                return self._launch_forward_mode(modes.fwd[-1], args)
            recorder = modes.tapes[-1] if modes.tapes else None
            fast = self._replay
            if fast is not None and (recorder is None or not tape.validating()):
                scalars = fast.scalars if fast.matches(args) else fast.new_scalars(self, args)
                if scalars is not None and (scalars is fast.scalars or fast.same_threads(scalars)):
                    entry = recorder and recorder.before_launch(self, fast.specs, fast.arrays(args), scalars,
                                                                fast.ck)
                    fast.run(args, scalars)
                    if entry:
                        recorder.after_launch(entry)
                    return
            self._launch(args, recorder)

    def _launch(self, args, recorder):
        """A launch off the fast path: check and bind everything, compile if needed, record a replay."""
        specs, arrays, scalars = self._bind(args)
        ck = self._compiled(specs)
        entry = recorder and recorder.before_launch(self, specs, arrays, scalars, ck)
        if recorder is not None and tape.validating():
            self._checked_launch(specs, arrays, scalars)
        else:
            records = launch(ck, arrays, scalars)
            immutable = all(isinstance(a, (int, float, bool, np.generic)) or getattr(a, "_spvad_ndarray", False)
                            for a in args)   # a 0-d numpy array or a list could change in place
            self._replay = Replay(args, specs, scalars, records, ck) if records is not None and immutable else None
        if entry:
            recorder.after_launch(entry)

    def _launch_forward_mode(self, mode, args):
        """A launch inside sp.FwdMode: the forward-mode kernel, after temporary .dual companions where the
        derivative would otherwise stop."""
        specs, arrays, scalars = self._bind(args)
        specs, ck = self.derivative_with_companions(specs, arrays, "dual", mode.give_dual)
        mode.prepare(arrays + [obj for _, obj in ck.captured])
        launch(ck, arrays, scalars)

    def _checked_launch(self, specs, arrays, scalars):
        """Run the instrumented variant that detects a read element being overwritten (debug only)."""
        from .autodiff.validation import violation_check
        from .ndarray import Ndarray
        everything = arrays + [obj for _, obj in self._compiled(specs).captured]
        # one ndarray bound to several parameters shares one marker (`k(x, x)` reading one, writing other)
        first = {}
        alias = [first.setdefault(id(a), k) for k, a in enumerate(everything)]
        mode = "checked" if alias == list(range(len(alias))) else "checked:" + ",".join(map(str, alias))
        ck = self._compiled(specs, mode)
        plan = ck.check_plan
        if plan is None:
            return launch(ck, arrays, scalars)
        markers = [tape.read_marker(everything[k]) for k in plan.marked]
        violations = Ndarray(T.i32, (len(plan.sites),))
        launch(ck, arrays, scalars, extra=markers + [violations])
        runtime.get().pending_checks.append(violation_check(self.name, plan, violations, markers))

    # ---- what a Tape asks of a launch ----
    def array_names(self, ck):
        """Parameter names of the ndarrays of a launch: the arguments, then the captured globals."""
        return [p.name for kind, p in ck.param_bindings if kind == "array"] + [p.name for p, _ in ck.captured]

    @staticmethod
    def specs_now(specs, arrays):
        """`specs` with each ndarray's companions as they are now (a Tape may have added a .grad)."""
        it, out = iter(arrays), []
        for s in specs:
            if isinstance(s, ArraySpec):
                a = next(it)
                s = ArraySpec(s.dtype, s.ndim, a.grad is not None, a.dual is not None)
            out.append(s)
        return out

    def derivative_with_companions(self, specs, arrays, mode, give):
        """(specs, compiled derivative kernel of `mode`) after `give(array, parameter name, captured)` added a
        .grad (.dual) to every array that would carry the derivative without one (`give` may raise instead)."""
        everything = arrays + [obj for _, obj in self._compiled(specs).captured]
        field = "dual" if mode == "dual" else "grad"
        for _ in range(len(everything) + 1):   # each round adds companions; at most one per array
            specs = self.specs_now(specs, arrays)
            ck = self._compiled(specs, mode)
            missing = [ai for ai in ck.facts.varied_outputs if getattr(everything[ai], field) is None]
            if not missing:
                break
            names = self.array_names(ck)
            for ai in missing:
                give(everything[ai], names[ai], ai >= len(arrays))
        return specs, ck

    @staticmethod
    def reverse_mode(everything):
        """One ndarray bound to two parameters: per-thread gradient updates could race, keep atomics."""
        return "reverse-aliased" if len({id(a) for a in everything}) < len(everything) else "reverse"

    def fwd(self, *args):
        """Launch the forward-mode derivative: computes the primal outputs and, from the inputs' .dual,
        the outputs' .dual (directional derivatives)."""
        with runtime.LOCK:
            specs, arrays, scalars = self._bind(args)
            _, ck = self.derivative_with_companions(specs, arrays, "dual", self._refuse_missing("dual"))
            launch(ck, arrays, scalars)

    def grad(self, *args):
        """Launch the reverse-mode derivative: reads the outputs' .grad, accumulates into the inputs' .grad."""
        with runtime.LOCK:
            specs, arrays, scalars = self._bind(args)
            everything = arrays + [obj for _, obj in self._compiled(specs).captured]
            self.derivative_with_companions(specs, arrays, self.reverse_mode(everything),
                                            self._refuse_missing("grad"))
            self.grad_bound(specs, arrays, scalars)

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

    def grad_bound(self, specs, arrays, scalars, views=None):
        """`grad` with arguments already checked (a Tape replaying what it recorded). `views`: array index ->
        StateView, binding contents a Tape kept instead of the array's current ones."""
        fast = self._grad_replay
        if views is None and fast is not None and fast.rerun(specs, arrays, scalars):
            return
        everything = arrays + [obj for _, obj in self._compiled(specs).captured]
        ck = self._compiled(specs, self.reverse_mode(everything))
        records = launch(ck, arrays, scalars, views=views)
        self._grad_replay = BoundReplay(specs, arrays, records, ck) if records is not None and not views else None

    def spirv(self, *args, grad=False):
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            mods = [t.lowered.spirv for t in self._compiled(specs, "reverse" if grad else "forward").tasks]
        return mods[0] if len(mods) == 1 else mods

    def disassemble(self, *args, grad=False):
        from .spirv import tools
        mods = self.spirv(*args, grad=grad)
        mods = [mods] if isinstance(mods, bytes) else mods
        return "\n".join(tools.disassemble(m) for m in mods)

    def msl(self, *args, grad=False):
        """Metal Shading Language for these argument types (SPIR-V compiled for Metal's features, translated
        by SPIRV-Cross); one string per task, joined."""
        from .rhi.metal.translate import METAL_FEATURES, translate
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            ck = self._compiled(specs, "reverse" if grad else "forward", target=METAL_FEATURES)
        return "\n".join(translate(t.lowered, t.task.name).source for t in ck.tasks)

    def ir(self, *args, grad=False):
        from .ir.printer import format_kernel
        with runtime.LOCK:
            specs, _, _ = self._bind(args)
            return format_kernel(self._compiled(specs, "reverse" if grad else "forward").ir)


def _release_compiled(compiled):
    """Free what the current runtime holds for these compiled kernels (a kernel object went away)."""
    rt = runtime.current()
    if rt is not None:
        with runtime.LOCK:
            rt.release_tasks({id(ct) for ck in compiled.values() for ct in ck.tasks})


def kernel(fn=None, *, ad_stack_size=None):
    if fn is None:
        return lambda f: Kernel(f, ad_stack_size)
    return Kernel(fn, ad_stack_size)


def launch(ck, arrays, scalars, extra=(), views=None):
    """Queue every task of a compiled kernel on the device (asynchronous) and bump the versions of what it
    writes. Returns the recorded dispatches when repeating them needs no host work (no adstacks), else None.
    `views`: array index -> an object bound instead of that array (a Tape's kept contents)."""
    rt = runtime.get()
    arrays = arrays + [obj for _, obj in ck.captured] + list(extra)
    if views:
        for k, view in views.items():
            arrays[k] = view
    for kind, k in ck.ir.scratch:   # a derivative kernel's scratch arrays (extremum winners)
        arrays.append(arrays[k].scratch(kind))
    shapes = [a.storage_shape for a in arrays]   # vector ndarrays add a trailing axis
    records = []
    for ct in ck.tasks:
        n = ct.num_threads(scalars, shapes)
        if n <= 0:
            if records is not None:   # a replay must know this task ran no thread
                records.append((None, ct, None, None, n, shapes))
            continue
        spec = ct.spec_constants(scalars, shapes, n)
        if ct.depth_probe is not None:
            spec = {**(spec or {}), **ct.measure_depths(rt, arrays, scalars, shapes, n)}
        low, extra_buffers = ct.lowered, []
        if low.adstacks:   # the stack homes, hence the module variant, depend on the capacities
            low = ct.variant(ct.homes(rt, spec))
            records = None
        if low.flag_binding is not None:
            extra_buffers.append(ct.flag_buffer(rt))
        if low.stack_heap is not None:
            extra_buffers.append(ct.stack_heap(rt, low, spec, n))
        local = low.local_size
        if LOCAL_SIZE_SPEC_ID in low.spec_ids and n <= SMALL_LAUNCH:
            # a narrow group for a small launch (lavapipe runs every lane of a group); one narrow width
            # only, so a kernel compiles at most two pipelines
            local = min(local, NARROW_GROUP)
            spec = {**(spec or {}), LOCAL_SIZE_SPEC_ID: local}
        recorded = dispatch(rt, low, ct.pipeline(rt, spec, low), arrays, scalars, shapes, n, extra_buffers, local)
        ct.after_launch(rt, spec)
        if records is not None:
            records.append((recorded, ct, spec, low, n, shapes))
    bump_versions(ck.facts.writes, arrays)
    return records


def bump_versions(writes, arrays):
    """Every (array index, field) a launch can write now holds new contents."""
    for ai, field in writes:
        companion(arrays[ai], field).version += 1


def companion(array, field):
    """The ndarray behind `field` of `array`: the array itself, or its .grad / .dual."""
    return array if field == "primal" else getattr(array, field)


class Replay:
    """The dispatches of a kernel's last launch. Calling the kernel again with the very same argument
    objects (same ndarrays, same scalar objects) repeats them without checking or packing anything again."""

    def __init__(self, args, specs, scalars, records, ck):
        self.rt = runtime.current()
        self.scalars, self.ck = scalars, ck
        self.captured = [obj for _, obj in ck.captured]
        self.args = tuple(weakref.ref(a) if getattr(a, "_spvad_ndarray", False) else a for a in args)
        self.positions = [k for k, a in enumerate(args) if getattr(a, "_spvad_ndarray", False)]
        self.specs, self.records = specs, records
        n = len(self.positions)   # what a launch writes, by argument position / captured object
        self.written_args = [(self.positions[ai], f) for ai, f in ck.facts.writes if ai < n]
        self.written_captured = [companion(self.captured[ai - n], f) for ai, f in ck.facts.writes if ai >= n]

    def matches(self, args):
        if len(args) != len(self.args) or self.rt is not runtime.current():
            return False
        for a, b in zip(args, self.args):
            if a is not b and (type(b) is not weakref.ref or b() is not a):
                return False
        return True

    def new_scalars(self, kernel, args):
        """Same ndarrays, other scalar values of the same dtypes (e.g. a time-step index): the checked
        scalars, or None when that does not apply."""
        if len(args) != len(self.args) or self.rt is not runtime.current():
            return None
        scalars = []
        for (name, ann), a, b, spec in zip(kernel.params, args, self.args, self.specs):
            if type(b) is weakref.ref:
                if b() is not a:
                    return None
            elif not isinstance(spec, T.DType) or not isinstance(a, (int, float, bool, np.generic)) or \
                    kernel._scalar_dtype(name, ann, a) != spec:
                return None
            else:
                scalars.append(a)
        return scalars

    def same_threads(self, scalars):
        return same_threads(self.records, scalars)

    def arrays(self, args):
        return [args[k] for k in self.positions]

    def run(self, args, scalars):
        """Launch again: the recorded dispatches as they are, or with push constants packed for new scalars."""
        if scalars is self.scalars:
            rt, device_launch = self.rt, self.rt.device.launch
            for recorded, ct, spec, *_ in self.records:
                if recorded is not None:
                    device_launch(*recorded)
                    ct.after_launch(rt, spec)
        else:
            relaunch(self.rt, self.records, scalars)
        for k, field in self.written_args:
            companion(args[k], field).version += 1
        for a in self.written_captured:
            a.version += 1


class BoundReplay:
    """A gradient launch's dispatches (no adstacks), repeated for already-checked arguments with the same
    ndarrays and scalar dtypes: a Tape replaying a time loop only repacks the push constants."""

    def __init__(self, specs, arrays, records, ck):
        self.rt = runtime.current()
        self.arrays = [weakref.ref(a) for a in arrays]
        # the recorded dispatches bind these .grad buffers: a Tape's temporary .grad is a new one each time
        self.grads = [a.grad is not None and weakref.ref(a.grad) for a in arrays]
        self.dtypes = _scalar_dtypes(specs)
        self.records, self.ck = records, ck

    def rerun(self, specs, arrays, scalars):
        if self.rt is not runtime.current() or self.dtypes is None or len(arrays) != len(self.arrays) or any(
                r() is not a or (g() is not a.grad if g else a.grad is not None)
                for r, g, a in zip(self.arrays, self.grads, arrays)) or \
                _scalar_dtypes(specs) != self.dtypes or not same_threads(self.records, scalars):
            return False
        relaunch(self.rt, self.records, scalars)
        bump_versions(self.ck.facts.writes, arrays + [obj for _, obj in self.ck.captured])
        return True


def _scalar_dtypes(specs):
    """The scalar dtypes of a specialisation, or None when a vector argument is among them."""
    if any(isinstance(s, VectorArgSpec) for s in specs):
        return None
    return tuple(s for s in specs if isinstance(s, T.DType))


def same_threads(records, scalars):
    """Whether every recorded task keeps its thread count with new scalar values."""
    return all(ct.num_threads(scalars, shapes) == n for _, ct, _, _, n, shapes in records)


def relaunch(rt, records, scalars):
    """Launch recorded dispatches again with new scalar values (same thread counts: see same_threads)."""
    device_launch = rt.device.launch
    for recorded, ct, spec, low, n, shapes in records:
        if recorded is None:
            continue
        pipeline, buffers, push, groups = recorded
        if low.push_size:
            push = struct.pack(low.push_format, *[_push_value(f, scalars, shapes) for f in low.push_fields])
        device_launch(pipeline, buffers, push, groups)
        ct.after_launch(rt, spec)


def dispatch(rt, low, pipeline, arrays, scalars, shapes, n, extra_buffers=(), local=None):
    """Record one dispatch of a lowered task over `n` threads (launches past 65,535 groups fold into 2-D);
    returns the device.launch arguments."""
    buffers = [_buffer(arrays[ai], field) for ai, field in low.bindings] + list(extra_buffers)
    push = b""
    if low.push_size:
        push = struct.pack(low.push_format, *[_push_value(f, scalars, shapes) for f in low.push_fields])
    groups = -(-n // (local or low.local_size))
    gx = min(groups, rt.device.info["limits"]["max_workgroup_count"][0])
    recorded = (pipeline, buffers, push, (gx, -(-groups // gx), 1))
    rt.device.launch(*recorded)
    return recorded


def _buffer(arr, field):
    return arr.buffer if field == "primal" else arr.buffer_for(field)


def _push_value(f, scalars, shapes):
    if f[0] == "scalar":
        v = scalars[f[1]]
        dt = f[2]
        return int(bool(v)) if dt.is_bool else (float(v) if dt.is_float else int(v))
    return shapes[f[1]][f[2]]

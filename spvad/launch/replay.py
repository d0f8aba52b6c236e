"""Repeating recorded launches: a kernel called again with the very same objects, a Tape's gradient replay."""
import weakref

import numpy as np

from .. import runtime
from .. import types as T
from ..arguments import scalar_dtype
from ..frontend import TemplateSpec, VectorArgSpec
from ..frontend.random_numbers import random_key_index
from ..spirv.lower import LOOP_CHECK_SPEC_ID
from .versions import bump_versions, companion


_PLAIN = {int: lambda dt: dt.is_int, float: lambda dt: dt.is_float}   # a plain scalar of its spec's kind


class Replay:
    """The dispatches of a kernel's last launch. Calling the kernel again with the very same argument
    objects (same ndarrays, same scalar objects) while its global names refer to the same ndarrays repeats
    them without checking or packing anything again; new scalar values of the same dtypes only repack the
    push constants. Everything a repeat checks is worked out here once."""

    def __init__(self, args, specs, scalars, records, ck, captured):
        self.rt = runtime.current()
        self.scalars, self.ck = scalars, ck
        self.draws_random = random_key_index(ck.ir) is not None   # each launch takes a fresh key (kernel.py)
        # weakly: a name re-bound lets its old ndarray (and the memory the records bind) go
        self.globals = [(site, weakref.ref(obj)) for (_, site, _), obj in zip(ck.captured, captured)]
        self.nargs = len(args)
        self.positions = [k for k, a in enumerate(args) if getattr(a, "_spvad_ndarray", False)]
        self.refs = [(k, weakref.ref(args[k])) for k in self.positions]
        # per scalar argument: (position, dtype, the Python type a range check admits, range, the recorded
        # object); None when an argument is a vector or a sp.template() value (their launches are bound anew)
        self.scalar_checks = []
        for k, (a, spec) in enumerate(zip(args, specs)):
            if k in self.positions:
                continue
            if not isinstance(spec, T.DType):
                self.scalar_checks = None
                break
            plain = int if spec.is_int else float if spec.is_float else None
            lo, hi = T.INT_RANGE[spec.name] if spec.is_int else (-T.FLOAT_MAX.get(spec.name, 0.0),
                                                                    T.FLOAT_MAX.get(spec.name, 0.0))
            self.scalar_checks.append((k, spec, plain, lo, hi, a))
        self.specs, self.records = specs, records
        self.live = [r for r in records if r.recorded is not None]
        # scalars in the scalar table (launch/scalar_table.py): their entry is placed again at each launch
        self.spills = any(getattr(r.push, "spill", None) is not None for r in self.live)
        self.threads_fixed = all(r.threads_fixed for r in records)   # by the shapes alone
        n = len(self.positions)   # what a launch writes, by argument position / captured object
        self.written_args = [(self.positions[ai], f) for ai, f in ck.facts.writes if ai < n]
        self.written_captured = [(ai - n, f) for ai, f in ck.facts.writes if ai >= n]
        self.tape_recipes = {}   # .grad present per array argument -> what a Tape does at each launch (tape/tape.py)

    def new_scalars(self, kernel, args):
        """Same ndarrays, other scalar values of the same dtypes (e.g. a time-step index): the checked
        scalars (the recorded list itself when every argument is the very object recorded), or None when
        that does not apply."""
        checks = self.scalar_checks
        if checks is None or len(args) != self.nargs or self.rt is not runtime.current():
            return None
        for k, ref in self.refs:
            if ref() is not args[k]:
                return None
        for site, ref in self.globals:   # Python's rule: the arrays the names refer to at this launch
            obj = ref()
            if obj is None or site.get() is not obj:
                return None
        scalars, same = [], True
        for k, spec, plain, lo, hi, recorded in checks:
            a = args[k]
            if a is not recorded:
                same = False
                if (type(a) is not plain or not lo <= a <= hi) and not _admits(kernel, k, spec, a):
                    return None
            scalars.append(a)
        return self.scalars if same else scalars

    def same_threads(self, scalars):
        return self.threads_fixed or same_threads(self.records, scalars)

    def arrays(self, args):
        return [args[k] for k in self.positions]

    def captured(self):
        """The ndarrays of the global names (alive: new_scalars found them bound)."""
        return [ref() for _, ref in self.globals]

    def run(self, args, scalars):
        """Launch again: the recorded dispatches as they are, or with push constants packed for new scalars (and
        always where scalars spill to the scalar table: their entry may be gone, launch/scalar_table.py)."""
        if scalars is self.scalars and not self.spills:
            for r in self.live:
                r.send(r.pushed)
                if r.reports is not None:
                    r.reports(r.spec)
        else:
            relaunch(self.live, scalars)
        bump_versions(self.written_args, args)
        for k, field in self.written_captured:
            companion(self.globals[k][1](), field).version += 1


def _admits(kernel, k, spec, a):
    """Whether scalar argument `a` at position `k` is of dtype `spec` (what arguments.bind would find), beyond the
    plain in-range ints and floats Replay.new_scalars admits itself."""
    if type(a) in _PLAIN and _PLAIN[type(a)](spec) and T.fits(a, spec):
        return True
    name, ann = kernel.params[k]
    return isinstance(a, (int, float, bool, np.generic)) and scalar_dtype(kernel.name, name, ann, a) == spec


class BoundReplay:
    """A gradient launch's dispatches (no adstacks), repeated for already-checked arguments with the same
    ndarrays (those of the global names included), the same kept contents bound in place of some (`views`,
    a Tape's StateViews: the same buffers) and scalar dtypes: a Tape replaying a time loop only repacks the
    push constants."""

    def __init__(self, specs, arrays, records, ck, views=None):
        self.rt = runtime.current()
        # the recorded dispatches bind these .grad buffers: a Tape's temporary .grad is a new one each time
        self.bound = [(weakref.ref(a), a.grad is not None and weakref.ref(a.grad)) for a in arrays]
        self.views = view_buffers(views)   # (held by the records too)
        self.specs, self.dtypes = specs, _scalar_dtypes(specs)
        self.records, self.live, self.ck = records, [r for r in records if r.recorded is not None], ck
        self.threads_fixed = all(r.threads_fixed for r in records)

    def rerun(self, specs, arrays, scalars, views=None):
        if not self.matches(specs, arrays, scalars, views):
            return False
        relaunch(self.live, scalars)
        bump_versions(self.ck.facts.writes, arrays)
        return True

    def matches(self, specs, arrays, scalars, views=None):
        """Whether a launch with these arguments is these dispatches with its scalars packed again."""
        if self.rt is not runtime.current() or self.dtypes is None or len(arrays) != len(self.bound) or \
                (views or self.views) and view_buffers(views) != self.views:
            return False
        for (ref, grad), a in zip(self.bound, arrays):
            if ref() is not a or (grad() if grad else None) is not a.grad or (grad and a.grad is None):
                return False   # (a recorded temporary .grad that is gone: not the array's absent one)
        return (specs is self.specs or _scalar_dtypes(specs) == self.dtypes) and \
            (self.threads_fixed or same_threads(self.records, scalars))


def view_buffers(views):
    """((array index, primal buffer, final buffer), ...) that `views` (index -> StateView) bind: () for none."""
    if not views:
        return ()
    return tuple((k, views[k].buffer, views[k].final_buffer) for k in sorted(views))


def _scalar_dtypes(specs):
    """The scalar dtypes of a specialisation, or None when a vector argument (or a sp.template() value, which
    selects the compiled kernel) is among them."""
    if any(isinstance(s, (VectorArgSpec, TemplateSpec)) for s in specs):
        return None
    return tuple(s for s in specs if isinstance(s, T.DType))


class Record:
    """One dispatch of a recorded launch: the device's prepared launch (called with push-constant bytes) and
    the launch's device arguments (pipeline, buffers, push constants, groups; None when the task ran no
    thread), its task on the device, spec constants, push-constant packer, thread count (None: counted on
    the device) and array shapes. `reports`: what each launch tells its task on the device (flags or prints
    to read at the next sync), None when nothing."""
    __slots__ = ("send", "recorded", "pushed", "on_device", "reports", "spec", "push", "n", "shapes",
                 "threads_fixed", "checked")

    def __init__(self, send, recorded, on_device, spec, push, n, shapes):
        self.send, self.recorded, self.on_device, self.spec, self.push, self.n, self.shapes = \
            send, recorded, on_device, spec, push, n, shapes
        self.pushed = recorded and recorded[2]
        self.reports = on_device.after_launch if on_device.reports else None
        ct = on_device.ct
        # whether the launch checks the driver's loop cap (spirv/loop_cap.py)
        self.checked = ct.loop_check is not None and not (spec and spec.get(LOOP_CHECK_SPEC_ID) == 0)
        # the thread count reads no scalar, or the device computes it again at each launch; nor does the
        # choice to check the loop cap
        self.threads_fixed = (n is None or not ct.header_scalars) and not (ct.loop_check and ct.loop_check.scalars)

    def same_launch(self, scalars):
        """Whether new scalar values keep this dispatch's thread count and its choice to check the loop cap."""
        ct = self.on_device.ct
        if self.n is not None and ct.header_scalars and ct.num_threads(scalars, self.shapes) != self.n:
            return False
        check = ct.loop_check
        return check is None or not check.scalars or check.needed(scalars, self.shapes, self.n) == self.checked


def same_threads(records, scalars):
    """Whether every recorded task keeps its thread count (and loop-cap check) with new scalar values."""
    return all(r.threads_fixed or r.same_launch(scalars) for r in records)


def relaunch(records, scalars):
    """Launch recorded dispatches (those that ran threads) again with new scalar values (same thread counts:
    see same_threads)."""
    for r in records:
        r.send(r.push(scalars))
        if r.reports is not None:
            r.reports(r.spec)

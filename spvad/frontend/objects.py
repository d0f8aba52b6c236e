"""Python objects read in kernels, Taichi's `@ti.data_oriented` style: `self.x[i]`, `self.sim.v`, `self.n`,
`self.helper(p)` in a kernel method, and the same through a `sp.template()` value or a module-level instance.

An object's ndarrays are bound at each launch through the attribute path that reached them (Python's rule, as
global names are: `self.x = new_array` is seen by the next launch); its numbers (and tuples, lists and small
numpy arrays of numbers) are compile-time constants, and the kernel is specialised on their values
(`object_state`): a changed number compiles again, where Taichi would keep the old one."""
import dataclasses
import types

import numpy as np

from ..errors import ArgumentError, CompileError
from . import funcs
from .arrays import captured_array
from .rows import keyword_values
from .values import Identity, TemplateSpec

LIBRARY_MODULES = ("builtins", "spvad", "numpy", "math", "torch", "jax", "jaxlib", "functools", "typing")
MAX_ITEMS = 1024   # a longer list or tuple is keyed by identity (describing it at every launch would cost)


def is_root_object(value):
    """An object whose attributes a kernel reads as globals: an instance of a `@sp.data_oriented` class or of a
    dataclass (any other instance reached from one of these, or passed as `sp.template()`, is one too)."""
    cls = type(value)
    return getattr(cls, "_spvad_data_oriented", False) or (dataclasses.is_dataclass(cls) and user_class(cls))


def user_class(cls):
    """A class of the program's, not of a library (spvad's dtypes are dataclasses too)."""
    return (getattr(cls, "__module__", None) or "builtins").split(".")[0] not in LIBRARY_MODULES


def is_object(value):
    """An instance of a user class, with a `__dict__` (not a module, function, type, ndarray or spvad object)."""
    if is_root_object(value):
        return True
    cls = type(value)
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType)) or \
            getattr(value, "_spvad_ndarray", False) or not hasattr(value, "__dict__"):
        return False
    return user_class(cls)


def instance_attributes(obj):
    """The attributes an object's state is made of (spvad's own per-instance entries left out)."""
    return {k: v for k, v in vars(obj).items() if not k.startswith("_spvad")}


def object_state(obj, seen=None):
    """A hashable description of what a kernel can read from `obj` as a constant: numbers, strings, tuples and
    lists of them, small numpy arrays by value; ndarrays by nothing (they are bound at each launch); nested
    objects recursively; anything else by identity."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return ("seen",)
    seen.add(id(obj))
    return tuple((k, _describe(v, seen)) for k, v in sorted(instance_attributes(obj).items()))


def _describe(v, seen):
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return (t.__name__, v)
    if getattr(v, "_spvad_ndarray", False):
        return ("ndarray",)
    if t in (tuple, list) and len(v) <= MAX_ITEMS:
        return (t.__name__,) + tuple(_describe(x, seen) for x in v)
    if t is np.ndarray and v.size <= 64 and v.dtype.kind in "biuf":
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return ("number", v.dtype.str, v.item())
    if is_object(v) and not getattr(v, "_spvad_func", False) and not hasattr(v, "_spvad_builtin"):
        return ("object", type(v).__qualname__, Identity(v), object_state(v, seen))
    return Identity(v)


def first_change(before, after, path="self"):
    """The first attribute path whose description differs between two object_state results."""
    old, new = dict(before), dict(after)
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b:
            if a and b and a[0] == "object" and b[0] == "object" and a[2] == b[2]:
                return first_change(a[3], b[3], f"{path}.{k}")
            return f"{path}.{k}"
    return path


class ObjectSpec(TemplateSpec):
    """A method's `self` (or an object passed as `sp.template()`): the kernel is specialised on the object
    and on the values of the numbers it holds (object_state), read when the call was bound."""

    def __init__(self, value, name="self"):
        super().__init__(value)
        self.name, self.state = name, object_state(value)
        self.key = ("object", Identity(value), self.state)

    def check_unchanged(self):
        """Raise when a number the kernel reads as a constant changed since the call was bound (a derivative
        of an earlier launch compiled after the program changed `self.dt`): the compile would read the new
        value and disagree with the launch it differentiates."""
        now = object_state(self.value)
        if now != self.state:
            raise CompileError(
                f"{first_change(self.state, now, self.name)} changed after a launch that read it (a compile-time "
                "constant); the gradient of that launch would use the new value. Change such values between "
                "Tapes, or pass them as arguments")


def template_spec(value, name):
    """The spec of a `sp.template()` argument (or of a method's `self`)."""
    return ObjectSpec(value, name) if is_object(value) else TemplateSpec(value)


class PathSite:
    """Where an ndarray read as `self.sim.x` is bound: an attribute path from a root site (a method's `self`, a
    template value, a global name), followed again at each launch (launch/global_names.py asks `get()`, as for a
    global name): `self.x = new_array` is seen by the next launch."""
    __slots__ = ("base", "path", "name", "key")

    def __init__(self, base, path):
        self.base, self.path = base, path
        self.name = ".".join((base.name,) + path)
        self.key = (base.key, path)

    def get(self, default=None):
        obj = self.base.get(default)
        for attr in self.path:
            obj = getattr(obj, attr, default)
        return obj


class ObjectRef:
    """An object in a kernel: where it was reached from (`site`, a root site and an attribute path)."""
    __slots__ = ("obj", "site", "path")

    def __init__(self, obj, site, path=()):
        self.obj, self.site, self.path = obj, site, path

    @property
    def name(self):
        return ".".join((self.site.name,) + self.path)


class BoundFunc:
    """`self.helper` in a kernel: an `@sp.func` method, called with the object as its first argument."""
    __slots__ = ("func", "ref")

    def __init__(self, func, ref):
        self.func, self.ref = func, ref


def attribute(b, ref, attr):
    """`obj.attr` in a kernel: an ndarray bound at launch, a nested object, an @sp.func method, or a value read
    now as a global name's is (a number is a constant)."""
    try:
        value = getattr(ref.obj, attr)
    except AttributeError:
        b.error(f"'{ref.name}' ({type(ref.obj).__name__}) has no attribute '{attr}'")
    if attr not in vars(ref.obj):   # a method: bound to the object, unless a @staticmethod
        raw = next((vars(c)[attr] for c in type(ref.obj).__mro__ if attr in vars(c)), None)
        if getattr(raw, "_spvad_func", False):
            return BoundFunc(raw, ref)
    path = ref.path + (attr,)
    if getattr(value, "_spvad_ndarray", False):
        site = PathSite(ref.site, path)   # one array parameter per path (bound to what it reaches then)
        return captured_array(b, site.name, value, site)
    if getattr(value, "_spvad_kernel", False):
        b.error(f"'{ref.name}.{attr}' is a kernel: kernels launch from Python, not from kernels (make it an "
                "@sp.func to call it here)")
    if is_object(value):
        return ObjectRef(value, ref.site, path)
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
        b.error(f"'{ref.name}.{attr}' holds a {type(value).__name__} of strings; kernels read numbers, ndarrays, "
                "and lists or tuples of them")
    return b.global_object(f"{ref.name}.{attr}", value, PathSite(ref.site, path))


def call_bound_func(b, bound, node):
    """The row of `self.helper(args)`: the @sp.func inlined with the object as its first argument."""
    kw = keyword_values(b, node)
    args = [bound.ref] + [b.visit(a) for a in node.args]
    value = funcs.inline(b, bound.func, funcs.func_arguments(b, bound.func, args, kw))
    if b.statement_call is not node:
        funcs.refuse_none_result(b)
    return value


def data_oriented(cls):
    """`@sp.data_oriented` (Taichi's `@ti.data_oriented`): a class whose `@sp.kernel` and `@sp.func` methods read
    `self`'s ndarrays, numbers and nested objects. Kernels bind `self` whatever the class (kernel.py's
    `__get__`); the mark lets a module-level instance's attributes be read by plain kernels too."""
    if not isinstance(cls, type):
        raise ArgumentError(f"@sp.data_oriented decorates a class, got {type(cls).__name__}")
    cls._spvad_data_oriented = True
    return cls

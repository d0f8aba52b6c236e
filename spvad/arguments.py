"""A kernel's parameters and the binding of a call's arguments to them: keywords put in order, every argument
checked before anything reaches the device, and the specialisation key (one spec per parameter), the ndarrays
bound and the scalar values (vector and matrix arguments by component) of a launch."""
import inspect
import weakref

import numpy as np

from . import runtime
from . import types as T
from .errors import ArgumentError
from .frontend import ArraySpec, VectorArgSpec
from .frontend.objects import is_root_object, template_spec
from .frontend.structs import flatten, is_struct
from .lang import Array, Template


def parameters(fn, kname):
    """The (name, annotation) of each parameter of kernel function `fn`: positional, without defaults."""
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            raise ArgumentError(f"kernel {kname}: parameter '{p.name}' must be positional without default")
        ann = _annotation(fn, p.name, p.annotation) if p.annotation is not p.empty else None
        params.append((p.name, ann))
    return params


def _annotation(fn, name, ann):
    if isinstance(ann, str):
        try:
            ann = eval(ann, fn.__globals__)
        except Exception:
            raise ArgumentError(f"cannot evaluate the annotation {ann!r} of parameter '{name}'") from None
    return ann


def positional(kname, params, args, kwargs):
    """The arguments of a call with keywords, in parameter order; refused as Python would refuse them."""
    names = [n for n, _ in params]
    rest = names[len(args):]
    if len(rest) == len(kwargs):   # the usual call: the keywords name exactly the other parameters
        try:
            return args + tuple(kwargs[n] for n in rest)
        except KeyError:
            pass
    if len(args) > len(names):
        raise ArgumentError(f"kernel {kname} takes {len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)} positional")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise ArgumentError(f"kernel {kname} got an unexpected keyword argument '{k}' "
                                f"(its parameters: {', '.join(names)})")
        if k in given:
            raise ArgumentError(f"kernel {kname} got multiple values for argument '{k}'")
        given[k] = v
    missing = [n for n in names if n not in given]
    if missing:
        raise ArgumentError(f"kernel {kname} is missing argument{'s' * (len(missing) > 1)} "
                            + ", ".join(f"'{n}'" for n in missing))
    return tuple(given[n] for n in names)

def bind(kname, params, args):
    """Check arguments before anything reaches the device; returns (spec key, arrays, scalars)."""
    if len(args) != len(params):
        raise ArgumentError(f"kernel {kname} takes {len(params)} arguments "
                            f"({', '.join(n for n, _ in params)}), got {len(args)}")
    specs, arrays, scalars = [], [], []
    for (name, ann), value in zip(params, args):
        if getattr(value, "_spvad_ndarray", False):   # (through sp.template() too: bound as an argument)
            if ann is not None and ann is not Array and not isinstance(ann, Template):
                raise ArgumentError(f"kernel {kname}: argument '{name}' is annotated {ann!r} "
                                    f"but got an ndarray")
            check_runtime(kname, name, value)
            specs.append(ArraySpec(value.dtype, value.ndim, value.grad is not None, value.dual is not None))
            arrays.append(value)
            continue
        if isinstance(ann, Template) or ann is None and is_root_object(value) and not is_struct(value):
            # a compile-time value (a @sp.data_oriented object too: `Sim.step(sim)`): specialised per value
            specs.append(template_spec(value, name))   # (an object: on its numbers too, objects.py)
            continue
        if is_struct(value):   # a dataclass: its fields bound as arguments (frontend/structs.py)
            if ann is not None and not isinstance(value, ann if isinstance(ann, type) else type(value)):
                raise ArgumentError(f"kernel {kname}: argument '{name}' is annotated {ann!r} but got "
                                    f"{type(value).__name__}")
            spec, more_arrays, more_scalars = flatten(kname, name, value, check_runtime, scalar_dtype,
                                                      vector_components)
            specs.append(spec)
            arrays += more_arrays
            scalars += more_scalars
            continue
        if ann is Array:
            raise ArgumentError(f"kernel {kname}: argument '{name}' must be an sp.ndarray, got "
                                f"{type(value).__name__}" + (" (use sp.from_numpy)" if hasattr(
                                    value, "__array__") else ""))
        if isinstance(ann, T.TENSOR_TYPES):   # a vector / matrix by value: one push constant per component
            specs.append(VectorArgSpec(ann))
            scalars.extend(vector_components(kname, name, ann, value))
            continue
        dtype = scalar_dtype(kname, name, ann, value)
        specs.append(dtype)
        scalars.append(value)
    return specs, arrays, scalars

def check_runtime(kname, name, value):
    """An ndarray argument must belong to the current runtime."""
    if value._runtime is not runtime.get():
        when = "by the parent process before os.fork()" if value._runtime.forked else "before sp.reset()/sp.init()"
        raise ArgumentError(f"kernel {kname}: argument '{name}' was created {when}; create it again")


class BoundMethods(dict):
    """An instance's bound kernels (kernel -> bound kernel), kept in its `__dict__` (they go when it goes). A
    copy of the instance (copy, deepcopy, pickle) gets none: its kernels bind the copy afresh."""

    def __init__(self, owner=None):
        super().__init__()
        try:
            self.owner = owner if owner is None else weakref.ref(owner)
        except TypeError:   # (no weak references to it: the instance itself, a cycle the collector frees)
            self.owner = lambda: owner

    def __copy__(self):
        return BoundMethods()

    def __deepcopy__(self, memo):
        return BoundMethods()

    def __reduce__(self):
        return BoundMethods, ()


def bound_method(kernel, obj, make):
    """`obj.step` for a kernel defined in a class: a kernel (`make()`, a fresh one) whose first parameter,
    `self`, is bound to `obj` as a compile-time object (frontend/objects.py's ObjectSpec), one per instance."""
    slots = getattr(obj, "__dict__", {}).get("_spvad_bound")
    if slots is not None and slots.owner is not None and slots.owner() is obj and kernel in slots:
        return slots[kernel]
    bound = make()
    for k, v in vars(kernel).items():   # its options and markers (@sp.no_grad's), not its compiled state
        if not k.startswith("_") and k != "tape_recipes":
            vars(bound)[k] = v
    (name, _), *rest = kernel.params or [("self", None)]
    bound.bound_to, bound.params, bound.method_params = obj, rest, [(name, Template())] + rest
    if hasattr(obj, "__dict__"):
        if slots is None or slots.owner is None or slots.owner() is not obj:
            slots = vars(obj)["_spvad_bound"] = BoundMethods(obj)
        slots[kernel] = bound
    return bound


def method_key(obj):
    """The specialisation key of a method's `self` now (its numbers' values included)."""
    return template_spec(obj, "self").key


def vector_components(kname, name, vtype, value):
    """The components of a vector (matrix) argument annotated `vtype`: a sequence or numpy array of n
    numbers (of shape (n, m)), row-major."""
    comps = T.numeric_components(value, vtype.shape)
    if comps is None:
        want = f"{vtype.n} numbers" if isinstance(vtype, T.Vector) else f"numbers of shape {vtype.shape}"
        raise ArgumentError(f"kernel {kname}: argument '{name}' is annotated {vtype} but got "
                            f"{type(value).__name__} {value!r} (expected {want})")
    for c in comps:
        if vtype.dtype.is_int and isinstance(c, float):
            raise ArgumentError(f"kernel {kname}: argument '{name}' is {vtype} but got float components")
        if not T.fits(c, vtype.dtype):
            raise ArgumentError(f"kernel {kname}: argument '{name}': component {c!r} does not fit in "
                                f"{vtype.dtype}")
    return comps

def scalar_dtype(kname, name, ann, value):
    if hasattr(value, "__array__") and not isinstance(value, (int, float, bool)) and getattr(
            value, "ndim", 1) != 0:
        raise ArgumentError(f"kernel {kname}: argument '{name}' must be an sp.ndarray or a scalar, got "
                            f"{type(value).__name__} (use sp.from_numpy, or annotate a vector argument with "
                            "its type, e.g. sp.vec3)")
    dtype = {float: T.f32, int: T.i32, bool: T.u1}.get(ann, ann)
    if dtype is None:
        dtype = T.python_scalar_dtype(value)
    if not isinstance(dtype, T.DType):
        raise ArgumentError(f"kernel {kname}: argument '{name}' has unsupported type "
                            f"{type(value).__name__}")
    vt = T.python_scalar_dtype(value)
    if vt is None:   # (a 0-d array is a mutable container, not a value: its item is)
        zero_d = " 0-d array (pass a[()] or float(a))" if isinstance(value, np.ndarray) else ""
        raise ArgumentError(f"kernel {kname}: argument '{name}' must be a number, got "
                            f"{type(value).__name__}{zero_d}")
    if dtype.is_int and vt.is_float:
        raise ArgumentError(f"kernel {kname}: argument '{name}' is {dtype} but got float {value!r}")
    if not T.fits(value, dtype):
        raise ArgumentError(f"kernel {kname}: argument '{name}' = {value!r} does not fit in {dtype}")
    return dtype

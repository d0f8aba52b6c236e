"""Dataclass kernel arguments (Warp's structs, Taichi's dataclasses): `def step(s: State)` with
`@dataclasses.dataclass class State: x: sp.ndarray; v: sp.ndarray; dt: float`, read as `s.x[i]`, `s.dt`, nested.

Each field is bound as an argument of its kind is: an ndarray as an `sp.Array` (the Tape follows it and its
gradient flows), a number as a scalar argument (a runtime value: another `dt` compiles nothing), a field
annotated with a vector or matrix type by its components, a dataclass recursively."""
import dataclasses
import typing

import numpy as np

from .. import types as T
from ..errors import ArgumentError
from ..ir import nodes as N
from .arrays import array_param
from .objects import user_class
from .values import ArraySpec, TemplateSpec, VectorArgSpec
from .vectors import VecArg, shaped


def is_struct(value):
    """An instance of a dataclass of the program's (not the class itself, nor one of spvad's dtypes)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and user_class(type(value))


def spec_key(s):
    if isinstance(s, ArraySpec):
        return ("array", s.dtype, s.ndim, s.needs_grad, s.needs_dual)
    if isinstance(s, VectorArgSpec):
        return ("vector", s.dtype)
    if isinstance(s, StructSpec):
        return s.key
    return s   # a scalar's DType


class StructSpec(TemplateSpec):
    """A dataclass argument: the kernel is specialised on its class and its fields' specs (an ndarray's dtype
    and ndim, a number's dtype), never on the values, which are bound at each launch as arguments are.
    Keyed like a template value (`key`), by value, so the on-disk cache keeps it."""
    by_identity = False

    def __init__(self, cls, fields):
        self.value, self.cls, self.fields = None, cls, tuple(fields)   # fields: ((name, spec), ...)
        self.key = ("struct", f"{cls.__module__}.{cls.__qualname__}",
                    tuple((n, spec_key(s)) for n, s in self.fields))

    def now(self, arrays):
        """This spec with each ndarray field's companions as they are now (`arrays`: an iterator over the
        launch's ndarrays, at this argument's first): a Tape may have added a `.grad`."""
        fields = []
        for n, s in self.fields:
            if isinstance(s, ArraySpec):
                a = next(arrays)
                s = ArraySpec(s.dtype, s.ndim, a.grad is not None, a.dual is not None)
            elif isinstance(s, StructSpec):
                s = s.now(arrays)
            fields.append((n, s))
        return StructSpec(self.cls, fields)


def _hints(cls):
    try:
        return typing.get_type_hints(cls)
    except Exception:   # (an annotation that does not evaluate: the field's value decides)
        return {f.name: f.type for f in dataclasses.fields(cls)}


def flatten(kname, name, value, check_array, check_scalar, check_vector):
    """(StructSpec, ndarrays, scalar values) of dataclass argument `value`, its fields in order (nested ones
    depth first); `check_*(kname, where, ...)` are arguments.py's checks of one argument of that kind."""
    hints, fields, arrays, scalars = _hints(type(value)), [], [], []
    for f in dataclasses.fields(value):
        v, ann, where = getattr(value, f.name), hints.get(f.name), f"{name}.{f.name}"
        if getattr(v, "_spvad_ndarray", False):
            check_array(kname, where, v)
            fields.append((f.name, ArraySpec(v.dtype, v.ndim, v.grad is not None, v.dual is not None)))
            arrays.append(v)
        elif is_struct(v):
            spec, more_arrays, more_scalars = flatten(kname, where, v, check_array, check_scalar, check_vector)
            fields.append((f.name, spec))
            arrays += more_arrays
            scalars += more_scalars
        elif isinstance(ann, T.TENSOR_TYPES):
            fields.append((f.name, VectorArgSpec(ann)))
            scalars += check_vector(kname, where, ann, v)
        elif type(v) in (bool, int, float) or isinstance(v, np.generic):
            scalar_ann = ann if ann in (bool, int, float) or isinstance(ann, T.DType) else None
            fields.append((f.name, check_scalar(kname, where, scalar_ann, v)))
            scalars.append(v)
        else:
            raise ArgumentError(
                f"kernel {kname}: argument '{name}' ({type(value).__name__}): field '{f.name}' holds a "
                f"{type(v).__name__}; the fields of a dataclass argument may be ndarrays, numbers, vectors or "
                "matrices (annotated with their type, e.g. sp.vec3) and dataclasses of these")
    return StructSpec(type(value), fields), arrays, scalars


class StructValue:
    """A dataclass argument in a kernel: its fields' IR values (ArrayParam, ScalarParam, VecArg, StructValue)."""
    __slots__ = ("name", "fields")

    def __init__(self, name, fields):
        self.name, self.fields = name, fields


def bind_struct(b, name, spec):
    """The StructValue of a dataclass parameter: IR parameters for its fields, made in flatten's order (the
    order a launch binds its ndarrays and scalars in)."""
    fields = {}
    for field, s in spec.fields:
        where = f"{name}.{field}"
        if isinstance(s, ArraySpec):
            p = array_param(b, where, s.dtype, s.ndim, s.needs_grad, s.needs_dual)
            b.param_bindings.append(("array", p))
            fields[field] = p
        elif isinstance(s, StructSpec):
            fields[field] = bind_struct(b, where, s)
        elif isinstance(s, VectorArgSpec):
            params = [N.ScalarParam(f"{where}_{k}", s.dtype.dtype, len(b.kernel.scalars) + k)
                      for k in range(T.vector_width(s.dtype))]
            b.kernel.scalars.extend(params)
            b.param_bindings.append(("vector", tuple(params)))
            fields[field] = VecArg(params, s.dtype.shape)
        else:
            p = N.ScalarParam(where, s, len(b.kernel.scalars))
            b.kernel.scalars.append(p)
            b.param_bindings.append(("scalar", p))
            fields[field] = p
    return StructValue(name, fields)


def struct_attribute(b, value, attr):
    """`s.attr` in a kernel."""
    if attr not in value.fields:
        b.error(f"'{value.name}' has no field '{attr}'")
    v = value.fields[attr]
    if isinstance(v, N.ScalarParam):
        return b.emit(N.ScalarArg(v))
    if isinstance(v, VecArg):
        return shaped([b.emit(N.ScalarArg(p)) for p in v.params], v.shape)
    return v

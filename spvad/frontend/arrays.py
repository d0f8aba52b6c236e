"""ndarrays in kernels: their IR parameters, element reads, stores and atomics (`b` is the kernel builder).

An ndarray of vectors (matrices) is a scalar IR array with one (two) more trailing axes: `x[i]` of an ndarray
of vec3 is three loads, one per component; `x[i][k]` or `x[i, k]` is one.
"""
import ast

import numpy as np

from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op
from .array_lists import ArrayList, ItemSite
from .values import FieldRef, array_type
from .vectors import COMPONENTS, VecValue, shape_words, shaped


def array_param(b, name, dtype, ndim, needs_grad, needs_dual):
    """The IR array of an ndarray; an ndarray of vectors (matrices) is a scalar array with one (two) more
    axes."""
    elem = T.element_shape(dtype)
    p = N.ArrayParam(name, T.element_dtype(dtype), ndim + len(elem), len(b.kernel.arrays), needs_grad, needs_dual,
                     tuple(elem))
    b.kernel.arrays.append(p)
    if elem:
        b.vector_arrays[p] = elem
    return p


def captured_array(b, name, obj, site=None):
    """The IR array of an ndarray a kernel reads by a global (or closure) name, or through `site` (an item of
    a list of them): one parameter per binding, not per object (two names may part at a later launch, which
    binds what each name refers to then)."""
    site = site or b.src.site(name)
    for p, s, _ in b.captured:
        if s.key == site.key:
            return p
    kind = array_type(obj)
    p = array_param(b, name, *kind)
    b.captured.append((p, site, kind))
    return p


def list_item(b, lst, k):
    """`r[k]` of a list (tuple) of ndarrays, for a compile-time integer `k`: the item's array, a nested
    ArrayList, or a constant (a number in the list)."""
    if isinstance(k, bool) or not isinstance(k, int):
        b.error("a list of ndarrays is indexed by compile-time integers (a constant, or the variable of a "
                "sp.static loop: `for level in sp.static(range(3))`)")
    n = len(lst.items)
    if not -n <= k < n:
        b.error(f"index {k} out of range for a list of {n} items")
    site, item = ItemSite(lst.site, k % n), lst.items[k % n]
    if getattr(item, "_spvad_ndarray", False):
        return captured_array(b, site.name, item, site)
    return b.global_object(site.name, item, site)


def list_items(b, value):
    """The items of a list of ndarrays as `r[k]` reads each (`len(r)`, `sp.static(r)`); None for another value."""
    return tuple(list_item(b, value, k) for k in range(len(value.items))) if isinstance(value, ArrayList) else None


# ---- ndarrays of vectors (matrices): trailing storage axes of the element's shape ----
def element_shape(b, arr):
    return b.vector_arrays.get(arr, ())


def element_width(b, arr):
    return int(np.prod(element_shape(b, arr))) if arr in b.vector_arrays else 0


def user_ndim(b, arr):
    """The dimensions of `arr` as its ndarray has them (without a vector's or matrix's axes)."""
    return arr.ndim - len(element_shape(b, arr))


def is_vector_element(b, arr, idx):
    return bool(element_width(b, arr)) and len(idx) == user_ndim(b, arr)


def component_indices(b, arr, idx):
    return [idx + tuple(b.const(k) for k in ks) for ks in np.ndindex(*element_shape(b, arr))]


# ---- access ----
def subscript_target(b, node):
    """(array, field, indices) of `x[i, j]`, also written Taichi-style as `x[i][j]` (a component of a
    vector or matrix element)."""
    parts, inner = [node.slice], node.value
    while isinstance(inner, ast.Subscript):   # x[i][r, c]: the element's indices come first
        parts.insert(0, inner.slice)
        inner = inner.value
    base = b.visit(inner)
    while isinstance(base, ArrayList) and len(parts) > 1:   # r[level][i, j]: the list's item first
        base = list_item(b, base, b.visit(parts.pop(0)))
    arr, field = (base.array, base.field) if isinstance(base, FieldRef) else (base, "primal")
    if not isinstance(arr, N.ArrayParam):
        if len(parts) > 1:
            b.error("only array elements (and their components) can be assigned to")
        b.error("only array elements can be assigned to")
    raw = []
    for sl in parts:
        if isinstance(sl, ast.Constant) and sl.value is None:
            continue
        for v in [b.visit(e) for e in sl.elts] if isinstance(sl, ast.Tuple) else [b.visit(sl)]:
            raw += index_parts(v)
    elem = element_shape(b, arr)
    if len(raw) != arr.ndim and not (elem and len(raw) == user_ndim(b, arr)):
        what = (f"{user_ndim(b, arr)} dimension(s) of {shape_words(elem, plural=True)}" if elem else
                f"{arr.ndim} dimension(s)")
        b.error(f"array '{arr.name}' has {what}, indexed with {len(raw)}")
    idx = tuple(b.cast(b.index_value(i), T.i32) for i in raw)
    return arr, field, idx


def component_target(b, target):
    """`a[i].x` as an assignment target is `a[i][0]` (Taichi's and Warp's component write on an array element,
    or on a row of a matrix local); any other target is returned as it is."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Subscript):
        if target.attr not in COMPONENTS:
            b.error(f"an element has no component '{target.attr}' to assign (use .x .y .z .w or [k])")
        return ast.copy_location(ast.Subscript(target.value, ast.Constant(COMPONENTS[target.attr]), ast.Store()),
                                 target)
    return target


def index_parts(v):
    """The indices an index expression stands for: an integer vector (`x[base + offset]`, `x[sp.Vector([i,
    j])]`) or a tuple gives one per component, as in Taichi."""
    if isinstance(v, tuple):
        return [part for x in v for part in index_parts(x)]
    if isinstance(v, VecValue) and len(v.shape) == 1 and all(c.dtype.is_int for c in v.comps):
        return list(v.comps)
    return [v]


def load_element(b, arr, field, idx):
    if is_vector_element(b, arr, idx):
        comps = [b.emit(N.GlobalLoad(arr, i, field)) for i in component_indices(b, arr, idx)]
        return shaped(comps, element_shape(b, arr))
    return b.emit(N.GlobalLoad(arr, idx, field))


def element_values(b, arr, value):
    """The per-component values stored into a vector (matrix) element (a scalar is broadcast)."""
    shape = element_shape(b, arr)
    if isinstance(value, VecValue):
        if value.shape == shape + (1,):   # a column, sp.Matrix(n, 1) (`M @ c`), stores as the n-vector it is
            value = VecValue(value.comps)
        if value.shape != shape:
            b.error(f"cannot store a {value.name} into an array of {shape_words(shape, plural=True)}")
        return [b.cast(c, arr.dtype) for c in value.comps]
    return [b.cast(value, arr.dtype)] * element_width(b, arr)


def store_element(b, arr, field, idx, value):
    if not is_vector_element(b, arr, idx):
        return b.emit(N.GlobalStore(arr, idx, b.cast(value, arr.dtype), field))
    for i, v in zip(component_indices(b, arr, idx), element_values(b, arr, value)):
        b.emit(N.GlobalStore(arr, i, v, field))


def atomic_element(b, op, arr, field, idx, value, negate=False):
    """Atomic read-modify-write (`op` in ops.ATOMICS), per component for vector elements; returns the
    old value(s)."""
    if not is_vector_element(b, arr, idx):
        v = b.cast(value, arr.dtype)
        return b.emit(N.AtomicRMW(op, arr, idx, b.unary("-", v) if negate else v, field))
    old = []
    for i, v in zip(component_indices(b, arr, idx), element_values(b, arr, value)):
        old.append(b.emit(N.AtomicRMW(op, arr, i, b.unary("-", v) if negate else v, field)))
    return shaped(old, element_shape(b, arr))


# ---- sp.atomic_add / atomic_max / atomic_min ----
def atomic(op):
    """The row of an atomic: its first argument is an element to update (an assignment target), not a value."""
    def row(b, fn, node):
        if len(node.args) != 2 or node.keywords or not isinstance(node.args[0], ast.Subscript):
            b.error(f"sp.{op.value}(x[i], value) takes an array element and a value")
        arr, field, idx = subscript_target(b, node.args[0])
        return atomic_element(b, op, arr, field, idx, b.visit(node.args[1]))
    return row


CALLS = {"atomic_add": atomic(Op.ATOMIC_ADD), "atomic_max": atomic(Op.ATOMIC_MAX),
         "atomic_min": atomic(Op.ATOMIC_MIN)}

"""Vectors and matrices as small local arrays: element reads and writes with runtime indices, list literals
(functions of the kernel builder `b`).

A value is scalarised (one IR value or local slot per component). A runtime index into a value becomes
selects: a read is `k == 0 ? c0 : k == 1 ? c1 : ...`. A runtime index into a local (`buf[k]`, `M[i, j] = v`)
becomes a SlotSelect / SlotStore over its slots with a flat row-major index: primal kernels lower the slots
to one Function-scope array, derivative kernels expand the two into the same selects (ir/slot_arrays.py), so
both autodiff modes stay exact. A runtime index outside [0, n) reads component 0 (element 0 for matrices)
and writes nothing; negative runtime indices are out of range (Python's negative indexing holds for
constants only).
"""
import ast

import numpy as np

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS, py_dtype
from .vectors import VecSlots, VecValue, is_vector, local_component_target, shaped


# ---- keys ----
def element_key(b, shape, key, what):
    """The per-axis indices of `v[key]` for a value of `shape`: ints (checked, negatives wrapped) or i32
    statements; one index per axis, or only the row for a matrix."""
    keys = list(key) if isinstance(key, tuple) else [key]
    if not 1 <= len(keys) <= len(shape):
        b.error(f"a {what} takes {len(shape)} ind{'ex' if len(shape) == 1 else 'ices'}, got {len(keys)}")
    out = []
    for k, n in zip(keys, shape):
        if isinstance(k, VecValue) or isinstance(k, (float, bool)) or (
                isinstance(k, N.Stmt) and not k.dtype.is_int):
            b.error(f"a {what} index must be an integer")
        if isinstance(k, int):
            if not -n <= k < n:
                b.error(f"index {k} out of range for a {what}")
            out.append(k % n)
        elif isinstance(k, N.Stmt):
            out.append(b.cast(k, T.i32))
        else:
            b.error(f"a {what} index must be an integer, got {type(k).__name__}")
    return out


def position_condition(b, keys, position):
    """Does the index tuple `keys` select `position`? A Python bool when the keys are constants."""
    cond = True
    for k, p in zip(keys, position):
        c = (k == p) if isinstance(k, int) else b.compute(N.Op.EQ, k, b.const(p, T.i32))
        if c is False:
            return False
        cond = c if cond is True else (cond if c is True else b.compute(N.Op.AND, cond, c))
    return cond


def choose(b, items, conds):
    """The item whose condition holds: selects on runtime conditions, the first item when none does."""
    pairs = [(i, c) for i, c in zip(items, conds) if c is not False]
    for item, c in pairs:
        if c is True:
            return item
    acc = pairs[0][0]
    for item, c in pairs[1:]:
        acc = b.select(c, item, acc)
    return acc


# ---- reads ----
def read_element(b, v, key):
    """`v[k]` (a vector component), `M[i, j]` (a matrix element), `M[i]` (a matrix row) or `v[a:b]` (a
    shorter vector, constant bounds)."""
    if isinstance(key, slice):
        comps = v.comps[key] if len(v.shape) == 1 else b.error(f"a {v.name} cannot be sliced (only vectors)")
        return VecValue(comps) if comps else b.error(f"the slice [{key.start}:{key.stop}:{key.step}] of a "
                                                     f"{v.name} is empty")
    keys = element_key(b, v.shape, key, v.name)
    if len(keys) < len(v.shape):   # M[i]: a row
        rows = range(v.shape[0])
        return choose(b, [v.row(i) for i in rows], [position_condition(b, keys, (i,)) for i in rows])
    return choose(b, v.comps, [position_condition(b, keys, p) for p in positions(v.shape)])


# ---- tuples: local ones, and the constant lists and tuples of the enclosing scope ----
def tuple_item(b, items, k):
    """`t[k]`: the item for a compile-time k (Python's indexing, negatives too); for a runtime k, selects over
    the items (numbers or kernel values, or equal-length rows of them), as for a vector or matrix value."""
    if isinstance(k, slice):
        return items[k]
    if isinstance(k, int) and not isinstance(k, bool):
        if not -len(items) <= k < len(items):
            b.error(f"index {k} out of range for a tuple of {len(items)}")
        return items[k]
    if not (isinstance(k, N.Stmt) and k.dtype.is_int):
        b.error("tuples and lists can only be indexed with integers")
    return read_element(b, tuple_value(b, items), k)


def tuple_value(b, items):
    """A tuple of scalars as a vector value; of equal-length rows (tuples of scalars, vectors) as a matrix."""
    scalar = (N.Stmt,) + PY_SCALARS
    rows = [tuple(i.comps) if is_vector(i) else i for i in items]
    if all(isinstance(i, scalar) for i in rows):
        flat, shape = rows, (len(rows),)
    elif all(isinstance(r, tuple) and len(r) == len(rows[0]) and all(isinstance(x, scalar) for x in r)
             for r in rows):
        flat, shape = [x for r in rows for x in r], (len(rows), len(rows[0]))
    else:
        b.error("a tuple or list indexed at run time must hold numbers, or equal-length rows of numbers")
    if not flat or len(flat) > T.MAX_COMPONENTS:
        b.error(f"a tuple or list indexed at run time holds 1 to {T.MAX_COMPONENTS} numbers, this one "
                f"{len(flat)}: put a larger table in an ndarray (sp.from_numpy)")
    dt = common_dtype(flat)
    return shaped([b.cast(x, dt) for x in flat], shape)


def constant_items(obj):
    """A list or tuple of numbers (or of such lists) from the enclosing scope as nested tuples of Python
    numbers (compile-time constants, as Python numbers are); None for anything else."""
    items = []
    for x in obj:
        if isinstance(x, (list, tuple)):
            x = constant_items(x)
        elif isinstance(x, np.generic) and x.dtype.kind in "biuf":
            x = x.item()
        if x is None or not isinstance(x, PY_SCALARS + (tuple,)):
            return None
        items.append(x)
    return tuple(items)


# ---- locals addressed at run time: SlotSelect / SlotStore (ir/slot_arrays.py) ----
def local_group(b, node):
    """(name, VecSlots) of the local `node` (a subscript) indexes directly, or None."""
    name = getattr(node.value, "id", None)
    slots = b.scope.names.get(name) if isinstance(name, str) else None
    return (name, slots) if isinstance(slots, VecSlots) else None


def read_local_element(b, name, slots, key):
    """`buf[k]`, `M[i, j]` or `M[i]` of a local when an index is a runtime value; None when all are
    constants (the caller then reads the loaded value)."""
    if isinstance(key, slice):   # constant bounds: the caller reads the loaded value
        return None
    keys = element_key(b, slots.shape, key, slots_name(slots))
    if all(isinstance(k, int) for k in keys):
        return None
    b.check_same_task(name, slots)
    if len(slots.shape) == 2 and len(keys) == 1:   # a row
        return VecValue(b.emit(N.SlotSelect(slots.slots, i)) for i in row_indices(b, keys[0], slots, 0))
    return b.emit(N.SlotSelect(slots.slots, flat_index(b, keys, slots, write=False)))


def store_local_element(b, name, slots, keys, value, sym):
    """`buf[k] = value` / `buf[k] <sym>= value` (also `M[i, j]`, `M[i]`) with a runtime index."""
    b.check_same_task(name, slots)
    what = slots_name(slots)
    if len(slots.shape) == 2 and len(keys) == 1:   # a row
        value = row_value(b, value, slots.shape[1], what)
        indices = row_indices(b, keys[0], slots, len(slots.slots))
        parts = [value.comps[c] if isinstance(value, VecValue) else value for c in range(slots.shape[1])]
    else:
        indices, parts = [flat_index(b, keys, slots, write=True)], [value]
    for index, part in zip(indices, parts):
        new = part if sym is None else b.binop(sym, b.emit(N.SlotSelect(slots.slots, index)), part)
        if isinstance(new, VecValue):
            b.error(f"cannot store a {new.name} into an element of '{name}'")
        b.emit(N.SlotStore(slots.slots, index, b.stored_value(name, slots.slots[0], new)))


def slots_name(slots):
    return shaped([N.Const(0, s.dtype) for s in slots.slots], slots.shape).name


def flat_index(b, keys, slots, write):
    """The row-major index of `keys` (one per axis). Where one is out of range: the group's length for a
    write (it stores nothing); for a read, the element with the runtime indices at 0, which is what
    the select form reads (the first element whose constant indices match)."""
    if len(keys) == 1:
        return index_value32(b, keys[0])
    (i, j), (rows, cols) = keys, slots.shape
    ok = both(b, in_range(b, i, rows), in_range(b, j, cols))
    flat = add_i32(b, mul_i32(b, i, cols), j)
    fallback = len(slots.slots) if write else (i if isinstance(i, int) else 0) * cols + (
        j if isinstance(j, int) else 0)
    return pick(b, ok, flat, fallback)


def row_indices(b, i, slots, outside):
    """Flat indices of the elements of row `i` of a matrix local; `outside` where `i` is out of range
    (0: a read gives row 0, as the select form does; the group's length: a write stores nothing)."""
    cols = slots.shape[1]
    ok = in_range(b, i, slots.shape[0])
    return [pick(b, ok, add_i32(b, mul_i32(b, i, cols), c), c if outside == 0 else outside)
            for c in range(cols)]


def in_range(b, k, n):
    if isinstance(k, int):
        return 0 <= k < n
    as_u32 = b.cast(k, T.u32)   # negatives wrap to large values: one unsigned compare
    return b.compute(N.Op.LT, as_u32, b.const(n, T.u32))


def both(b, x, y):
    if isinstance(x, bool) or isinstance(y, bool):
        return (y if x else False) if isinstance(x, bool) else (x if y else False)
    return b.compute(N.Op.AND, x, y)


def pick(b, ok, value, otherwise):
    if isinstance(ok, bool):
        return index_value32(b, value if ok else otherwise)
    return b.select(ok, index_value32(b, value), index_value32(b, otherwise))


def mul_i32(b, k, c):
    return k * c if isinstance(k, int) else b.compute(N.Op.MUL, k, b.const(c, T.i32))


def add_i32(b, x, y):
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    return b.compute(N.Op.ADD, index_value32(b, x), index_value32(b, y))


def index_value32(b, k):
    return b.const(k, T.i32) if isinstance(k, int) else b.cast(k, T.i32)


# ---- writes into locals ----
def local_array_name(b, target):
    """The name of the vector / matrix local that `target` (`v[k]`, `M[i, j]`, `M[i][j]`, `v.x`)
    assigns into, or None."""
    base = target
    while isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(target, ast.Attribute):
        base = target.value
    name = getattr(base, "id", None)
    return name if isinstance(name, str) and isinstance(b.scope.names.get(name), VecSlots) else None


def assign_local_element(b, target, value, sym=None):
    """`v[k] = value` (`sym` None) or `v[k] <sym>= value` into a vector / matrix local, k constant or not."""
    if isinstance(target, ast.Attribute):   # v.x = ...
        name, slot = local_component_target(b, target)
        new = value if sym is None else b.binop(sym, b.emit(N.LocalLoad(slot)), value)
        return b.store_local(name, slot, new)
    keys, node = [], target
    while isinstance(node, ast.Subscript):
        k = b.visit(node.slice)
        keys[:0] = list(k) if isinstance(k, tuple) else [k]
        node = node.value
    name = node.id
    slots = b.scope.names[name]
    b.check_same_task(name, slots)
    what = slots_name(slots)
    if len(keys) == 1 and isinstance(keys[0], slice):
        return assign_local_slice(b, name, slots, keys[0], value, sym)
    keys = element_key(b, slots.shape, tuple(keys), what)
    if not all(isinstance(k, int) for k in keys):
        return store_local_element(b, name, slots, keys, value, sym)
    row = len(slots.shape) == 2 and len(keys) == 1
    if row:   # M[i] = row
        value = row_value(b, value, slots.shape[1], what)
    elif isinstance(value, VecValue):
        b.error(f"cannot store a {value.name} into an element of '{name}'")
    for flat, position in enumerate(positions(slots.shape)):
        cond = position_condition(b, keys, position)
        if cond is False:
            continue
        part = value.comps[position[1]] if row and isinstance(value, VecValue) else value
        slot = slots.slots[flat]
        old = b.emit(N.LocalLoad(slot)) if sym is not None or cond is not True else None
        new = part if sym is None else b.binop(sym, old, part)
        if isinstance(new, VecValue):
            b.error(f"cannot store a {new.name} into an element of '{name}'")
        if cond is not True:
            new = b.select(cond, new, old)
        b.store_local(f"{name}[{', '.join(map(str, position))}]", slot, new)


def assign_local_slice(b, name, slots, key, value, sym):
    """`v[a:b] = w` (`v[a:b] <sym>= w`) into a vector local, constant bounds: w a vector of the slice's
    length, or a scalar for each component."""
    picked = range(slots.shape[0])[key] if len(slots.shape) == 1 else b.error(
        f"a {slots_name(slots)} cannot be sliced (only vectors)")
    if not picked or (isinstance(value, VecValue) and value.shape != (len(picked),)):
        b.error(f"the slice [{key.start}:{key.stop}:{key.step}] of '{name}' has {len(picked)} components, "
                f"cannot assign a {value.name if isinstance(value, VecValue) else 'scalar'} to it")
    for j, k in enumerate(picked):
        part = value.comps[j] if isinstance(value, VecValue) else value
        new = part if sym is None else b.binop(sym, b.emit(N.LocalLoad(slots.slots[k])), part)
        b.store_local(f"{name}[{k}]", slots.slots[k], new)


def positions(shape):
    return [(j,) for j in range(shape[0])] if len(shape) == 1 else [
        (i, j) for i in range(shape[0]) for j in range(shape[1])]


def row_value(b, value, cols, what):
    if isinstance(value, VecValue) and value.shape != (cols,):
        b.error(f"a row of a {what} is a {cols}-vector, got a {value.name}")
    return value


# ---- list literals ----
def list_literal(b, node):
    """`[a, b, c]`: a local vector; `[[a, b], [c, d]]` (or a list of equal vectors): a matrix."""
    items = [b.visit(e) for e in node.elts]
    if not items:
        b.error("an empty list is not supported in a kernel")
    if all(isinstance(i, (N.Stmt,) + PY_SCALARS) for i in items):
        return scalar_list(b, items)
    if all(is_vector(i) for i in items):
        widths = {i.n for i in items}
        if len(widths) != 1:
            b.error("the rows of a matrix literal must have one length")
        cols = widths.pop()
        if len(items) * cols > T.MAX_COMPONENTS:
            b.error(f"a {len(items)}x{cols} matrix has more than {T.MAX_COMPONENTS} components")
        comps = [c for row in items for c in row.comps]
        dt = common_dtype(comps)
        return shaped([b.cast(c, dt) for c in comps], (len(items), cols))
    b.error("a list in a kernel must hold scalars (a vector) or equal-length rows (a matrix)")


def scalar_list(b, items):
    if len(items) > T.MAX_COMPONENTS:
        b.error(f"a local vector holds at most {T.MAX_COMPONENTS} components, got {len(items)}")
    dt = common_dtype(items)
    return VecValue(b.cast(i, dt) for i in items)


def common_dtype(items):
    dts = [i.dtype if isinstance(i, N.Stmt) else py_dtype(i) for i in items]
    dt = dts[0]
    for d in dts[1:]:
        dt = T.promote(dt, d) if d != dt else dt
    return T.i32 if dt.is_bool else dt


def repeated_list(b, node):
    """`[x] * n` / `n * [x]` with a compile-time n: Python's list repetition, not a product."""
    lst, count = (node.left, node.right) if isinstance(node.left, ast.List) else (node.right, node.left)
    n = b.visit(count)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        b.error("a list can only be repeated a positive compile-time number of times")
    items = [b.visit(e) for e in lst.elts] * n
    if not all(isinstance(i, (N.Stmt,) + PY_SCALARS) for i in items):
        b.error("only lists of scalars can be repeated")
    return scalar_list(b, items)

"""Vectors and matrices as small local arrays: element reads and writes with runtime indices, list literals.

A value is scalarised (one IR value or local slot per component). A runtime index into a value becomes
selects: a read is `k == 0 ? c0 : k == 1 ? c1 : ...`. A runtime index into a local (`buf[k]`, `M[i, j] = v`)
becomes a SlotSelect / SlotStore over its slots with a flat row-major index: primal kernels lower the slots
to one Function-scope array, derivative kernels expand the two into the same selects (ir/slot_arrays.py), so
both autodiff modes stay exact. A runtime index outside [0, n) reads component 0 (element 0 for matrices)
and writes nothing; negative runtime indices are out of range (Python's negative indexing holds for
constants only).
"""
import ast

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS, py_dtype
from .vectors import VecSlots, VecValue, is_vector, shaped


class LocalArraysMixin:
    # ---- keys ----
    def element_key(self, shape, key, what):
        """The per-axis indices of `v[key]` for a value of `shape`: ints (checked, negatives wrapped) or i32
        statements; one index per axis, or only the row for a matrix."""
        keys = list(key) if isinstance(key, tuple) else [key]
        if not 1 <= len(keys) <= len(shape):
            self.error(f"a {what} takes {len(shape)} ind{'ex' if len(shape) == 1 else 'ices'}, got {len(keys)}")
        out = []
        for k, n in zip(keys, shape):
            if isinstance(k, VecValue) or isinstance(k, (float, bool)) or (
                    isinstance(k, N.Stmt) and not k.dtype.is_int):
                self.error(f"a {what} index must be an integer")
            if isinstance(k, int):
                if not -n <= k < n:
                    self.error(f"index {k} out of range for a {what}")
                out.append(k % n)
            elif isinstance(k, N.Stmt):
                out.append(self.cast(k, T.i32))
            else:
                self.error(f"a {what} index must be an integer, got {type(k).__name__}")
        return out

    def position_condition(self, keys, position):
        """Does the index tuple `keys` select `position`? A Python bool when the keys are constants."""
        cond = True
        for k, p in zip(keys, position):
            c = (k == p) if isinstance(k, int) else self.compute(N.Op.EQ, k, self.const(p, T.i32))
            if c is False:
                return False
            cond = c if cond is True else (cond if c is True else self.compute(N.Op.AND, cond, c))
        return cond

    def choose(self, items, conds):
        """The item whose condition holds: selects on runtime conditions, the first item when none does."""
        pairs = [(i, c) for i, c in zip(items, conds) if c is not False]
        for item, c in pairs:
            if c is True:
                return item
        acc = pairs[0][0]
        for item, c in pairs[1:]:
            acc = self.select(c, item, acc)
        return acc

    # ---- reads ----
    def read_element(self, v, key):
        """`v[k]` (a vector component), `M[i, j]` (a matrix element) or `M[i]` (a matrix row)."""
        keys = self.element_key(v.shape, key, v.name)
        if len(keys) < len(v.shape):   # M[i]: a row
            rows = range(v.shape[0])
            return self.choose([v.row(i) for i in rows], [self.position_condition(keys, (i,)) for i in rows])
        return self.choose(v.comps, [self.position_condition(keys, p) for p in self.positions(v.shape)])

    # ---- locals addressed at run time: SlotSelect / SlotStore (ir/slot_arrays.py) ----
    def local_group(self, node):
        """(name, VecSlots) of the local `node` (a subscript) indexes directly, or None."""
        name = getattr(node.value, "id", None)
        slots = self.scope.names.get(name) if isinstance(name, str) else None
        return (name, slots) if isinstance(slots, VecSlots) else None

    def read_local_element(self, name, slots, key):
        """`buf[k]`, `M[i, j]` or `M[i]` of a local when an index is a runtime value; None when all are
        constants (the caller then reads the loaded value)."""
        keys = self.element_key(slots.shape, key, self.slots_name(slots))
        if all(isinstance(k, int) for k in keys):
            return None
        self.check_same_task(name, slots)
        if len(slots.shape) == 2 and len(keys) == 1:   # a row
            return VecValue(self.emit(N.SlotSelect(slots.slots, i)) for i in self.row_indices(keys[0], slots, 0))
        return self.emit(N.SlotSelect(slots.slots, self.flat_index(keys, slots, write=False)))

    def store_local_element(self, name, slots, keys, value, sym):
        """`buf[k] = value` / `buf[k] <sym>= value` (also `M[i, j]`, `M[i]`) with a runtime index."""
        self.check_same_task(name, slots)
        what = self.slots_name(slots)
        if len(slots.shape) == 2 and len(keys) == 1:   # a row
            value = self.row_value(value, slots.shape[1], what)
            indices = self.row_indices(keys[0], slots, len(slots.slots))
            parts = [value.comps[c] if isinstance(value, VecValue) else value for c in range(slots.shape[1])]
        else:
            indices, parts = [self.flat_index(keys, slots, write=True)], [value]
        dtype = slots.slots[0].dtype
        for index, part in zip(indices, parts):
            new = part if sym is None else self.binop(sym, self.emit(N.SlotSelect(slots.slots, index)), part)
            if isinstance(new, VecValue):
                self.error(f"cannot store a {new.name} into an element of '{name}'")
            self.emit(N.SlotStore(slots.slots, index, self.stored_value(name, dtype, new)))

    def slots_name(self, slots):
        return shaped([N.Const(0, s.dtype) for s in slots.slots], slots.shape).name

    def flat_index(self, keys, slots, write):
        """The row-major index of `keys` (one per axis). Where one is out of range: the group's length for a
        write (it stores nothing); for a read, the element with the runtime indices at 0, which is what
        the select form reads (the first element whose constant indices match)."""
        if len(keys) == 1:
            return self.index_value32(keys[0])
        (i, j), (rows, cols) = keys, slots.shape
        ok = self.both(self.in_range(i, rows), self.in_range(j, cols))
        flat = self.add_i32(self.mul_i32(i, cols), j)
        fallback = len(slots.slots) if write else (i if isinstance(i, int) else 0) * cols + (
            j if isinstance(j, int) else 0)
        return self.pick(ok, flat, fallback)

    def row_indices(self, i, slots, outside):
        """Flat indices of the elements of row `i` of a matrix local; `outside` where `i` is out of range
        (0: a read gives row 0, as the select form does; the group's length: a write stores nothing)."""
        cols = slots.shape[1]
        ok = self.in_range(i, slots.shape[0])
        return [self.pick(ok, self.add_i32(self.mul_i32(i, cols), c), c if outside == 0 else outside)
                for c in range(cols)]

    def in_range(self, k, n):
        if isinstance(k, int):
            return 0 <= k < n
        as_u32 = self.cast(k, T.u32)   # negatives wrap to large values: one unsigned compare
        return self.compute(N.Op.LT, as_u32, self.const(n, T.u32))

    def both(self, a, b):
        if isinstance(a, bool) or isinstance(b, bool):
            return (b if a else False) if isinstance(a, bool) else (a if b else False)
        return self.compute(N.Op.AND, a, b)

    def pick(self, ok, value, otherwise):
        if isinstance(ok, bool):
            return self.index_value32(value if ok else otherwise)
        return self.select(ok, self.index_value32(value), self.index_value32(otherwise))

    def mul_i32(self, k, c):
        return k * c if isinstance(k, int) else self.compute(N.Op.MUL, k, self.const(c, T.i32))

    def add_i32(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        return self.compute(N.Op.ADD, self.index_value32(a), self.index_value32(b))

    def index_value32(self, k):
        return self.const(k, T.i32) if isinstance(k, int) else self.cast(k, T.i32)

    # ---- writes into locals ----
    def local_array_name(self, target):
        """The name of the vector / matrix local that `target` (`v[k]`, `M[i, j]`, `M[i][j]`, `v.x`)
        assigns into, or None."""
        base = target
        while isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(target, ast.Attribute):
            base = target.value
        name = getattr(base, "id", None)
        return name if isinstance(name, str) and isinstance(self.scope.names.get(name), VecSlots) else None

    def assign_local_element(self, target, value, sym=None):
        """`v[k] = value` (`sym` None) or `v[k] <sym>= value` into a vector / matrix local, k constant or not."""
        if isinstance(target, ast.Attribute):   # v.x = ...
            name, slot = self.local_component_target(target)
            new = value if sym is None else self.binop(sym, self.emit(N.LocalLoad(slot)), value)
            return self.store_local(name, slot, new)
        keys, node = [], target
        while isinstance(node, ast.Subscript):
            k = self.visit(node.slice)
            keys[:0] = list(k) if isinstance(k, tuple) else [k]
            node = node.value
        name = node.id
        slots = self.scope.names[name]
        self.check_same_task(name, slots)
        what = self.slots_name(slots)
        keys = self.element_key(slots.shape, tuple(keys), what)
        if not all(isinstance(k, int) for k in keys):
            return self.store_local_element(name, slots, keys, value, sym)
        row = len(slots.shape) == 2 and len(keys) == 1
        if row:   # M[i] = row
            value = self.row_value(value, slots.shape[1], what)
        elif isinstance(value, VecValue):
            self.error(f"cannot store a {value.name} into an element of '{name}'")
        for flat, position in enumerate(self.positions(slots.shape)):
            cond = self.position_condition(keys, position)
            if cond is False:
                continue
            part = value.comps[position[1]] if row and isinstance(value, VecValue) else value
            slot = slots.slots[flat]
            old = self.emit(N.LocalLoad(slot)) if sym is not None or cond is not True else None
            new = part if sym is None else self.binop(sym, old, part)
            if isinstance(new, VecValue):
                self.error(f"cannot store a {new.name} into an element of '{name}'")
            if cond is not True:
                new = self.select(cond, new, old)
            self.store_local(f"{name}[{', '.join(map(str, position))}]", slot, new)

    @staticmethod
    def positions(shape):
        return [(j,) for j in range(shape[0])] if len(shape) == 1 else [
            (i, j) for i in range(shape[0]) for j in range(shape[1])]

    def row_value(self, value, cols, what):
        if isinstance(value, VecValue) and value.shape != (cols,):
            self.error(f"a row of a {what} is a {cols}-vector, got a {value.name}")
        return value

    # ---- list literals ----
    def list_literal(self, node):
        """`[a, b, c]`: a local vector; `[[a, b], [c, d]]` (or a list of equal vectors): a matrix."""
        items = [self.visit(e) for e in node.elts]
        if not items:
            self.error("an empty list is not supported in a kernel")
        if all(isinstance(i, (N.Stmt,) + PY_SCALARS) for i in items):
            return self.scalar_list(items)
        if all(is_vector(i) for i in items):
            widths = {i.n for i in items}
            if len(widths) != 1:
                self.error("the rows of a matrix literal must have one length")
            cols = widths.pop()
            if len(items) * cols > T.MAX_COMPONENTS:
                self.error(f"a {len(items)}x{cols} matrix has more than {T.MAX_COMPONENTS} components")
            comps = [c for row in items for c in row.comps]
            dt = self.common_dtype(comps)
            return shaped([self.cast(c, dt) for c in comps], (len(items), cols))
        self.error("a list in a kernel must hold scalars (a vector) or equal-length rows (a matrix)")

    def scalar_list(self, items):
        if len(items) > T.MAX_COMPONENTS:
            self.error(f"a local vector holds at most {T.MAX_COMPONENTS} components, got {len(items)}")
        dt = self.common_dtype(items)
        return VecValue(self.cast(i, dt) for i in items)

    def common_dtype(self, items):
        dts = [i.dtype if isinstance(i, N.Stmt) else py_dtype(i) for i in items]
        dt = dts[0]
        for d in dts[1:]:
            dt = T.promote(dt, d) if d != dt else dt
        return T.i32 if dt.is_bool else dt

    def repeated_list(self, node):
        """`[x] * n` / `n * [x]` with a compile-time n: Python's list repetition, not a product."""
        lst, count = (node.left, node.right) if isinstance(node.left, ast.List) else (node.right, node.left)
        n = self.visit(count)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            self.error("a list can only be repeated a positive compile-time number of times")
        items = [self.visit(e) for e in lst.elts] * n
        if not all(isinstance(i, (N.Stmt,) + PY_SCALARS) for i in items):
            self.error("only lists of scalars can be repeated")
        return self.scalar_list(items)

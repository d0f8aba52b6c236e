"""Vectors in kernels, scalarised by the frontend: a vector value is a tuple of scalar IR values (a matrix,
MatValue, is one with a 2-D shape; its own operations live in matrices).

Element-wise arithmetic and math, dot/cross/length/normalize, vector locals (one slot per component),
vector returns of `@sp.func`s and ndarrays of vectors (a trailing storage axis) all become scalar IR, so
the IR, the SPIR-V lowering and both autodiff modes never see a vector.
"""
import functools

import numpy as np

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import Op

COMPONENTS = {"x": 0, "y": 1, "z": 2, "w": 3}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
VECTOR_BUILTINS = ("dot", "cross", "length", "normalize")


class VecValue:
    """A vector value in a kernel: one typed scalar IR statement per component."""
    __slots__ = ("comps",)

    def __init__(self, comps):
        self.comps = tuple(comps)

    @property
    def n(self):
        return len(self.comps)

    @property
    def shape(self):
        return (len(self.comps),)

    def with_comps(self, comps):
        """A value of this one's shape holding `comps` (element-wise results keep matrices matrices)."""
        return shaped(comps, self.shape)

    @property
    def name(self):
        dtypes = {c.dtype for c in self.comps}
        dt = dtypes.pop() if len(dtypes) == 1 else None
        return T.Vector(self.n, dt).name if dt in (T.f32, T.f64, T.i32, T.u32) else f"{self.n}-vector"


class MatValue(VecValue):
    """A matrix value in a kernel: `rows * cols` scalar IR statements, row-major (a VecValue with a 2-D shape,
    so locals, returns, selects and casts of vectors work on matrices unchanged)."""
    __slots__ = ("rows", "cols")

    def __init__(self, comps, rows, cols):
        super().__init__(comps)
        self.rows, self.cols = rows, cols
        assert len(self.comps) == rows * cols

    @property
    def shape(self):
        return (self.rows, self.cols)

    def row(self, i):
        return VecValue(self.comps[i * self.cols:(i + 1) * self.cols])

    def at(self, i, j):
        return self.comps[i * self.cols + j]

    @property
    def name(self):
        dtypes = {c.dtype for c in self.comps}
        dt = dtypes.pop() if len(dtypes) == 1 else None
        if dt in (T.f32, T.f64, T.i32, T.u32):
            return T.Matrix(self.rows, self.cols, dt).name
        return f"{self.rows}x{self.cols} matrix"


def shaped(comps, shape):
    """A VecValue (1-D shape) or MatValue (2-D shape) of `comps`."""
    return MatValue(comps, *shape) if len(shape) == 2 else VecValue(comps)


def is_vector(v):
    """A vector value (not a matrix)."""
    return isinstance(v, VecValue) and len(v.shape) == 1


def shape_words(shape, plural=False):
    """`shape` in error messages: "3-vector(s)" or "2x3 matri(x|ces)"."""
    if len(shape) == 1:
        return f"{shape[0]}-vector" + "s" * plural
    return "x".join(map(str, shape)) + (" matrices" if plural else " matrix")


class VecSlots:
    """A vector (or matrix) local: one Alloca per component (named v_0, v_1, ...)."""
    __slots__ = ("slots", "shape")

    def __init__(self, slots, shape=None):
        self.slots = tuple(slots)
        self.shape = shape or (len(self.slots),)


class VecArg:
    """A vector (or matrix) kernel argument: one ScalarParam (push constant) per component."""
    __slots__ = ("params", "shape")

    def __init__(self, params, shape=None):
        self.params = tuple(params)
        self.shape = shape or (len(self.params),)


class VectorsMixin:
    """Vector-aware overrides of the Emitter's operators, and the vector parts of the frontend visitor."""

    # ---- scalar contexts refuse vectors ----
    def typed(self, v, like=None):
        if isinstance(v, VecValue):
            self.error(f"expected a scalar, got a {v.name}")
        return super().typed(v, like)

    def to_bool(self, v):
        if isinstance(v, VecValue):
            self.error(f"a {v.name} cannot be used as a condition (compare its components instead)")
        return super().to_bool(v)

    # ---- element-wise operators ----
    def elementwise(self, fn, *args):
        """`fn` applied per component; vectors (matrices) must have one shape, scalars are broadcast."""
        shapes = {a.shape for a in args if isinstance(a, VecValue)}
        if len(shapes) > 1:
            names = " and ".join(sorted({a.name for a in args if isinstance(a, VecValue)}))
            what = "vector widths" if all(len(sh) == 1 for sh in shapes) else "shapes"
            self.error(f"{what} differ: {names}")
        like = next(a for a in args if isinstance(a, VecValue))
        return like.with_comps(fn(*[a.comps[k] if isinstance(a, VecValue) else a for a in args])
                               for k in range(like.n))

    def binop(self, sym, a, b):
        if not isinstance(a, VecValue) and not isinstance(b, VecValue):
            return super().binop(sym, a, b)
        if sym in COMPARISONS:
            self.error("comparing vectors is not supported (compare their components)")
        self.require_vector_operand(a)
        self.require_vector_operand(b)
        base = super().binop
        return self.elementwise(lambda x, y: base(sym, x, y), a, b)

    def require_vector_operand(self, v):
        if not isinstance(v, (VecValue, N.Stmt) + PY_SCALARS):
            self.error(f"cannot combine a vector with {type(v).__name__}")

    def unary(self, sym, v):
        if not isinstance(v, VecValue):
            return super().unary(sym, v)
        if sym == "not":
            self.error(f"'not' needs a scalar, got a {v.name}")
        base = super().unary
        return self.elementwise(lambda x: base(sym, x), v)

    def math1(self, op, v):
        if not isinstance(v, VecValue):
            return super().math1(op, v)
        base = super().math1
        return self.elementwise(lambda x: base(op, x), v)

    def minmax(self, op, *vals):
        if not any(isinstance(v, VecValue) for v in vals):
            return super().minmax(op, *vals)
        if len(vals) < 2:
            self.error("min/max need at least two arguments")
        base, acc = super().minmax, vals[0]
        for v in vals[1:]:
            acc = self.elementwise(lambda x, y: base(op, x, y), acc, v)
        return acc

    def select(self, cond, a, b):
        if not isinstance(a, VecValue) and not isinstance(b, VecValue):
            return super().select(cond, a, b)
        cond = self.to_bool(cond)
        if isinstance(cond, bool):
            return a if cond else b
        base = super().select
        return self.elementwise(lambda x, y: base(cond, x, y), a, b)

    def cast_any(self, v, dtype):
        """`sp.cast(v, dtype)` / `sp.f64(v)`: element-wise for vectors; a Vector dtype converts a vector."""
        if isinstance(dtype, T.Vector):
            return self.make_vector(dtype, [v])
        if isinstance(v, VecValue):
            return self.elementwise(lambda x: self.cast(x, dtype), v)
        return self.cast(v, dtype)

    # ---- construction and components ----
    def make_vector(self, vtype, args):
        """`sp.vec3(a, b, c)`: GLSL-style, from n scalars and vectors in total, or one scalar broadcast."""
        flat = []
        for a in args:
            if isinstance(a, VecValue) and len(a.shape) == 2:
                self.error(f"{vtype.name}(...) takes scalars and vectors, got a {a.name}")
            if isinstance(a, VecValue):
                flat.extend(a.comps)
            elif isinstance(a, (N.Stmt,) + PY_SCALARS):
                flat.append(a)
            else:
                self.error(f"{vtype.name}(...) takes scalars and vectors, got {type(a).__name__}")
        if len(flat) == 1 and not isinstance(args[0], VecValue):
            flat = flat * vtype.n
        if len(flat) != vtype.n:
            self.error(f"{vtype.name}(...) needs {vtype.n} components, got {len(flat)}")
        return VecValue(self.cast(c, vtype.dtype) for c in flat)

    def swizzle(self, v, attr):
        if not 1 <= len(attr) <= 4 or any(c not in COMPONENTS for c in attr):
            self.error(f"vectors have no attribute '{attr}' (use .x .y .z .w or v[k])")
        comps = [self.component(v, COMPONENTS[c]) for c in attr]
        return comps[0] if len(comps) == 1 else VecValue(comps)

    def constant_vector(self, obj):
        """A small 1-D numpy array from the enclosing scope (e.g. `G = sp.vec2(0, -9.8)`) is a constant
        vector, as Python numbers are constants; float components become f32 as Python floats do."""
        dt = T.from_numpy_dtype(obj.dtype)
        if dt is None or dt.is_bool:
            return None
        dt = T.f32 if dt.is_float else dt
        return VecValue(self.const(x, dt) for x in obj.tolist())

    # ---- dot, cross, length, normalize ----
    def vector_builtin(self, name, args):
        want = 1 if name in ("length", "normalize") else 2
        if len(args) != want or not all(is_vector(a) for a in args):
            self.error(f"sp.{name} takes {want} vector argument{'s' if want > 1 else ''}")
        if name == "dot":
            return self.dot(*args)
        if name == "cross":
            a, b = args
            if a.n != 3 or b.n != 3:
                self.error(f"sp.cross needs two 3-vectors, got {a.name} and {b.name}")
            return VecValue(self.cross_comps(a.comps, b.comps))
        length = self.math1(Op.SQRT, self.dot(args[0], args[0]))
        if name == "length":
            return length
        inv = self.binop("/", 1.0, length)
        return self.binop("*", args[0], inv)

    def dot(self, a, b):
        return self.sum_of(self.binop("*", a, b).comps)

    def cross_comps(self, a, b):
        """The components of the cross product of two 3-component lists."""
        return [self.binop("-", self.binop("*", a[i], b[j]), self.binop("*", a[j], b[i]))
                for i, j in [(1, 2), (2, 0), (0, 1)]]

    def sum_of(self, values):
        """values[0] + values[1] + ..., added left to right."""
        return functools.reduce(lambda acc, v: self.binop("+", acc, v), values)

    # ---- ndarrays of vectors (matrices): trailing storage axes of the element's shape ----
    def array_element_shape(self, arr):
        return self.vector_arrays.get(arr, ())

    def array_width(self, arr):
        return int(np.prod(self.array_element_shape(arr))) if arr in self.vector_arrays else 0

    def user_ndim(self, arr):
        return arr.ndim - len(self.array_element_shape(arr))

    def is_vector_element(self, arr, idx):
        return bool(self.array_width(arr)) and len(idx) == self.user_ndim(arr)

    def component_indices(self, arr, idx):
        return [idx + tuple(self.const(k) for k in ks) for ks in np.ndindex(*self.array_element_shape(arr))]

    def load_element(self, arr, field, idx):
        if self.is_vector_element(arr, idx):
            comps = [self.emit(N.GlobalLoad(arr, i, field)) for i in self.component_indices(arr, idx)]
            return shaped(comps, self.array_element_shape(arr))
        return self.emit(N.GlobalLoad(arr, idx, field))

    def element_values(self, arr, value):
        """The per-component values stored into a vector (matrix) element (a scalar is broadcast)."""
        shape = self.array_element_shape(arr)
        if isinstance(value, VecValue):
            if value.shape != shape:
                self.error(f"cannot store a {value.name} into an array of {shape_words(shape, plural=True)}")
            return [self.cast(c, arr.dtype) for c in value.comps]
        return [self.cast(value, arr.dtype)] * self.array_width(arr)

    def store_element(self, arr, field, idx, value):
        if not self.is_vector_element(arr, idx):
            return self.emit(N.GlobalStore(arr, idx, self.cast(value, arr.dtype), field))
        for i, v in zip(self.component_indices(arr, idx), self.element_values(arr, value)):
            self.emit(N.GlobalStore(arr, i, v, field))

    def atomic_element(self, op, arr, field, idx, value, negate=False):
        """Atomic read-modify-write (`op` in ops.ATOMICS), per component for vector elements; returns the
        old value(s)."""
        if not self.is_vector_element(arr, idx):
            v = self.cast(value, arr.dtype)
            return self.emit(N.AtomicRMW(op, arr, idx, self.unary("-", v) if negate else v, field))
        old = []
        for i, v in zip(self.component_indices(arr, idx), self.element_values(arr, value)):
            old.append(self.emit(N.AtomicRMW(op, arr, i, self.unary("-", v) if negate else v, field)))
        return shaped(old, self.array_element_shape(arr))

    # ---- vector locals ----
    def load_vector_slots(self, name, slots):
        self.check_same_task(name, slots)
        return shaped([self.emit(N.LocalLoad(s)) for s in slots.slots], slots.shape)

    def assign_vector_name(self, name, cur, value):
        if isinstance(cur, VecSlots):
            if not isinstance(value, VecValue):
                what = "vector" if len(cur.shape) == 1 else "matrix"
                self.error(f"local '{name}' holds a {what}; assigning a scalar to it is not supported "
                           f"(build a {what}, e.g. sp.vec{len(cur.slots)}(s))")
            if value.shape != cur.shape:
                self.error(f"local '{name}' holds a {shape_words(cur.shape)}; cannot assign a {value.name}")
            for k, (slot, c) in enumerate(zip(cur.slots, value.comps)):
                self.store_local(f"{name}[{k}]", slot, c)
            return
        if isinstance(cur, N.Alloca):
            self.error(f"local '{name}' holds a scalar; cannot assign a {value.name} to it")
        self.scope.names[name] = self.new_vector_slots(name, value)

    def new_vector_slots(self, name, value):
        slots = []
        for k, c in enumerate(value.comps):
            slot = self.new_slot(c.dtype, f"{name}_{k}")
            self.emit(N.LocalStore(slot, c))
            slots.append(slot)
        return VecSlots(slots, value.shape)

    def local_component_target(self, target):
        """(name, slot) of the component of a vector local that `v[k]` / `v.x` assigns."""
        base = target.value
        slots = self.scope.names[base.id]
        self.check_same_task(base.id, slots)
        if hasattr(target, "slice"):
            k = self.visit(target.slice)
            if isinstance(k, bool) or not isinstance(k, int) or not -len(slots.slots) <= k < len(slots.slots):
                self.error(f"a {len(slots.slots)}-vector component index must be a compile-time integer in range")
        else:
            if target.attr not in COMPONENTS or COMPONENTS[target.attr] >= len(slots.slots):
                self.error(f"a {len(slots.slots)}-vector has no component '{target.attr}'")
            k = COMPONENTS[target.attr]
        return f"{base.id}[{k}]", slots.slots[k]

    def vector_ifexp(self, cond, blocks, vals):
        """`a if c else b` with vectors whose branches have side effects: one temporary per component."""
        n = next(v.n for v in vals if isinstance(v, VecValue))
        shapes = {v.shape for v in vals if isinstance(v, VecValue)}
        per_branch = []
        for v in vals:
            if len(shapes) > 1:
                self.error(f"vector widths differ: {vals[0].name} and {vals[1].name}")
            per_branch.append(v.comps if isinstance(v, VecValue) else (v,) * n)
        temps = []
        for a, b in zip(*per_branch):
            pa, pb = self.typed_probe(a), self.typed_probe(b)
            temps.append(self.temp_slot(T.promote(pa, pb) if pa != pb else pa, 0))
        for blk, comps in zip(blocks, per_branch):
            saved, self.block = self.block, blk
            for tmp, c in zip(temps, comps):
                self.emit(N.LocalStore(tmp, self.cast(c, tmp.dtype)))
            self.block = saved
        self.emit(N.If(cond, blocks[0], blocks[1]))
        like = next(v for v in vals if isinstance(v, VecValue))
        return like.with_comps(self.emit(N.LocalLoad(t)) for t in temps)

    # ---- @sp.func returning vectors ----
    def vector_return(self, v):
        slot = self.return_slot
        if isinstance(slot, N.Alloca) or (slot is not None and not isinstance(v, VecValue)):
            self.error("a @sp.func must return either scalars or vectors from all its returns, not both")
        if slot is None:
            slot = self.return_slot = self.new_return_slots(v)
        elif v.shape != slot.shape:
            self.error(f"a @sp.func returns vectors (matrices) of different shapes ({slot.shape} and {v.shape})")
        for s, c in zip(slot.slots, v.comps):
            c = self.typed(c, like=N.Const(0, s.dtype))
            if c.dtype != s.dtype and T.promote(c.dtype, s.dtype) != s.dtype:
                self.widen_return_slot(s, T.promote(c.dtype, s.dtype))
            store = self.emit(N.LocalStore(s, self.cast(c, s.dtype)))
            self.return_stores.append((self.block, store))

    def new_return_slots(self, v):
        slots = []
        for k, c in enumerate(v.comps):
            slots.append(self.new_slot(c.dtype, f"ret_{k}"))
        return VecSlots(slots, v.shape)


def is_constant_vector(obj):
    return _small_numeric(obj) and obj.ndim == 1


def is_constant_matrix(obj):
    return _small_numeric(obj) and obj.ndim == 2


def _small_numeric(obj):
    """A numpy array from the enclosing scope that fits in a kernel value (a compile-time constant)."""
    return isinstance(obj, np.ndarray) and 1 <= obj.size <= T.MAX_COMPONENTS and obj.dtype.kind in "iuf"

"""Vectors in kernels, scalarised by the frontend: a vector value is a tuple of scalar IR values (a matrix,
MatValue, is one with a 2-D shape; its own operations live in matrices). Their operators are in
operators.py, ndarrays of vectors in arrays.py; here: the values, construction, vector locals (one slot
per component) and the rows of sp.dot / cross / length / normalize. The IR, the SPIR-V lowering and
both autodiff modes never see a vector.
"""
import numpy as np

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import Op
from .rows import positional

COMPONENTS = {"x": 0, "y": 1, "z": 2, "w": 3}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


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


# ---- construction and components ----
def make_vector(b, vtype, args):
    """`sp.vec3(a, b, c)`: GLSL-style, from n scalars and vectors in total, or one scalar broadcast."""
    flat = []
    for a in args:
        if isinstance(a, VecValue) and len(a.shape) == 2:
            b.error(f"{vtype.name}(...) takes scalars and vectors, got a {a.name}")
        if isinstance(a, VecValue):
            flat.extend(a.comps)
        elif isinstance(a, tuple):   # sp.vec2(goal): a constant list or a tuple
            flat.extend(a)
        elif isinstance(a, (N.Stmt,) + PY_SCALARS):
            flat.append(a)
        else:
            b.error(f"{vtype.name}(...) takes scalars and vectors, got {type(a).__name__}")
    if len(flat) == 1 and not isinstance(args[0], VecValue):
        flat = flat * vtype.n
    if len(flat) != vtype.n:
        b.error(f"{vtype.name}(...) needs {vtype.n} components, got {len(flat)}")
    return VecValue(b.cast(c, vtype.dtype) for c in flat)


def constant_vector(b, obj):
    """A small 1-D numpy array from the enclosing scope (e.g. `G = sp.vec2(0, -9.8)`) is a constant
    vector, as Python numbers are constants; float components become f32 as Python floats do."""
    dt = T.from_numpy_dtype(obj.dtype)
    if dt is None or dt.is_bool:
        return None
    dt = T.f32 if dt.is_float else dt
    return VecValue(b.const(x, dt) for x in obj.tolist())


# ---- vector locals ----
def load_vector_slots(b, name, slots):
    b.check_same_task(name, slots)
    return shaped([b.emit(N.LocalLoad(s)) for s in slots.slots], slots.shape)


def assign_vector_name(b, name, cur, value):
    if isinstance(cur, VecSlots):
        if not isinstance(value, VecValue):
            what = "vector" if len(cur.shape) == 1 else "matrix"
            b.error(f"local '{name}' holds a {what}; assigning a scalar to it is not supported "
                    f"(build a {what}, e.g. sp.vec{len(cur.slots)}(s))")
        if value.shape != cur.shape:
            b.error(f"local '{name}' holds a {shape_words(cur.shape)}; cannot assign a {value.name}")
        for k, (slot, c) in enumerate(zip(cur.slots, value.comps)):
            b.store_local(f"{name}[{k}]", slot, c)
        return
    if isinstance(cur, N.Alloca):
        b.error(f"local '{name}' holds a scalar; cannot assign a {value.name} to it")
    b.scope.names[name] = new_vector_slots(b, name, value)


def new_vector_slots(b, name, value):
    slots = []
    for k, c in enumerate(value.comps):   # slot, store, slot, ...: the IR of kernels without f64 as before
        slot = b.new_slot(c.dtype, f"{name}_{k}", value.comps)   # widened as a whole (one runtime index)
        b.emit(N.LocalStore(slot, b.cast(c, slot.dtype)))
        slots.append(slot)
    for slot in slots:
        b.slot_groups[slot] = tuple(slots)
    return VecSlots(slots, value.shape)


def local_component_target(b, target):
    """(name, slot) of the component of a vector local that `v[k]` / `v.x` assigns."""
    base = target.value
    slots = b.scope.names[base.id]
    b.check_same_task(base.id, slots)
    if hasattr(target, "slice"):
        k = b.visit(target.slice)
        if isinstance(k, bool) or not isinstance(k, int) or not -len(slots.slots) <= k < len(slots.slots):
            b.error(f"a {len(slots.slots)}-vector component index must be a compile-time integer in range")
    else:
        if target.attr not in COMPONENTS or COMPONENTS[target.attr] >= len(slots.slots):
            b.error(f"a {len(slots.slots)}-vector has no component '{target.attr}'")
        k = COMPONENTS[target.attr]
    return f"{base.id}[{k}]", slots.slots[k]


def vector_ifexp(b, cond, blocks, vals):
    """`a if c else b` with vectors whose branches have side effects: one temporary per component."""
    n = next(v.n for v in vals if isinstance(v, VecValue))
    shapes = {v.shape for v in vals if isinstance(v, VecValue)}
    per_branch = []
    for v in vals:
        if len(shapes) > 1:
            b.error(f"vector widths differ: {vals[0].name} and {vals[1].name}")
        per_branch.append(v.comps if isinstance(v, VecValue) else (v,) * n)
    temps = []
    for x, y in zip(*per_branch):
        px, py = b.typed_probe(x), b.typed_probe(y)
        temps.append(b.temp_slot(T.promote(px, py) if px != py else px, 0, (x, y)))
    for blk, comps in zip(blocks, per_branch):
        saved, b.block = b.block, blk
        for tmp, c in zip(temps, comps):
            b.emit(N.LocalStore(tmp, b.cast(c, tmp.dtype)))
        b.block = saved
    b.emit(N.If(cond, blocks[0], blocks[1]))
    like = next(v for v in vals if isinstance(v, VecValue))
    return like.with_comps(b.emit(N.LocalLoad(t)) for t in temps)


# ---- sp.dot, sp.cross, sp.length, sp.normalize ----
def vector_args(b, name, args, want):
    if len(args) != want or not all(is_vector(a) for a in args):
        b.error(f"sp.{name} takes {want} vector argument{'s' if want > 1 else ''}")
    return args


def vector_and_eps(b, name, args):
    """`v` or `v, eps` (a scalar, Taichi's safeguard: `v.norm(eps)`, `v.normalized(eps)`)."""
    if len(args) == 2 and isinstance(args[1], (N.Stmt,) + PY_SCALARS):
        return vector_args(b, name, args[:1], 1)[0], args[1]
    return vector_args(b, name, args, 1)[0], 0


def dot(b, args):
    return b.dot(*vector_args(b, "dot", args, 2))


def cross(b, args):
    """The cross product of two 3-vectors; of two 2-vectors, the scalar x0 y1 - x1 y0 (as Taichi)."""
    x, y = vector_args(b, "cross", args, 2)
    if x.n == y.n == 2:
        return b.binop("-", b.binop("*", x.comps[0], y.comps[1]), b.binop("*", x.comps[1], y.comps[0]))
    if x.n != 3 or y.n != 3:
        b.error(f"sp.cross needs two 3-vectors or two 2-vectors, got {x.name} and {y.name}")
    return VecValue(b.cross_comps(x.comps, y.comps))


def length(b, args):
    """sqrt(v . v + eps)."""
    v, eps = vector_and_eps(b, "length", args)
    square = b.dot(v, v)
    return b.math1(Op.SQRT, square if is_zero(eps) else b.binop("+", square, eps))


def normalize(b, args):
    """v / (|v| + eps), eps 0 unless given (Taichi's `normalized(eps)`)."""
    v, eps = vector_and_eps(b, "normalize", args)
    norm = b.math1(Op.SQRT, b.dot(v, v))
    return b.binop("*", v, b.binop("/", 1.0, norm if is_zero(eps) else b.binop("+", norm, eps)))


def is_zero(v):
    return isinstance(v, PY_SCALARS) and v == 0


CALLS = {"dot": positional(dot), "cross": positional(cross), "length": positional(length),
         "normalize": positional(normalize)}

def is_constant_vector(obj):
    return _small_numeric(obj) and obj.ndim == 1


def is_constant_matrix(obj):
    return _small_numeric(obj) and obj.ndim == 2


def _small_numeric(obj):
    """A numpy array from the enclosing scope that fits in a kernel value (a compile-time constant)."""
    return isinstance(obj, np.ndarray) and 1 <= obj.size <= T.MAX_COMPONENTS and obj.dtype.kind in "iuf"

"""Scalar dtypes of spvad (f32, f64, i32, u32, u1), small vector types, and numpy-like type promotion."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    kind: str      # 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool
    bits: int
    np_name: str

    @property
    def np(self):
        return np.dtype(self.np_name)

    @property
    def is_float(self):
        return self.kind == "f"

    @property
    def is_int(self):
        return self.kind in "iu"

    @property
    def is_bool(self):
        return self.kind == "b"

    @property
    def nbytes(self):
        return max(self.bits // 8, 4) if self.kind == "b" else self.bits // 8

    def __repr__(self):
        return self.name

    def __call__(self, value):
        """`sp.f32(v)` outside kernels converts like numpy; inside kernels it is a cast."""
        return self.np.type(value)


f32 = DType("f32", "f", 32, "float32")
f64 = DType("f64", "f", 64, "float64")
i32 = DType("i32", "i", 32, "int32")
u32 = DType("u32", "u", 32, "uint32")
u1 = DType("u1", "b", 32, "bool")   # stored as a 32-bit word in buffers
ALL = (f32, f64, i32, u32, u1)
DEFAULT_FLOAT, DEFAULT_INT = f32, i32



@dataclass(frozen=True)
class Vector:
    """`sp.Vector(n, dtype)`: a vector of 2..4 components (f32, f64, i32 or u32); `sp.vec3` = Vector(3, f32).

    Kernels scalarise vectors (one IR value per component); as an ndarray dtype it adds a trailing axis of
    length `n` to the storage. Called outside kernels it builds a numpy array."""
    n: int
    dtype: DType

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or not 2 <= self.n <= 4:
            raise TypeError(f"sp.Vector: the width must be 2, 3 or 4, got {self.n!r}")
        if not isinstance(self.dtype, DType) or self.dtype.is_bool:
            raise TypeError(f"sp.Vector: the component dtype must be sp.f32, sp.f64, sp.i32 or sp.u32, "
                            f"got {self.dtype!r}")

    @property
    def name(self):
        return f"vec{self.n}" if self.dtype == f32 else f"Vector({self.n}, {self.dtype})"

    def __repr__(self):
        return self.name

    def __call__(self, *args):
        """Outside kernels: a numpy array of `n` components (GLSL-style: n scalars and vectors, or one scalar)."""
        parts = [np.asarray(a).reshape(-1) for a in args]
        flat = np.concatenate(parts) if parts else np.zeros(0)
        if flat.size == 1:
            flat = np.repeat(flat, self.n)
        if flat.size != self.n:
            raise TypeError(f"{self.name}(...) needs {self.n} components, got {flat.size}")
        return flat.astype(self.dtype.np)


vec2, vec3, vec4 = Vector(2, f32), Vector(3, f32), Vector(4, f32)


def element_dtype(dt):
    """The scalar dtype of one stored component (the dtype itself for scalar dtypes)."""
    return dt.dtype if isinstance(dt, Vector) else dt


def vector_width(dt):
    """Number of components (0 for scalar dtypes)."""
    return dt.n if isinstance(dt, Vector) else 0


_BY_NP = {"float32": f32, "float64": f64, "int32": i32, "uint32": u32, "bool": u1}


def from_numpy_dtype(dt):
    """Map a numpy dtype to a spvad dtype, or None when spvad has no such dtype."""
    return _BY_NP.get(np.dtype(dt).name)


def storage_np_dtype(dt: DType):
    """numpy dtype of one element in a device buffer (bools are 32-bit words there)."""
    return np.dtype("uint32") if dt.is_bool else dt.np


def promote(a: DType, b: DType) -> DType:
    """Binary-op result type: floats beat ints beat bools; the wider float wins; i32 beats u32."""
    if a == b:
        return i32 if a.is_bool else a
    if a.is_float or b.is_float:
        return f64 if f64 in (a, b) else f32
    if i32 in (a, b):
        return i32
    if u32 in (a, b):
        return u32
    return i32


def python_scalar_dtype(value):
    """dtype of a plain Python/numpy scalar argument with no annotation (Python floats are f32, as in Taichi)."""
    if isinstance(value, (bool, np.bool_)):
        return u1
    if isinstance(value, np.generic):
        return from_numpy_dtype(value.dtype)
    if isinstance(value, int):
        return i32
    if isinstance(value, float):
        return f32
    return None


_INT_RANGE = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1)}
_FLOAT_MAX = {"f32": float(np.finfo(np.float32).max), "f64": float(np.finfo(np.float64).max)}


def fits(value, dtype):
    """Can `value` (a Python/numpy scalar) be stored in `dtype` without wrapping or overflowing?"""
    if dtype.is_bool:
        return True
    if dtype.is_int:
        lo, hi = _INT_RANGE[dtype.name]
        return lo <= int(value) <= hi
    v = float(value)
    return not np.isfinite(v) or abs(v) <= _FLOAT_MAX[dtype.name]


def numeric_components(value, n):
    """`value` as a list of `n` Python numbers (a sequence or numpy array of numbers), or None."""
    try:
        arr = np.asarray(value)
    except Exception:
        return None
    if arr.shape != (n,) or arr.dtype.kind not in "biuf":
        return None
    return arr.tolist()

"""Scalar dtypes of spvad (f32, f64, i32, u32, u1), vector and matrix types, and numpy-like type promotion."""
import types
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



def as_dtype(t):
    """Python's `float`, `int` and `bool` as dtypes (f32, i32, u1, as Taichi and Warp read them); others as
    they are."""
    return f32 if t is float else i32 if t is int else u1 if t is bool else t


MAX_COMPONENTS = 144  # a vector / matrix value is that many scalar IR values (per-thread registers)


def _check_component_dtype(what, dtype):
    if not isinstance(dtype, DType) or dtype.is_bool:
        raise TypeError(f"{what}: the component dtype must be sp.f32, sp.f64, sp.i32 or sp.u32, got {dtype!r}")


def _is_count(n):
    return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))


def _literal(value, dtype, ndim):
    """`sp.Vector([...])` / `sp.Matrix([[...], ...])` outside kernels: a numpy array of `ndim` axes."""
    arr = np.asarray(value)
    if arr.ndim != ndim or arr.dtype.kind not in "biuf":
        raise TypeError(f"expected a {'list' if ndim == 1 else 'list of equal-length lists'} of numbers, got {value!r}")
    dt = dtype or (f32 if arr.dtype.kind == "f" else i32)
    return arr.astype(dt.np)


class _TypeOrValueMethod:
    """`sp.Vector(3).zero()` on a type, and Taichi's `sp.Vector.zero(sp.f32, 3)` on the class: the class
    spelling is `on_class` (one function object, so kernels find its row by identity)."""

    def __init__(self, method, on_class):
        self.method, self.on_class = method, on_class

    def __get__(self, obj, owner=None):
        return self.on_class if obj is None else types.MethodType(self.method, obj)


def vector_zero(dtype, n):
    """Taichi's `ti.Vector.zero(dt, n)`."""
    return Vector(n, dtype).zero()


def matrix_zero(dtype, n, m):
    """Taichi's `ti.Matrix.zero(dt, n, m)`."""
    return Matrix(n, m, dtype).zero()


def matrix_identity(dtype, n):
    """Taichi's `ti.Matrix.identity(dt, n)`."""
    return Matrix(n, n, dtype).identity()


def matrix_cols(columns):
    """Taichi's `ti.Matrix.cols([c0, c1, ...])`: the matrix whose columns are the given vectors."""
    return Matrix.rows(columns).T


def matrix_rows(rows):
    """Taichi's `ti.Matrix.rows([r0, r1, ...])`: the matrix whose rows are the given vectors."""
    return _literal([np.asarray(r).reshape(-1) for r in rows], None, 2)


class _LiteralOrType(type):
    """`sp.Vector([1.0, 2.0])` / `sp.Matrix([[1, 2], [3, 4]])` outside kernels build numpy values; with
    counts they make the type (a metaclass, so instances stay plain data the compile cache can store)."""

    def __call__(cls, n=None, *args, **kwargs):
        if n is not None and not _is_count(n):
            dtype = kwargs.get("dtype", kwargs.get("dt", args[0] if args else None))
            return _literal(n, dtype, 1 if cls.__name__ == "Vector" else 2)
        return super().__call__(n, *args, **kwargs)


@dataclass(frozen=True)
class Vector(metaclass=_LiteralOrType):
    """`sp.Vector(n, dtype=sp.f32)`: a vector of 1..144 components (f32, f64, i32 or u32); `sp.vec3` =
    Vector(3, f32). `sp.Vector([a, b, c])` builds a value (Taichi style).

    Kernels scalarise vectors (one IR value per component), so a vector doubles as a small local array; as
    an ndarray dtype it adds a trailing axis of length `n` to the storage. Called outside kernels it builds
    a numpy array."""
    n: int
    dtype: DType = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", f32 if self.dtype is None else as_dtype(self.dtype))
        if not _is_count(self.n) or not 1 <= self.n <= MAX_COMPONENTS:
            raise TypeError(f"sp.Vector: the width must be an int in 1..{MAX_COMPONENTS}, got {self.n!r}")
        object.__setattr__(self, "n", int(self.n))
        _check_component_dtype("sp.Vector", self.dtype)

    @property
    def name(self):
        return f"vec{self.n}" if self.dtype == f32 and 2 <= self.n <= 4 else f"Vector({self.n}, {self.dtype})"

    @property
    def shape(self):
        return (self.n,)

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

    def zero(self):
        return np.zeros(self.n, self.dtype.np)

    zero = _TypeOrValueMethod(zero, vector_zero)


@dataclass(frozen=True)
class Matrix(metaclass=_LiteralOrType):
    """`sp.Matrix(n, m, dtype=sp.f32)`: an n x m matrix (n * m <= 64); `sp.mat3` = Matrix(3, 3, f32).
    `sp.Matrix([[a, b], [c, d]])` builds a value (Taichi style).

    Kernels scalarise matrices (n * m IR values, row-major); as an ndarray dtype it adds two trailing axes
    (n, m) to the storage. Called outside kernels it builds a numpy array."""
    n: int
    m: int = None
    dtype: DType = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", f32 if self.dtype is None else as_dtype(self.dtype))
        for what, k in (("rows", self.n), ("columns", self.m)):
            if not _is_count(k) or k < 1:
                raise TypeError(f"sp.Matrix: the number of {what} must be a positive int, got {k!r}")
        if self.n * self.m > MAX_COMPONENTS:
            raise TypeError(f"sp.Matrix: {self.n} x {self.m} = {self.n * self.m} components; at most "
                            f"{MAX_COMPONENTS} fit in a kernel value")
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "m", int(self.m))
        _check_component_dtype("sp.Matrix", self.dtype)

    @property
    def name(self):
        if self.dtype == f32 and self.n == self.m and 2 <= self.n <= 4:
            return f"mat{self.n}"
        return f"Matrix({self.n}, {self.m}, {self.dtype})"

    @property
    def shape(self):
        return (self.n, self.m)

    def __repr__(self):
        return self.name

    def __call__(self, *args):
        """Outside kernels: a numpy (n, m) array from n * m row-major scalars or from n row vectors."""
        flat = np.concatenate([np.asarray(a).reshape(-1) for a in args]) if args else np.zeros(0)
        if flat.size != self.n * self.m:
            raise TypeError(f"{self.name}(...) needs {self.n * self.m} scalars or {self.n} rows of {self.m}, "
                            f"got {flat.size} scalars")
        return flat.reshape(self.n, self.m).astype(self.dtype.np)

    def zero(self):
        return np.zeros((self.n, self.m), self.dtype.np)

    def identity(self):
        if self.n != self.m:
            raise TypeError(f"{self.name}.identity(): the matrix is not square")
        return np.eye(self.n, dtype=self.dtype.np)

    zero = _TypeOrValueMethod(zero, matrix_zero)
    identity = _TypeOrValueMethod(identity, matrix_identity)
    cols, rows = staticmethod(matrix_cols), staticmethod(matrix_rows)

    @staticmethod
    def diag(dim, val):
        """`sp.Matrix.diag(dim, val)`: the dim x dim matrix with `val` on its diagonal (Taichi's); in kernels a
        value of val's type, outside them a numpy array (float32 for a float, int32 for an int)."""
        if not _is_count(dim) or not 1 <= dim * dim <= MAX_COMPONENTS:
            raise TypeError(f"sp.Matrix.diag: dim must be an int in 1..12, got {dim!r}")
        return _literal(np.diag([val] * int(dim)), None, 2)


vec2, vec3, vec4 = Vector(2, f32), Vector(3, f32), Vector(4, f32)
mat2, mat3, mat4 = Matrix(2, 2, f32), Matrix(3, 3, f32), Matrix(4, 4, f32)
TENSOR_TYPES = (Vector, Matrix)


def element_dtype(dt):
    """The scalar dtype of one stored component (the dtype itself for scalar dtypes)."""
    return dt.dtype if isinstance(dt, TENSOR_TYPES) else dt


def element_shape(dt):
    """The trailing storage axes of one element: () for scalars, (n,) for vectors, (n, m) for matrices."""
    return dt.shape if isinstance(dt, TENSOR_TYPES) else ()


def vector_width(dt):
    """Number of scalar components of one element (0 for scalar dtypes)."""
    return int(np.prod(dt.shape)) if isinstance(dt, TENSOR_TYPES) else 0


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
    if isinstance(value, np.generic):   # int64, uint8, float16, ...: as Python's int and float would be
        return from_numpy_dtype(value.dtype) or (i32 if isinstance(value, np.integer) else
                                                 f32 if value.dtype == np.float16 else None)
    if isinstance(value, int):
        return i32
    if isinstance(value, float):
        return f32
    return None


INT_RANGE = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1)}   # the values of each integer dtype
FLOAT_MAX = {"f32": float(np.finfo(np.float32).max), "f64": float(np.finfo(np.float64).max)}


def fits(value, dtype):
    """Can `value` (a Python/numpy scalar) be stored in `dtype` without wrapping or overflowing?"""
    if dtype.is_bool:
        return True
    if dtype.is_int:
        lo, hi = INT_RANGE[dtype.name]
        return lo <= int(value) <= hi
    v = float(value)
    return not np.isfinite(v) or abs(v) <= FLOAT_MAX[dtype.name]


def numeric_components(value, n):
    """`value` as a flat list of Python numbers (a sequence or numpy array of numbers of shape `n`, an int
    or a tuple), or None."""
    try:
        arr = np.asarray(value)
    except Exception:
        return None
    if arr.shape != (n if isinstance(n, tuple) else (n,)) or arr.dtype.kind not in "biuf":
        return None
    return arr.reshape(-1).tolist()

"""Matrices in kernels, scalarised by the frontend: a matrix value is `rows * cols` scalar IR values
(MatValue, row-major). Construction (`sp.mat3(...)`, `sp.Matrix([[...]])`, `.identity()`), attributes and
the rows of sp.transpose / trace / outer / determinant / inverse / svd / polar_decompose; the operators
(`@`, element-wise) are in operators.py, determinant and the decompositions in linalg.py. The IR, the
lowering and both autodiff modes never see a matrix.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from . import linalg
from .local_arrays import tuple_value
from .rows import positional, with_keywords
from .vectors import MatValue, VecValue, is_vector, make_vector

TYPE_METHODS = ("zero", "identity")


def is_type_method(fn):
    """`sp.mat3.identity` / `sp.Vector(16, sp.f32).zero` seen as a bound method of a type instance."""
    return getattr(fn, "__name__", None) in TYPE_METHODS and isinstance(getattr(fn, "__self__", None),
                                                                       T.TENSOR_TYPES)


# ---- construction ----
def tensor_call(b, fn, args, kw):
    """Calls of vector / matrix types: `sp.mat3(...)`, `sp.Matrix(2, 3)`, `sp.Vector([...])`,
    `sp.mat3.identity()`, `sp.Vector(16, sp.f32).zero()`."""
    if is_type_method(fn):
        if args or kw:
            b.error(f"{fn.__self__.name}.{fn.__name__}() takes no arguments")
        return constant_tensor(b, fn.__self__, fn.__name__)
    if isinstance(fn, (T.Vector, T.Matrix)):
        if kw:
            b.error(f"{fn.name}(...) takes no keyword arguments")
        return make_vector(b, fn, args) if isinstance(fn, T.Vector) else make_matrix(b, fn, args)
    dtype = kw.pop("dt", kw.pop("dtype", None))
    if kw:
        b.error(f"unknown keyword argument '{next(iter(kw))}'")
    if len(args) == 1 and isinstance(args[0], tuple):   # sp.Vector(goal), a constant list or a tuple
        args = [tuple_value(b, args[0])]
    if len(args) == 1 and isinstance(args[0], VecValue):   # sp.Vector([a, b]) / sp.Matrix([[a, b], [c, d]])
        v = args[0]
        if fn is T.Matrix and not isinstance(v, MatValue):
            v = MatValue(v.comps, v.n, 1)   # Taichi: a list of scalars is a column
        if fn is T.Vector and isinstance(v, MatValue):
            b.error("sp.Vector([...]) takes a list of scalars")
        return v if dtype is None else v.with_comps(b.strong(b.cast(c, dtype)) for c in v.comps)
    try:
        return fn(*args, dtype) if dtype is not None else fn(*args)
    except TypeError as e:
        b.error(str(e))


def diag(b, args, kw):
    """`sp.Matrix.diag(dim, val)`: a dim x dim matrix (dim known at compile time) with `val` on its diagonal,
    of val's dtype (a Python float: f32)."""
    given = dict(zip(("dim", "val"), args))
    for k, v in kw.items():
        if k not in ("dim", "val") or k in given:
            b.error(f"sp.Matrix.diag(dim, val) got an unexpected or repeated argument '{k}'")
        given[k] = v
    if len(args) > 2 or set(given) != {"dim", "val"}:
        b.error("sp.Matrix.diag(dim, val) takes a size and a value")
    dim, val = given["dim"], given["val"]
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim * dim <= T.MAX_COMPONENTS:
        b.error(f"sp.Matrix.diag: dim must be a compile-time int in 1..12, got {dim!r}")
    val = b.typed(val)
    zero = b.const(0, val.dtype)
    return MatValue([val if i == j else zero for i in range(dim) for j in range(dim)], dim, dim)


def constant_tensor(b, ttype, which):
    if which == "identity" and not (isinstance(ttype, T.Matrix) and ttype.n == ttype.m):
        b.error(f"{ttype.name}.identity(): only square matrices have one")
    one, zero = b.const(1, ttype.dtype), b.const(0, ttype.dtype)
    if isinstance(ttype, T.Vector):
        return VecValue([zero] * ttype.n)
    comps = [one if which == "identity" and i == j else zero for i in range(ttype.n) for j in range(ttype.m)]
    return MatValue(comps, ttype.n, ttype.m)


def make_matrix(b, mtype, args):
    """`sp.mat3(a00, ..., a22)` (row-major scalars), `sp.mat3(row0, row1, row2)` or a matrix of that shape."""
    n, m = mtype.n, mtype.m
    if len(args) == 1 and isinstance(args[0], MatValue):
        if args[0].shape != (n, m):
            b.error(f"{mtype.name}(...) needs a {n}x{m} matrix, got a {args[0].name}")
        flat = list(args[0].comps)
    elif len(args) == n and all(is_vector(a) for a in args):
        if any(a.n != m for a in args):
            b.error(f"{mtype.name}(...) needs {n} rows of {m} components")
        flat = [c for a in args for c in a.comps]
    else:
        if not all(isinstance(a, (N.Stmt,) + PY_SCALARS) for a in args):
            b.error(f"{mtype.name}(...) takes {n * m} scalars or {n} row vectors")
        flat = list(args)
    if len(flat) != n * m:
        b.error(f"{mtype.name}(...) needs {n * m} scalars or {n} rows of {m}, got {len(flat)} scalars")
    return MatValue([b.cast(c, mtype.dtype) for c in flat], n, m)


def constant_matrix(b, obj):
    """A small 2-D numpy array from the enclosing scope is a constant matrix (float -> f32, as vectors)."""
    dt = T.from_numpy_dtype(obj.dtype)
    if dt is None or dt.is_bool:
        return None
    dt = T.f32 if dt.is_float else dt
    return MatValue([b.const(x, dt) for x in obj.reshape(-1).tolist()], *obj.shape)


def matrix_attribute(b, v, attr):
    if attr == "T":
        return b.transposed(v)
    if attr in ("n", "m"):
        return v.shape[0 if attr == "n" else 1]
    b.error(f"matrices have no attribute '{attr}' (use M[i, j], M[i], M.T)")


# ---- sp.transpose, trace, outer, determinant, inverse, svd, polar_decompose ----
def one_matrix(b, name, args):
    if len(args) != 1 or not isinstance(args[0], MatValue):
        b.error(f"sp.{name} takes one matrix")
    return args[0]


def square(b, name, args, sizes=None):
    a = one_matrix(b, name, args)
    if a.rows != a.cols:
        b.error(f"sp.{name} needs a square matrix, got a {a.name}")
    if sizes is not None and a.rows not in sizes:
        b.error(f"sp.{name} supports {' and '.join(f'{k}x{k}' for k in sizes)} matrices, got a {a.name}")
    return a


def float_square(b, name, args, sizes):
    """The one square matrix argument of a decomposition, in float."""
    a = square(b, name, args, sizes)
    return a.with_comps(b.to_float(c) for c in a.comps)


def outer(b, args):
    if len(args) != 2 or not all(is_vector(a) for a in args):
        b.error("sp.outer takes two vectors")
    u, v = args
    return MatValue([b.binop("*", x, y) for x in u.comps for y in v.comps], u.n, v.n)


def transpose(b, args):
    return b.transposed(one_matrix(b, "transpose", args))


def trace(b, args):
    a = square(b, "trace", args)
    return b.sum_of([a.at(i, i) for i in range(a.rows)])


def determinant(b, args):
    a = float_square(b, "determinant", args, (1, 2, 3, 4))
    return linalg.det(b, [[a.at(i, j) for j in range(a.cols)] for i in range(a.rows)])


def inverse(b, args):
    return linalg.inverse(b, float_square(b, "inverse", args, (1, 2, 3, 4)))


def svd(b, args):
    a = float_square(b, "svd", args, (2, 3))
    u, sig, v = linalg.svd(b, a)
    return linalg.from_columns(u), linalg.diagonal(b, sig, a.rows), linalg.from_columns(v)


def polar_decompose(b, args):
    return linalg.polar(b, float_square(b, "polar_decompose", args, (2, 3)))


CALLS = {"outer": positional(outer), "transpose": positional(transpose), "trace": positional(trace),
         "determinant": positional(determinant), "inverse": positional(inverse), "svd": positional(svd),
         "polar_decompose": positional(polar_decompose)}

def taichi_constant(ttype_of, which):
    """`sp.Vector.zero(dt, n)`, `sp.Matrix.zero(dt, n, m)`, `sp.Matrix.identity(dt, n)` (Taichi's spellings):
    the type from compile-time arguments, then its constant."""
    def body(b, args):
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in args[1:]):
            b.error(f"the sizes given to .{which}(dtype, ...) must be compile-time integers")
        try:
            ttype = ttype_of(*[T.as_dtype(a) for a in args])
        except TypeError as e:
            b.error(str(e))
        return constant_tensor(b, ttype, which)
    return positional(body)


def from_vectors(columns):
    """`sp.Matrix.rows([r0, r1])` / `sp.Matrix.cols([c0, c1])` (Taichi's): a list of equal-length vectors."""
    def body(b, args):
        v = args[0] if len(args) == 1 else None
        v = tuple_value(b, v) if isinstance(v, tuple) else v
        if not isinstance(v, MatValue):
            b.error(f"sp.Matrix.{'cols' if columns else 'rows'}(...) takes one list of equal-length vectors")
        return b.transposed(v) if columns else v
    return positional(body)


PYTHON_CALLS = {T.Matrix.diag: with_keywords(diag),
                T.matrix_rows: from_vectors(False), T.matrix_cols: from_vectors(True),
                T.vector_zero: taichi_constant(lambda dt, n: T.Vector(n, dt), "zero"),
                T.matrix_zero: taichi_constant(lambda dt, n, m: T.Matrix(n, m, dt), "zero"),
                T.matrix_identity: taichi_constant(lambda dt, n: T.Matrix(n, n, dt), "identity")}

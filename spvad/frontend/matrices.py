"""Matrices in kernels, scalarised by the frontend: a matrix value is `rows * cols` scalar IR values
(MatValue, row-major). Construction, element and row access, element-wise arithmetic, `@`, transpose,
trace and outer products all become scalar IR; determinant, inverse, svd and polar decomposition live in
linalg. The IR, the lowering and both autodiff modes never see a matrix.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .vectors import COMPARISONS, MatValue, VecValue, is_vector

MATRIX_BUILTINS = ("transpose", "trace", "outer", "determinant", "inverse", "svd", "polar_decompose")
TYPE_METHODS = ("zero", "identity")


def is_type_method(fn):
    """`sp.mat3.identity` / `sp.Vector(16, sp.f32).zero` seen as a bound method of a type instance."""
    return getattr(fn, "__name__", None) in TYPE_METHODS and isinstance(getattr(fn, "__self__", None),
                                                                       T.TENSOR_TYPES)


class MatricesMixin:
    # ---- operators ----
    def binop(self, sym, a, b):
        if sym == "@":
            return self.matmul(a, b)
        a_mat, b_mat = isinstance(a, MatValue), isinstance(b, MatValue)
        if a_mat or b_mat:
            if sym in COMPARISONS:
                self.error("comparing matrices is not supported (compare their elements)")
            other = b if a_mat else a
            if is_vector(other):
                self.error(f"cannot combine a {a.name} and a {b.name} element-wise (use @ for a product)")
        return super().binop(sym, a, b)

    def matmul(self, a, b):
        """`A @ B`, `A @ v`, `v @ A` and `u @ v` (a dot product), as numpy defines them."""
        if not isinstance(a, VecValue) or not isinstance(b, VecValue):
            self.error("@ needs matrices or vectors on both sides (use * with scalars)")
        ash = a.shape if isinstance(a, MatValue) else (1, a.n)
        bsh = b.shape if isinstance(b, MatValue) else (b.n, 1)
        if ash[1] != bsh[0]:
            self.error(f"cannot multiply a {a.name} by a {b.name}: inner sizes {ash[1]} and {bsh[0]} differ")

        def entry(i, j):
            return self.sum_of([self.binop("*", a.at(i, k) if isinstance(a, MatValue) else a.comps[k],
                                           b.at(k, j) if isinstance(b, MatValue) else b.comps[k])
                                for k in range(ash[1])])
        comps = [entry(i, j) for i in range(ash[0]) for j in range(bsh[1])]
        if isinstance(a, MatValue) and isinstance(b, MatValue):
            return MatValue(comps, ash[0], bsh[1])
        if isinstance(a, MatValue) or isinstance(b, MatValue):
            return VecValue(comps)
        return comps[0]

    def unary(self, sym, v):
        if isinstance(v, MatValue) and sym == "~":
            self.error(f"operator ~ is not defined for a {v.name}")
        return super().unary(sym, v)

    # ---- construction ----
    def tensor_call(self, fn, args, kw):
        """Calls of vector / matrix types: `sp.mat3(...)`, `sp.Matrix(2, 3)`, `sp.Vector([...])`,
        `sp.mat3.identity()`, `sp.Vector(16, sp.f32).zero()`."""
        if is_type_method(fn):
            if args or kw:
                self.error(f"{fn.__self__.name}.{fn.__name__}() takes no arguments")
            return self.constant_tensor(fn.__self__, fn.__name__)
        if isinstance(fn, (T.Vector, T.Matrix)):
            if kw:
                self.error(f"{fn.name}(...) takes no keyword arguments")
            return self.make_vector(fn, args) if isinstance(fn, T.Vector) else self.make_matrix(fn, args)
        dtype = kw.pop("dt", kw.pop("dtype", None))
        if kw:
            self.error(f"unknown keyword argument '{next(iter(kw))}'")
        if len(args) == 1 and isinstance(args[0], VecValue):   # sp.Vector([a, b]) / sp.Matrix([[a, b], [c, d]])
            v = args[0]
            if fn is T.Matrix and not isinstance(v, MatValue):
                v = MatValue(v.comps, v.n, 1)   # Taichi: a list of scalars is a column
            if fn is T.Vector and isinstance(v, MatValue):
                self.error("sp.Vector([...]) takes a list of scalars")
            return v if dtype is None else v.with_comps(self.cast(c, dtype) for c in v.comps)
        try:
            return fn(*args, dtype) if dtype is not None else fn(*args)
        except TypeError as e:
            self.error(str(e))

    def constant_tensor(self, ttype, which):
        if which == "identity" and not (isinstance(ttype, T.Matrix) and ttype.n == ttype.m):
            self.error(f"{ttype.name}.identity(): only square matrices have one")
        one, zero = self.const(1, ttype.dtype), self.const(0, ttype.dtype)
        if isinstance(ttype, T.Vector):
            return VecValue([zero] * ttype.n)
        comps = [one if which == "identity" and i == j else zero for i in range(ttype.n) for j in range(ttype.m)]
        return MatValue(comps, ttype.n, ttype.m)

    def make_matrix(self, mtype, args):
        """`sp.mat3(a00, ..., a22)` (row-major scalars), `sp.mat3(row0, row1, row2)` or a matrix of that shape."""
        n, m = mtype.n, mtype.m
        if len(args) == 1 and isinstance(args[0], MatValue):
            if args[0].shape != (n, m):
                self.error(f"{mtype.name}(...) needs a {n}x{m} matrix, got a {args[0].name}")
            flat = list(args[0].comps)
        elif len(args) == n and all(is_vector(a) for a in args):
            if any(a.n != m for a in args):
                self.error(f"{mtype.name}(...) needs {n} rows of {m} components")
            flat = [c for a in args for c in a.comps]
        else:
            if not all(isinstance(a, (N.Stmt,) + PY_SCALARS) for a in args):
                self.error(f"{mtype.name}(...) takes {n * m} scalars or {n} row vectors")
            flat = list(args)
        if len(flat) != n * m:
            self.error(f"{mtype.name}(...) needs {n * m} scalars or {n} rows of {m}, got {len(flat)} scalars")
        return MatValue([self.cast(c, mtype.dtype) for c in flat], n, m)

    def constant_matrix(self, obj):
        """A small 2-D numpy array from the enclosing scope is a constant matrix (float -> f32, as vectors)."""
        dt = T.from_numpy_dtype(obj.dtype)
        if dt is None or dt.is_bool:
            return None
        dt = T.f32 if dt.is_float else dt
        return MatValue([self.const(x, dt) for x in obj.reshape(-1).tolist()], *obj.shape)

    # ---- elements and rows ----
    def component(self, v, k):
        """`v[k]`, `M[i]` (a row), `M[i, j]`; runtime indices become selects (local_arrays)."""
        return self.read_element(v, k)

    def transposed(self, a):
        if not isinstance(a, MatValue):
            self.error(f"transpose needs a matrix, got {getattr(a, 'name', type(a).__name__)}")
        return MatValue([a.at(i, j) for j in range(a.cols) for i in range(a.rows)], a.cols, a.rows)

    def matrix_attribute(self, v, attr):
        if attr == "T":
            return self.transposed(v)
        if attr in ("n", "m"):
            return v.shape[0 if attr == "n" else 1]
        self.error(f"matrices have no attribute '{attr}' (use M[i, j], M[i], M.T)")

    # ---- builtins ----
    def matrix_builtin(self, name, args):
        if name == "outer":
            if len(args) != 2 or not all(is_vector(a) for a in args):
                self.error("sp.outer takes two vectors")
            u, v = args
            return MatValue([self.binop("*", x, y) for x in u.comps for y in v.comps], u.n, v.n)
        if len(args) != 1 or not isinstance(args[0], MatValue):
            self.error(f"sp.{name} takes one matrix")
        a = args[0]
        if name == "transpose":
            return self.transposed(a)
        self.require_square(name, a)
        if name == "trace":
            return self.sum_of([a.at(i, i) for i in range(a.rows)])
        return self.linalg(name, a)

    def require_square(self, name, a, sizes=None):
        if a.rows != a.cols:
            self.error(f"sp.{name} needs a square matrix, got a {a.name}")
        if sizes is not None and a.rows not in sizes:
            self.error(f"sp.{name} supports {' and '.join(f'{k}x{k}' for k in sizes)} matrices, got a {a.name}")

    def float_matrix(self, a):
        return a.with_comps(self.to_float(c) for c in a.comps)


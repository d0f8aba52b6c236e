"""Operators on kernel values: the IR Emitter's scalar operators extended to vectors and matrices, element-wise
(a vector or matrix is a tuple of scalar IR values, vectors.py), with `@`, dot and cross products built from
scalar ops. Every visitor and call row computes through these."""
import functools

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .vectors import COMPARISONS, MatValue, VecValue, is_vector, make_vector
from .weak_floats import WeakFloats


class ValueEmitter(WeakFloats):
    """Emitter whose operators accept vectors and matrices; scalar contexts refuse them."""

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
        if sym == "@":
            return self.matmul(a, b)
        if not isinstance(a, VecValue) and not isinstance(b, VecValue):
            return super().binop(sym, a, b)
        a_mat, b_mat = isinstance(a, MatValue), isinstance(b, MatValue)
        if sym in COMPARISONS and (a_mat or b_mat):   # vectors compare per component, into bool vectors
            self.error("comparing matrices is not supported (compare their elements)")
        if (a_mat or b_mat) and is_vector(b if a_mat else a):
            self.error(f"cannot combine a {a.name} and a {b.name} element-wise (use @ for a product)")
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
        if isinstance(v, MatValue) and sym == "~":
            self.error(f"operator ~ is not defined for a {v.name}")
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
            return self.elementwise(self.strong, make_vector(self, dtype, [v]))
        if isinstance(v, VecValue):
            return self.elementwise(lambda x: self.strong(self.cast(x, dtype)), v)
        return self.strong(self.cast(v, dtype))

    # ---- products ----
    def sum_of(self, values):
        """values[0] + values[1] + ..., added left to right."""
        return functools.reduce(lambda acc, v: self.binop("+", acc, v), values)

    def dot(self, a, b):
        return self.sum_of(self.binop("*", a, b).comps)

    def cross_comps(self, a, b):
        """The components of the cross product of two 3-component lists."""
        return [self.binop("-", self.binop("*", a[i], b[j]), self.binop("*", a[j], b[i]))
                for i, j in [(1, 2), (2, 0), (0, 1)]]

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

    def transposed(self, a):
        if not isinstance(a, MatValue):
            self.error(f"transpose needs a matrix, got {getattr(a, 'name', type(a).__name__)}")
        return MatValue([a.at(i, j) for j in range(a.cols) for i in range(a.rows)], a.cols, a.rows)

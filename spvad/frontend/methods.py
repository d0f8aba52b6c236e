"""Taichi-style methods of vector and matrix values in kernels (`v.dot(w)`, `v.norm()`, `M.transpose()`,
`M.determinant()`, ...): a table of rows, most being the sp.* builtin of the same meaning with the value as
first argument."""
from ..ir.ops import Op
from . import matrices, scalar_calls, vectors
from .rows import keyword_values
from .vectors import VecValue


class BoundMethod:
    """`v.dot` before the call: the value and the method's name."""
    __slots__ = ("value", "name")

    def __init__(self, value, name):
        self.value, self.name = value, name


class UnboundMethod:
    """`sp.Vector.normalized` (Taichi's `ti.Vector.normalized(v, eps)`): a method called with the value first."""
    __slots__ = ("owner", "name")

    def __init__(self, owner, name):
        self.owner, self.name = owner, name


def builtin(body):
    """A method that is `body(b, [value, *args])`, the sp.* builtin's row body."""
    def method(b, v, args, kw):
        if kw:
            b.error(f".{method.name}() takes no keyword arguments")
        return body(b, [v] + list(args))
    return method


def no_arguments(body):
    """A method of the value alone: `body(b, value)`."""
    def method(b, v, args, kw):
        if kw:
            b.error(f".{method.name}() takes no keyword arguments")
        if args:
            b.error(f".{method.name}() takes no arguments")
        return body(b, v)
    return method


METHODS = {
    "dot": builtin(vectors.dot), "cross": builtin(vectors.cross), "norm": builtin(vectors.length),
    "normalized": builtin(vectors.normalize), "outer_product": builtin(matrices.outer),
    "transpose": builtin(matrices.transpose), "determinant": builtin(matrices.determinant),
    "inverse": builtin(matrices.inverse), "trace": builtin(matrices.trace), "cast": builtin(scalar_calls.cast),
    "norm_sqr": no_arguments(lambda b, v: vectors.dot(b, [v, v])), "sum": no_arguments(lambda b, v: b.sum_of(v.comps)),
    "max": no_arguments(lambda b, v: b.extremum(Op.MAX, *v.comps)),   # ties share the derivative equally
    "min": no_arguments(lambda b, v: b.extremum(Op.MIN, *v.comps)),
    "any": no_arguments(lambda b, v: any_or_all(b, "|", v)), "all": no_arguments(lambda b, v: any_or_all(b, "&", v)),
}
def any_or_all(b, sym, v):
    """`v.any()` / `v.all()` (Taichi's): whether any / every component is true (non-zero), a bool."""
    out = b.to_bool(v.comps[0])
    for c in v.comps[1:]:
        out = b.binop(sym, out, b.to_bool(c))
    return out


for _name, _method in METHODS.items():
    _method.name = _name


def call_method(b, fn, node):
    """The row of a bound method called: `value.method(*args)`."""
    kw = keyword_values(b, node)
    return METHODS[fn.name](b, fn.value, [b.visit(a) for a in node.args], kw)


def call_unbound(b, fn, node):
    """The row of `sp.Vector.<method>(v, *args)`."""
    kw = keyword_values(b, node)
    args = [b.visit(a) for a in node.args]
    if not args or not isinstance(args[0], VecValue):
        b.error(f"sp.{fn.owner}.{fn.name}(...) takes a vector or matrix value as its first argument")
    return METHODS[fn.name](b, args[0], args[1:], kw)

"""Taichi-style methods of vector and matrix values in kernels (`v.dot(w)`, `v.norm()`, `M.transpose()`,
`M.determinant()`, ...): each is the sp.* builtin of the same meaning with the value as first argument."""
from ..ir.ops import Op

# method -> the builtin it calls (see calls.builtin); None: composed below
METHODS = {"dot": "dot", "cross": "cross", "norm": "length", "normalized": "normalize",
           "outer_product": "outer", "transpose": "transpose", "determinant": "determinant",
           "inverse": "inverse", "trace": "trace", "norm_sqr": None, "sum": None, "max": None, "min": None}


class BoundMethod:
    """`v.dot` before the call: the value and the method's name."""
    __slots__ = ("value", "name")

    def __init__(self, value, name):
        self.value, self.name = value, name


def call_method(b, method, args, kw):
    """The frontend's hook for `value.method(*args)`; `b` is the kernel builder."""
    name, v = method.name, method.value
    if kw:
        b.error(f".{name}() takes no keyword arguments")
    if METHODS[name] is not None:
        return b.builtin(METHODS[name], [v] + list(args))
    if args:
        b.error(f".{name}() takes no arguments")
    if name == "norm_sqr":
        return b.builtin("dot", [v, v])
    if name == "sum":
        return b.sum_of(v.comps)
    return b.minmax(Op.MAX if name == "max" else Op.MIN, *v.comps)

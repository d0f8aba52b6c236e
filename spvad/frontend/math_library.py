"""Rows of the call tables for the math library functions of ir/math_functions.py (`sp.erf`, `sp.sigmoid`,
`sp.lerp`, ...: IR expansions, no Op of their own), `sp.where` (sp.select) and the `math` module's functions of
the same names. Each works per component on vectors and matrices, scalars broadcast."""
import math

from .. import types as T
from ..ir import math_functions as M
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .rows import positional
from .scalar_calls import from_math, select
from .vectors import VecValue


def same_float(b, args):
    """Scalar operands as statements of one float dtype (weak Python numbers take the others' type)."""
    like = next((a for a in args if isinstance(a, N.Stmt)), None)
    vals = [b.to_float(b.typed(a, like=like) if like is not None else b.const(float(a))) for a in args]
    dt = T.f64 if any(v.dtype == T.f64 for v in vals) else vals[0].dtype
    return [b.cast(v, dt) for v in vals]


def library_call(name):
    fn, arity = M.FUNCTIONS[name]

    def body(b, args):
        if len(args) != arity:
            b.error(f"sp.{name} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}")
        if any(isinstance(a, VecValue) for a in args):
            return b.elementwise(lambda *xs: body(b, list(xs)), *args)
        if not all(isinstance(a, N.Stmt) or isinstance(a, PY_SCALARS) for a in args):
            b.error(f"sp.{name} takes numbers, vectors or matrices")
        return fn(b, *same_float(b, args))
    return body


CALLS = {**{name: positional(library_call(name)) for name in M.FUNCTIONS}, "where": positional(select)}

# math.f(x) is sp.f(x) on kernel values (Python computes it on constants); math.trunc, degrees and radians are
# scalar_calls.py's rows (math.trunc gives an int)
MATH_NAMES = ("erf", "erfc", "asinh", "acosh", "atanh", "cbrt", "copysign")
PYTHON_CALLS = {getattr(math, name): positional(from_math(getattr(math, name), library_call(name)))
                for name in MATH_NAMES if hasattr(math, name)}

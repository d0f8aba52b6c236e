"""Rows of the call tables for scalar math: `sp.<op>` math functions (by their Op's name, so a new op needs no
row here), sp.pow / min / max / clamp / select / cast / static / ndrange, dtype casts (`sp.f64(v)`), Python's
builtins abs / min / max / int / float / bool / len / range / pow and its math module (`math.exp`, ...). Each
row is a function of the kernel builder `b` (rows.py says how it receives the call)."""
import itertools
import math

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import BINARY_FLOAT, UNARY_FLOAT, Op
from .rows import one_arg, positional
from .vectors import VecValue

# `sp.<op name>(...)`: the math ops are called by their Op value (ops.py)
MATH1 = {op.value: op for op in UNARY_FLOAT | {Op.ABS, Op.SIGN}}
MATH2 = {op.value: op for op in BINARY_FLOAT - {Op.POW}}   # float functions of two floats (pow: power())


# ---- sp.* math ----
def unary_math(name, op):
    def body(b, args):
        v = one_arg(b, args, f"sp.{name}")
        return b.math1(op, b.const(float(v)) if isinstance(v, PY_SCALARS) else v)
    return body


def binary_math(name, op):
    def body(b, args):
        if len(args) != 2:
            b.error(f"wrong arguments for sp.{name}")
        if any(isinstance(a, VecValue) for a in args):
            return b.elementwise(lambda x, y: body(b, [x, y]), *args)
        x, y = args
        if isinstance(x, N.Stmt) or isinstance(y, N.Stmt):
            return b.compute(op, *b.unify(b.to_float(x), b.to_float(y)))
        return b.compute(op, b.to_float(x), b.to_float(y))
    return body


def power(b, args):
    """`sp.pow(a, b)`: as `a ** b` on a float `a` (an integer `b` is exact also for a < 0)."""
    if len(args) != 2:
        b.error("wrong arguments for sp.pow")
    if any(isinstance(a, VecValue) for a in args):
        return b.elementwise(lambda x, y: power(b, [x, y]), *args)
    return b.power(b.to_float(args[0]), args[1])


def sp_min(b, args):
    return b.minmax(Op.MIN, *args)


def sp_max(b, args):
    return b.minmax(Op.MAX, *args)


def clamp(b, args):
    if len(args) != 3:
        b.error("wrong arguments for sp.clamp")
    return b.minmax(Op.MAX, b.minmax(Op.MIN, args[0], args[2]), args[1])


def select(b, args):
    if len(args) != 3:
        b.error("wrong arguments for sp.select")
    return b.select(*args)


def cast(b, args):
    """`sp.cast(v, dtype)`; Python's int and float stand for i32 and f32, as in Taichi (`v.cast(int)`)."""
    if len(args) != 2:
        b.error("wrong arguments for sp.cast")
    dtype = {int: T.i32, float: T.f32}.get(args[1], args[1]) if isinstance(args[1], type) else args[1]
    if not isinstance(dtype, (T.DType, T.Vector)):
        b.error("wrong arguments for sp.cast")
    return b.cast_any(args[0], dtype)


def static(b, args):
    return one_arg(b, args, "sp.static")


def ndrange(b, args):
    """`sp.static(sp.ndrange(3, 3))`: with compile-time extents (or (begin, end) pairs), the index tuples, for
    a loop unrolled at compile time; other sp.ndrange(...) are loops (the iterable of a `for`)."""
    if not all(is_int(a) or (isinstance(a, tuple) and len(a) == 2 and all(map(is_int, a))) for a in args):
        b.error("sp.ndrange(...) is only supported as the iterable of a for loop, or in sp.static(...) with "
                "compile-time extents")
    return tuple(itertools.product(*[range(a) if is_int(a) else range(*a) for a in args]))


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def dtype_cast(b, fn, args, kw):
    """`sp.f32(v)`, `sp.i32(v)`: a dtype called converts its argument (element-wise for vectors)."""
    if kw:
        b.error(f"keyword arguments are not supported when calling {fn.name}")
    return b.cast_any(one_arg(b, args, fn.name), fn)


# ---- Python's builtins ----
def py_abs(b, args):
    return b.math1(Op.ABS, one_arg(b, args, "abs"))


def py_min(b, args):
    return min(*args) if all(isinstance(a, PY_SCALARS) for a in args) else b.minmax(Op.MIN, *args)


def py_max(b, args):
    return max(*args) if all(isinstance(a, PY_SCALARS) for a in args) else b.minmax(Op.MAX, *args)


def py_int(b, args):
    v = one_arg(b, args, "int")
    if isinstance(v, VecValue):   # per component, as numpy's astype
        return b.elementwise(lambda c: py_int(b, [c]), v)
    return int(v) if isinstance(v, PY_SCALARS) else b.cast(v, T.i32)


def py_float(b, args):
    v = one_arg(b, args, "float")
    if isinstance(v, VecValue):   # per component; f64 components stay f64
        return b.elementwise(lambda c: py_float(b, [c]), v)
    if isinstance(v, PY_SCALARS):
        return float(v)
    return b.cast(v, T.f64 if isinstance(v, N.Stmt) and v.dtype == T.f64 else T.f32)


def py_bool(b, args):
    return b.to_bool(one_arg(b, args, "bool"))


def py_len(b, args):
    a = one_arg(b, args, "len")
    if isinstance(a, N.ArrayParam):
        return b.emit(N.ArrayShape(a, 0))
    items = b.as_tuple(a)   # a tuple or x.shape
    if items is None:
        b.error(f"len() takes an array, a tuple or a shape in a kernel, got {type(a).__name__}")
    return len(items)


def py_range(b, args):
    if not all(isinstance(a, int) for a in args):
        b.error("range(...) is only supported as the iterable of a for loop")
    return range(*args)


# ---- Python's math module: math.f(x) is sp.f(x) on kernel values; on Python numbers, Python computes it ----
def from_math(fn, body):
    """The row body of `math.<fn>`: Python's own function on constants (float64, a compile-time constant, as
    Taichi does), else `body` (the sp.* equivalent)."""
    def math_body(b, args):
        if all(isinstance(a, PY_SCALARS) for a in args):
            try:
                return fn(*args)
            except (ValueError, OverflowError, TypeError) as e:
                b.error(f"constant expression fails: math.{fn.__name__}: {e}")
        return body(b, args)
    return math_body


def math_log(b, args):
    """math.log(x) or math.log(x, base)."""
    if len(args) == 2:
        return b.binop("/", math_log(b, args[:1]), math_log(b, args[1:]))
    return unary_math("log", Op.LOG)(b, args)


def to_int(body, name):
    """math.floor / ceil return ints in Python: the float result converted to i32."""
    def int_body(b, args):
        v = body(b, args)
        if isinstance(v, VecValue):
            b.error(f"math.{name} takes a scalar (sp.{name} works per component)")
        return b.cast(v, T.i32)
    return int_body


def math_trunc(b, args):
    return b.cast(b.to_float(one_arg(b, args, "math.trunc")), T.i32)   # toward zero, as the cast does


def math_fabs(b, args):
    return b.math1(Op.ABS, b.to_float(one_arg(b, args, "math.fabs")))


def math_degrees(b, args):
    return b.binop("*", one_arg(b, args, "math.degrees"), 180.0 / math.pi)


def math_radians(b, args):
    return b.binop("*", one_arg(b, args, "math.radians"), math.pi / 180.0)


def python_pow(b, args):
    """pow(a, b) is a ** b; math.pow(a, b) is float."""
    if len(args) != 2:
        b.error("pow() takes two arguments in a kernel")
    return b.binop("**", *args)


def sp_equivalent(name):
    return unary_math(name, MATH1[name]) if name in MATH1 else binary_math(name, MATH2[name])


MATH_SAME = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "exp", "exp2", "log2",
             "log10", "expm1", "log1p", "sqrt", "atan2", "hypot", "fmod")   # math.f is sp.f
MATH_MODULE = {**{getattr(math, name): sp_equivalent(name) for name in MATH_SAME if hasattr(math, name)},
               math.log: math_log, math.pow: power, math.fabs: math_fabs, math.trunc: math_trunc,
               math.floor: to_int(sp_equivalent("floor"), "floor"), math.ceil: to_int(sp_equivalent("ceil"), "ceil"),
               math.degrees: math_degrees, math.radians: math_radians}


CALLS = {**{name: positional(unary_math(name, op)) for name, op in MATH1.items()},
         **{name: positional(binary_math(name, op)) for name, op in MATH2.items()},
         "pow": positional(power), "min": positional(sp_min), "max": positional(sp_max),
         "clamp": positional(clamp), "select": positional(select), "cast": positional(cast),
         "static": positional(static), "ndrange": positional(ndrange)}

PYTHON_CALLS = {abs: positional(py_abs), min: positional(py_min), max: positional(py_max), int: positional(py_int),
                float: positional(py_float), bool: positional(py_bool), len: positional(py_len),
                range: positional(py_range), pow: positional(python_pow),
                **{fn: positional(from_math(fn, body)) for fn, body in MATH_MODULE.items()}}

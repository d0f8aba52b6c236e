"""Calls in kernels: the callee, a Python object, is looked up in tables of rows (as Numba registers a lowering
per function): `sp.*` builtins by their name, Python objects (builtins, `math` functions, types) by identity,
kinds of callee (dtypes, vector types, @sp.func functions, bound methods, derivative transforms) by type.
A row is `row(b, fn, node)`; rows.py turns functions of visited values into rows. Adding a builtin = one
function and one row in its module's table."""
from .. import types as T
from . import (arrays, derivatives, funcs, math_library, matrices, objects, quaternions, random_numbers, scalar_calls,
               vectors)
from .methods import BoundMethod, UnboundMethod, call_method, call_unbound
from .printing import print_call
from .rows import with_callee
from .scalar_calls import MATH1, MATH2  # noqa: F401 (the tests list the math builtins from here)


def merged(*tables):
    """One table from several; a key in two of them is a mistake."""
    out = {}
    for table in tables:
        twice = set(out) & set(table)
        assert not twice, f"call table rows defined twice: {sorted(map(str, twice))}"
        out.update(table)
    return out


tensor_row = with_callee(matrices.tensor_call)   # sp.vec3(...), sp.Matrix([...]), sp.mat3.identity()

# sp.<name>: functions of spvad/lang.py tagged `_spvad_builtin = name`
SP_BUILTINS = merged(scalar_calls.CALLS, math_library.CALLS, vectors.CALLS, matrices.CALLS, arrays.CALLS,
                     random_numbers.CALLS, derivatives.CALLS, quaternions.CALLS)

# Python objects, by identity
PYTHON_CALLS = merged(scalar_calls.PYTHON_CALLS, math_library.PYTHON_CALLS, matrices.PYTHON_CALLS,
                      {print: lambda b, fn, node: print_call(b, node), T.Vector: tensor_row, T.Matrix: tensor_row})

# kinds of callee, by type
BY_TYPE = {BoundMethod: call_method, objects.BoundFunc: objects.call_bound_func, UnboundMethod: call_unbound,
           T.DType: with_callee(scalar_calls.dtype_cast),
           derivatives.Transform: with_callee(derivatives.call_transform), T.Vector: tensor_row, T.Matrix: tensor_row}


def row_for(fn):
    """The row that compiles a call of `fn`, or None."""
    row = BY_TYPE.get(type(fn))
    if row is not None:
        return row
    name = getattr(fn, "_spvad_builtin", None)
    if name is not None:
        return SP_BUILTINS.get(name)
    if getattr(fn, "_spvad_func", False):
        return funcs.call_func
    if hasattr(fn, "_spvad_transform"):   # sp.grad(f) made outside the kernel
        return BY_TYPE[derivatives.Transform]
    if matrices.is_type_method(fn):
        return tensor_row
    try:
        return PYTHON_CALLS.get(fn)
    except TypeError:   # unhashable
        return None


def call(b, node):
    """The value of the call `node` (an ast.Call) in a kernel."""
    fn = b.visit(node.func)
    row = row_for(fn)
    if row is None:
        b.error(f"cannot call {getattr(fn, '__name__', repr(fn))} inside a kernel (only spvad builtins, "
                "@sp.func functions, Python's math functions and abs/min/max/int/float/bool/len)")
    return row(b, fn, node)

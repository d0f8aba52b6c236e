"""`print(...)` in kernels: the frontend's side. Arguments become one `Print` statement whose format pieces are
literal text (strings, constants, `sep`, `end`, f-string text) and value slots (scalars, vectors, matrices);
the text itself is made on the host at sync (ir/print_format.py, launch/prints.py).
"""
import ast

from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from .values import FieldRef
from .vectors import VecValue

KEYWORDS = ("sep", "end", "flush")


def print_call(b, node):
    """Emit the Print statement of the call `node` (builder `b`); a print has no value (None)."""
    options = {"sep": " ", "end": "\n"}
    for kw in node.keywords:
        if kw.arg not in KEYWORDS:
            b.error(f"print(...) in a kernel takes sep=, end= and flush=, not {kw.arg or '**kwargs'}=")
        value = _constant(b, kw.value)
        if kw.arg == "flush":
            continue   # the text reaches the host at sync in any case
        if value is not None and not isinstance(value, str):
            b.error(f"print(..., {kw.arg}=...) takes a constant string or None")
        options[kw.arg] = options[kw.arg] if value is None else value
    pieces, values = [], []
    for k, arg in enumerate(node.args):
        if k:
            pieces.append(options["sep"])
        _argument(b, arg, pieces, values)
    pieces.append(options["end"])
    b.emit(N.Print(_merged(pieces), tuple(values)))


def _constant(b, node):
    """The Python value of a keyword argument: a constant or a name bound to one."""
    if isinstance(node, ast.Constant):
        return node.value
    value = b.visit(node)
    if isinstance(value, (str, bool)) or value is None:
        return value
    b.error("print(...) keyword arguments must be compile-time constants")


def _argument(b, arg, pieces, values):
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        pieces.append(arg.value)
    elif isinstance(arg, ast.JoinedStr):
        _fstring(b, arg, pieces, values)
    elif isinstance(arg, ast.Starred):
        b.error("print(*args) is not supported in a kernel: pass the values one by one")
    else:
        _value(b, b.visit(arg), "", pieces, values)


def _fstring(b, node, pieces, values):
    """f"text {x} {v:.3f}": text pieces and value slots; a format spec must be constant text."""
    for part in node.values:
        if isinstance(part, ast.Constant):
            pieces.append(str(part.value))
            continue
        spec = ""
        if part.format_spec is not None:
            if not all(isinstance(p, ast.Constant) for p in part.format_spec.values):
                b.error("a format spec inside an f-string in a kernel must be constant text")
            spec = "".join(str(p.value) for p in part.format_spec.values)
            try:
                format(1.5, spec)   # a spec Python rejects for numbers is reported now, not at sync
            except ValueError:
                try:
                    format(1, spec)
                except ValueError:
                    b.error(f"format spec {spec!r} in an f-string is not valid for numbers")
        _value(b, b.visit(part.value), spec, pieces, values)


def _value(b, v, spec, pieces, values):
    """Append the pieces (and values) of one printed Python/kernel value."""
    if isinstance(v, str):
        pieces.append(format(v, spec) if spec else v)
    elif v is None or isinstance(v, PY_SCALARS):
        pieces.append(format(v, spec) if spec else str(v))
    elif isinstance(v, N.Stmt) and v.dtype is not None:
        pieces.append(((), spec))
        values.append(v)
    elif isinstance(v, VecValue):   # vectors, and matrices (a 2-D shape), components row-major
        pieces.append((tuple(v.shape), spec))
        values.extend(b.typed(c) for c in v.comps)
    elif isinstance(v, tuple):
        pieces.append("(")
        for k, item in enumerate(v):
            if k:
                pieces.append(", ")
            _value(b, item, spec, pieces, values)
        pieces.append(",)" if len(v) == 1 else ")")
    elif isinstance(v, (N.ArrayParam, FieldRef)):
        b.error("print(...) cannot print a whole ndarray inside a kernel: print its elements (x[i]), or "
                "print the array on the host (x.numpy())")
    else:
        b.error(f"print(...) in a kernel takes constant strings, numbers, vectors and matrices, not "
                f"{type(v).__name__} {getattr(v, '__name__', v)!r}")


def _merged(pieces):
    """Adjacent text pieces joined, empty ones dropped."""
    out = []
    for p in pieces:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += p
                continue
        out.append(p)
    return tuple(out)

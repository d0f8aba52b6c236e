"""The rows (first-axis indices) of an array that a kernel's accesses touch, where they depend on the launch's
scalars only: `x[t, i]` touches row t, `x[t + 1, i] = v` row t + 1. A Tape compares the rows a launch writes
with the rows a recorded gradient reads, and keeps a copy of the array only when they meet: a time loop that
writes step t + 1 of a (T + 1, n) array while the gradient of step t reads row t never copies it."""
from . import nodes as N
from .ops import Op


def row_expr(value):
    """`value` as (scalar index or None, offset), the row `scalars[index] + offset` (or the constant `offset`),
    or None when it is not such an expression of the launch's scalars."""
    if isinstance(value, N.Const) and value.dtype.is_int:
        return (None, int(value.value))
    if isinstance(value, N.ScalarArg) and value.dtype.is_int:
        return (value.param.index, 0)
    if isinstance(value, N.Compute) and value.op in (Op.ADD, Op.SUB) and len(value.args) == 2:
        a, b = row_expr(value.args[0]), row_expr(value.args[1])
        if a is None or b is None:
            return None
        if value.op is Op.SUB:
            return None if b[0] is not None else (a[0], a[1] - b[1])
        if a[0] is not None and b[0] is not None:
            return None
        return (a[0] if a[0] is not None else b[0], a[1] + b[1])
    return None


def accessed_rows(kernel, writes):
    """(array index, field) -> the sorted tuple of row expressions of its accesses (stores and atomics when
    `writes`, else loads and atomics), or None where some access's row is not a row expression."""
    found = {}
    for task in kernel.tasks:
        for s in [*N.walk(task.header), *N.walk(task.body)]:   # a header may read arrays (its thread count)
            kind = type(s)   # reads: loads and atomics (an atomic gives the old value)
            if not kind.ACCESSES_ARRAY or not (kind.WRITES_ARRAY if writes else kind.READS_MEMORY):
                continue
            key = (s.array.index, s.field)
            rows = found.setdefault(key, set())
            expr = row_expr(s.indices[0]) if s.indices else None
            if rows is None or expr is None:
                found[key] = None
            else:
                rows.add(expr)
    return {key: None if rows is None else tuple(sorted(rows, key=_order)) for key, rows in found.items()}


def _order(expr):
    return (-1 if expr[0] is None else expr[0], expr[1])


def evaluate(exprs, scalars, num_rows):
    """The rows `exprs` (from accessed_rows) name for a launch's scalars, as a frozenset; None (every row)
    when `exprs` is None or a row falls outside 0 .. num_rows - 1 (an out-of-bounds access)."""
    if exprs is None:
        return None
    rows = frozenset(offset if k is None else int(scalars[k]) + offset for k, offset in exprs)
    return rows if all(0 <= r < num_rows for r in rows) else None

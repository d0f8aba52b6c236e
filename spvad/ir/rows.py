"""The slices of an array that a kernel's accesses touch, where they depend on the launch's scalars only: along
any axis whose index is an affine expression of the scalars (`x[t, i]`: row t of axis 0; `h[i, t]`: column t
of axis 1; `v[t + k]`, `p[6 * t + k + 1]`). A Tape compares the rows a launch writes with the rows a recorded
gradient reads, and keeps a copy of only those rows, and only when they meet: a time loop that writes step
t + 1 of a (T + 1, n) array while the gradient of step t reads row t never copies it.

A row expression is (terms, offset): the row `offset + sum(c * scalars[k] for k, c in terms)`; terms is a
sorted tuple of (scalar index, coefficient) pairs, empty for a constant row."""
from . import nodes as N
from .ops import Op


def row_expr(value):
    """`value` as a row expression (see above), or None when it is no affine expression of the launch's
    integer scalars. Integer arithmetic wraps on the device; an affine expression agrees with Python's
    modulo 2**32, so a row Python finds inside an array's bounds is the row the device addresses."""
    if isinstance(value, N.Const) and value.dtype.is_int:
        return ((), int(value.value))
    if isinstance(value, N.ScalarArg) and value.dtype.is_int:
        return (((value.param.index, 1),), 0)
    if not isinstance(value, N.Compute) or not value.dtype.is_int:
        return None
    args = [row_expr(a) for a in value.args]
    if any(a is None for a in args):
        return None
    if value.op is Op.NEG and len(args) == 1:
        return _scaled(args[0], -1)
    if len(args) != 2:
        return None
    a, b = args
    if value.op is Op.ADD:
        return _sum(a, b)
    if value.op is Op.SUB:
        return _sum(a, _scaled(b, -1))
    if value.op is Op.MUL and not (a[0] and b[0]):   # a product with a constant
        return _scaled(b, a[1]) if not a[0] else _scaled(a, b[1])
    return None


def _scaled(expr, c):
    terms, offset = expr
    return (tuple((k, c * m) for k, m in terms if c * m), c * offset)


def _sum(a, b):
    coefs = dict(a[0])
    for k, m in b[0]:
        coefs[k] = coefs.get(k, 0) + m
    return (tuple(sorted((k, m) for k, m in coefs.items() if m)), a[1] + b[1])


def accessed_rows(kernel, writes, also=()):
    """(array index, field) -> {axis: sorted tuple of the row expressions of its accesses along that axis},
    for the axes along which every access's index is a row expression (loads and atomics, or stores and
    atomics when `writes`); None where there is no such axis. `also`: more kernels launched with the same
    arrays (a gradient's depth probes)."""
    found = {}
    for task in [t for k in (kernel, *also) for t in k.tasks]:
        for s in [*N.walk(task.header), *N.walk(task.body)]:   # a header may read arrays (its thread count)
            kind = type(s)   # reads: loads and atomics (an atomic gives the old value)
            if not kind.ACCESSES_ARRAY or not (kind.WRITES_ARRAY if writes else kind.READS_MEMORY):
                continue
            key = (s.array.index, s.field)
            axes = {axis: {e} for axis, e in enumerate(map(row_expr, s.indices)) if e is not None}
            known = found.setdefault(key, axes)
            for axis in list(known):
                if axis not in axes:
                    del known[axis]
                elif known is not axes:
                    known[axis] |= axes[axis]
    return {key: {axis: tuple(sorted(exprs)) for axis, exprs in axes.items()} or None
            for key, axes in found.items()}


# id(exprs) -> (exprs, num_rows, rows) for expressions of constants only (w[j, i] for j in static(range(64))):
# their rows are worked out once, and the same frozenset object each time tells a Tape that a read repeats
# the last (checkpoints._Watch.add). Holding `exprs` keeps its id from being reused.
_CONSTANT_ROWS = {}


def evaluate(exprs, scalars, num_rows):
    """The rows `exprs` (one axis of accessed_rows) name for a launch's scalars, as a set (not to be changed);
    None (every row) when `exprs` is None or a row falls outside 0 .. num_rows - 1 (an out-of-bounds access)."""
    if exprs is None:
        return None
    if len(exprs) == 1 and len(exprs[0][0]) == 1:   # one row moving with one scalar (x[t + 1]): a Tape's time
        (((k, c),), row) = exprs[0]                  # loop asks at every launch
        row += c * int(scalars[k])
        return {row} if 0 <= row < num_rows else None
    known = _CONSTANT_ROWS.get(id(exprs))
    if known is not None and known[0] is exprs and known[1] == num_rows:
        return known[2]
    rows, constant = set(), True
    for terms, row in exprs:
        if terms:
            constant = False
            for k, c in terms:
                row += c * int(scalars[k])
        if not 0 <= row < num_rows:
            return None
        rows.add(row)
    if constant:
        if len(_CONSTANT_ROWS) > 4096:   # (compiled kernels come and go in a long session)
            _CONSTANT_ROWS.clear()
        rows = _CONSTANT_ROWS[id(exprs)] = (exprs, num_rows, frozenset(rows))
        rows = rows[2]
    return rows

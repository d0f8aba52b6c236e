"""Top-level values read from arrays (`m = n[None]`, then `for i in range(m)`). Python's value is the arrays' at
the assignment: the serial task holding the assignment computes it there, and every later task that uses it
reads the arrays again, once, at the top of its body (or in its header, as a thread count). That is the same
value unless a dispatch in between writes those arrays: `check` refuses such a kernel (the very parameter), or
leaves the launch the pairs of parameters it must not find bound to one ndarray (two that may be one)."""
import ast

from ..errors import CompileError
from ..ir import nodes as N
from .values import ArrayRead

_MISSING = object()


def array_loads(scratch):
    """The loads of a trial evaluation that read arrays and nothing else (every other statement valid in any
    task, as a thread count's are), or None."""
    loads = [s for s in scratch.stmts if isinstance(s, N.GlobalLoad)]
    if not all(type(s).HEADER_OK for s in scratch.stmts if not isinstance(s, N.GlobalLoad)):
        return None
    if not all(s.field == "primal" and s.guard is None for s in loads):
        return None
    return loads


def bind(b, node, names, values, unpack, scope, scratch):
    """Bind `names` (the targets of a tuple assignment if `unpack`) to ArrayReads of `node`, evaluated into
    `scratch` as `values`. Inside a serial task they are computed there, in that task; between tasks, where
    used (`lo, hi = b[0], b[1]`: each reads its own element only)."""
    task = b.task
    if task is None:
        origin = (len(b.kernel.tasks), frozenset())
    else:
        b.block.stmts.extend(scratch.stmts)
        origin = (b.kernel.tasks.index(task), frozenset(id(s) for s in N.walk(task.body)))
    elements = unpack and isinstance(node, ast.Tuple)
    for k, (name, value) in enumerate(zip(names, values)):
        expr, index = (node.elts[k], None) if elements else (node, k if unpack else None)
        read = b.scope.names[name] = ArrayRead(expr, scope, index, name, origin, b.loc)
        if task is not None:   # its value in this task, as value_of keeps it (the whole, if it picks from it)
            b.read_values[(id(read), id(task))] = value if index is None else tuple(values)


def value_of(b, read):
    """What an ArrayRead's name means here: computed in this task's header (a thread count), at the top of its
    body (once per task), or in place while another top-level value is tried."""
    task = b.task or b.trial_task
    if task is None:   # a trial between tasks (`k = m * 2`): its value reads the arrays too
        value = _evaluate(b, read)
    elif b.block is task.header:   # evaluated before the dispatch, by the host or a counting dispatch
        start = len(b.block.stmts)
        value = _evaluate(b, read)
        _note_use(b, read, task, b.block.stmts[start:])
    else:
        key = (id(read), id(task))
        value = b.read_values.get(key, _MISSING)
        if value is _MISSING:
            value = b.read_values[key] = _hoisted(b, read, task)
    return value if read.index is None else b.as_tuple(value)[read.index]


def _note_use(b, read, task, stmts):
    arrays = {s.array for s in stmts if isinstance(s, N.GlobalLoad)}
    use = b.read_uses.setdefault((id(read), id(task), task.header is b.block), (read, task, b.loc, set()))
    use[3].update(arrays)


def _evaluate(b, read):
    saved = b.scope, b.loc
    b.scope, b.loc = read.scope, read.loc   # its loads are the assignment's (debug reports name that line)
    try:
        return b.visit(read.node)
    finally:
        b.scope, b.loc = saved


def _hoisted(b, read, task):
    """`read` evaluated at the top of `task`'s body (the current one), before anything the task writes."""
    if b.hoisting:   # inside another value's hoisting (`k = m * 2`): that block goes to the top as a whole
        start = len(b.block.stmts)
        value = _evaluate(b, read)
        _note_use(b, read, task, b.block.stmts[start:])
        return value
    saved, b.block, b.hoisting = b.block, N.Block(), True
    try:
        value = _evaluate(b, read)
        stmts = b.block.stmts
        _note_use(b, read, task, stmts)
    finally:
        b.block, b.hoisting = saved, False
    body = task.body.stmts
    body[b.alloca_at:b.alloca_at] = stmts
    b.alloca_at += len(stmts)
    return value


def check(b):
    """Refuse a use after a dispatch (or beside threads) writing an array its value was read from; returns
    (read array index, written array index, message) for each pair that may be one ndarray."""
    tasks, pairs = b.kernel.tasks, {}
    for read, task, loc, arrays in b.read_uses.values():
        first, before = read.origin
        between = [(s, False) for t in tasks[first:tasks.index(task)] for s in N.walk(t.body)
                   if _writes(s) and id(s) not in before]
        if task.kind == "parallel":   # its threads read the arrays while the others run
            between += [(s, True) for s in N.walk(task.body) if _writes(s)]
        for w, beside in between:
            for a in sorted(arrays, key=lambda a: a.index):
                if w.array is a:
                    raise CompileError(_refusal(read, a, w, beside), *_where(loc))
                if w.array.dtype == a.dtype and w.array.ndim == a.ndim:
                    pairs.setdefault((a.index, w.array.index), _alias(b.kernel.name, read, a, w, beside, loc))
    return tuple((i, j, why) for (i, j), why in pairs.items())


def _writes(s):
    return type(s).WRITES_ARRAY and s.field == "primal"


def _what(read, a, w, beside):
    held = f"'{read.name}' holds '{a.name}' as it was at line {_line(read)} (`{read.loc.source.strip()}`)"
    if beside:
        return f"{held}, and this loop writes '{w.array.name}' at line {_line(w)} while its threads read it"
    return (f"{held}, and line {_line(w)} writes '{w.array.name}' before this dispatch, which reads it again "
            "(each top-level loop of a kernel is a dispatch of its own), so it would see the new value")


def _refusal(read, a, w, beside):
    return (_what(read, a, w, beside) + ": copy the value first into an array that nothing writes until here "
            f"(`{a.name}_copy[None] = ...` before line {_line(w)}), or pass it as a scalar argument")


def _alias(kernel, read, a, w, beside, loc):
    return (f"kernel {kernel}: one ndarray is bound to both '{a.name}' and '{w.array.name}', but "
            + _what(read, a, w, beside) + f" (used at line {_where(loc)[1]}): pass two different ndarrays")


def _line(s):
    return s.loc.lineno if s.loc is not None else "?"


def _where(loc):
    return (loc.filename, loc.lineno, loc.source) if loc is not None else (None, "?", None)

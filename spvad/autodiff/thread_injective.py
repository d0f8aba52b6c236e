"""Which arrays of a parallel task no two threads share, so that reverse mode may update their gradients with a
plain read-add-write instead of an atomic: the indices of every access, taken together, give back the thread
index (`x[t]`, `x[t + 1, i]`, `x[t // n, t % n]` as sp.vmap and 2-D parallel loops write them).

A wrong "private" loses gradient updates silently, so every step below is an identity that holds in 32-bit
integer arithmetic: w = v - u, w = n * (w // n) + w % n (n != 0), and so on.
"""
from ..ir import nodes as N
from ..ir.ops import Op


def thread_private_arrays(task):
    """The arrays of a parallel task that no two threads share: the index components on which every access to
    the array agrees (the same value in every thread) determine the thread index, so each thread reads and
    writes elements of its own."""
    if task.kind != "parallel":
        return set()
    seen = {}
    for s in N.walk(task.body):
        if type(s).ACCESSES_ARRAY:
            seen.setdefault(s.array, []).append(s.indices)
    private = set()
    for array, forms in seen.items():
        shared = [forms[0][k] for k in range(len(forms[0]))
                  if all(_same_value(f[k], forms[0][k]) for f in forms)]
        if determines_thread(shared, task.num_threads):
            private.add(array)
    return private


def determines_thread(values, count):
    """Whether the thread index can be computed back from `values` (integers of the task whose thread count,
    a header value, is `count`): then two threads never have the same `values`. Grows the set of values known
    from the ones given: w from w + u, w - u, u - w, w ^ u, -w, ~w, w * c (u the same for every
    thread, c a nonzero constant) and a cast between 32-bit integers; w from w // n and w % n together."""
    known, pending = [], list(values)
    while pending:
        v = pending.pop()
        if any(v is k for k in known):
            continue
        if isinstance(v, N.ThreadIndex):
            return True
        known.append(v)
        pending += _recovered_from(v)
        partner = _divmod_partner(v, known, count)
        if partner is not None:
            pending.append(partner)
    return False


def _recovered_from(v):
    """The operands that v alone gives back: [w] where v is a bijection of w (32-bit wrap-around included)."""
    if not isinstance(v, N.Compute) or not v.dtype.is_int:
        return []
    if v.op is Op.CAST:   # i32 <-> u32: a bijection (bools and floats are not integers here)
        return [v.args[0]] if v.args[0].dtype.is_int and v.args[0].dtype.bits == v.dtype.bits else []
    if v.op in (Op.NEG, Op.BIT_NOT):   # w = -v, ~v
        return [v.args[0]]
    if v.op in (Op.ADD, Op.SUB, Op.BIT_XOR):   # w + u, u + w, w - u, u - w, w ^ u: w = v - u, ..., u - v, v ^ u
        a, b = v.args
        return [w for w, other in ((a, b), (b, a)) if _uniform(other)]
    if v.op is Op.MUL:   # w * c, c a nonzero constant (as before: w * c wraps only where w * c is out of range)
        a, b = v.args
        return [w for w, c in ((a, b), (b, a)) if isinstance(c, N.Const) and c.value]
    return []


def _divmod_partner(v, known, count):
    """w, where v is w // n or w % n and the other of the pair is known: w = n * (w // n) + w % n (Python's
    floor semantics, which both the interpreter and the SPIR-V lowering implement), given n != 0."""
    if not isinstance(v, N.Compute) or v.op not in (Op.FLOORDIV, Op.MOD) or not v.dtype.is_int:
        return None
    w, n = v.args
    other = Op.MOD if v.op is Op.FLOORDIV else Op.FLOORDIV
    for k in known:
        if isinstance(k, N.Compute) and k.op is other and k.dtype == v.dtype and _same_value(k.args[0], w) \
                and _same_value(k.args[1], n) and _uniform(n) and _nonzero(n, count):
            return w
    return None


def _nonzero(n, count):
    """Whether n (the same for every thread) is never 0 where a thread runs: a nonzero constant, or a value
    the thread count vanishes with (n a factor of it, as in `range(B * n)`, sp.ndrange(B, n) and sp.vmap)."""
    return (isinstance(n, N.Const) and n.value != 0) or _vanishes_with(count, n)


def _vanishes_with(count, n):
    """Whether `count` is 0 whenever n is: n itself, a product with n as a factor, or such a count kept from
    going negative (max(c, 0)), cast, or plus 0."""
    if _same_value(count, n):
        return True
    if not isinstance(count, N.Compute) or not count.dtype.is_int:
        return False
    args = count.args
    if count.op is Op.MUL:
        return any(_vanishes_with(a, n) for a in args)
    if count.op is Op.CAST:
        return args[0].dtype.is_int and _vanishes_with(args[0], n)
    if count.op in _ZERO_KEEPING and len(args) == 2:   # op(0, c) == 0 for these constants c
        pairs = ((args[0], args[1]),) if count.op is Op.SUB else ((args[0], args[1]), (args[1], args[0]))
        return any(isinstance(c, N.Const) and _ZERO_KEEPING[count.op](c.value) and _vanishes_with(a, n)
                   for a, c in pairs)
    return False


_ZERO_KEEPING = {Op.MAX: lambda c: c <= 0, Op.MIN: lambda c: c >= 0, Op.ADD: lambda c: c == 0,
                 Op.SUB: lambda c: c == 0}


def _same_value(a, b):
    """Whether a and b hold the same value in a thread: one statement, or the thread index or launch constants
    combined by the same integer operations (so the header, computed on the host, agrees with the body)."""
    if a is b:
        return True
    if type(a) is not type(b) or a.dtype != b.dtype or not a.dtype.is_int:
        return False
    if isinstance(a, N.Const):
        return a.value == b.value
    if isinstance(a, N.ScalarArg):
        return a.param is b.param
    if isinstance(a, N.ArrayShape):
        return a.array is b.array and a.axis == b.axis
    if isinstance(a, N.ThreadIndex):
        return True
    if isinstance(a, N.Compute):
        return a.op is b.op and len(a.args) == len(b.args) and all(map(_same_value, a.args, b.args))
    return False


def _uniform(v):
    """The same value in every thread (built from constants, scalar arguments and shapes)."""
    if isinstance(v, (N.Const, N.ScalarArg, N.ArrayShape)):
        return True
    return isinstance(v, N.Compute) and all(_uniform(a) for a in v.args)

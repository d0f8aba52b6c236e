"""simplify: constant folding, exact algebraic identities, CSE, static-if folding, store-to-load forwarding
and dead-code elimination.

Folding evaluates with scalar_ops.EVAL so it can never disagree with the oracle. Values are only replaced by
values that dominate them (defined earlier in the same or an enclosing block of the same task part).
"""
from . import nodes as N
from .interp import eval_op, to_scalar
from .ops import Op

MAX_ROUNDS = 8


def simplify(kernel, distinct=False):
    """Simplify every task of `kernel` in place until nothing changes; returns the kernel. `distinct`: a write
    changes only the array it names (nodes.may_write), so loads of other arrays are forwarded across it."""
    for task in kernel.tasks:
        for _ in range(MAX_ROUNDS):
            rewriter = _Rewriter(task, distinct)
            rewriter.run()
            eliminate_dead_code(task)
            if not rewriter.reshaped:   # another round would change nothing (see _Rewriter.reshaped)
                break
    return kernel


def fold_static_ifs(kernel):
    """Replace every If whose condition is a Const by the statements of the branch it takes."""
    def fold(block):
        out = []
        for s in block.stmts:
            if isinstance(s, N.If) and isinstance(s.cond, N.Const):
                taken = s.then_body if s.cond.value else s.else_body
                fold(taken)
                out.extend(taken.stmts)
                continue
            for b in s.blocks():
                fold(b)
            out.append(s)
        block.stmts[:] = _truncate_after_jump(out)

    for task in kernel.tasks:
        fold(task.body)
    return kernel


def _truncate_after_jump(stmts):
    """Statements after a Break/Continue in the same block never run (and nothing outside can use them)."""
    for k, s in enumerate(stmts):
        if isinstance(s, (N.Break, N.Continue)):
            return stmts[:k + 1]
    return stmts


def _const_key(value, dtype):
    # repr tells -0.0 from 0.0 and matches nan with nan; the value is first normalised to the dtype.
    return ("const", dtype.name, repr(to_scalar(value, dtype).item()))


# The key of a value CSE may replace by an equal one, per node kind (by exact type: one lookup per statement,
# most of which have none)
_CSE_KEYS = {
    N.Const: lambda s: _const_key(s.value, s.dtype),
    N.ScalarArg: lambda s: ("arg", id(s.param)),
    N.ArrayShape: lambda s: ("shape", id(s.array), s.axis),
    N.ThreadIndex: lambda s: ("tid", s.dtype.name),
    N.LoopIndex: lambda s: ("loop", id(s.loop), s.dtype.name),
    N.Compute: lambda s: ("op", s.op, s.dtype.name, tuple(id(a) for a in s.args)),
}


def _cse_key(s):
    key = _CSE_KEYS.get(type(s))
    return None if key is None else key(s)


def _is_const(s, value):
    """`s` is a Const equal to `value` (for floats bit for bit up to nan payloads, so -0.0 != 0.0)."""
    if not isinstance(s, N.Const):
        return False
    v = to_scalar(s.value, s.dtype)
    if s.dtype.is_float:
        return repr(float(v)) == repr(float(value))
    return bool(v == value)


def _identity(s):
    """An existing value equal to Compute `s` bit for bit (for every input), or None."""
    a = s.args
    op, dt = s.op, s.dtype
    if op is Op.CAST and a[0].dtype == dt:
        return a[0]
    if op in (Op.NEG, Op.NOT) and isinstance(a[0], N.Compute) and a[0].op is op:
        return a[0].args[0]
    if op is Op.SELECT:
        if isinstance(a[0], N.Const):
            return a[1] if a[0].value else a[2]
        return a[1] if a[1] is a[2] else None
    if op in (Op.MIN, Op.MAX, Op.BIT_AND, Op.BIT_OR, Op.AND, Op.OR) and a[0] is a[1]:
        return a[0]
    if len(a) != 2:
        return None
    x, y = a
    if dt.is_int:
        if op in (Op.ADD, Op.BIT_OR, Op.BIT_XOR) and _is_const(x, 0):
            return y
        if op in (Op.ADD, Op.SUB, Op.BIT_OR, Op.BIT_XOR, Op.SHL, Op.SHR) and _is_const(y, 0):
            return x
    if dt.is_int or dt.is_float:
        # x*1 and x/1 are exact for floats too (including -0.0, inf and nan); x+(-0.0) and x-(+0.0) as well.
        if op is Op.MUL and _is_const(x, 1):
            return y
        if op in (Op.MUL, Op.DIV) and _is_const(y, 1):
            return x
    if dt.is_float:
        if op is Op.ADD and _is_const(y, -0.0):
            return x
        if op is Op.ADD and _is_const(x, -0.0):
            return y
        if op is Op.SUB and _is_const(y, 0.0):
            return x
    if dt.is_bool:
        if (op is Op.AND and _is_const(y, True)) or (op is Op.OR and _is_const(y, False)):
            return x
        if (op is Op.AND and _is_const(x, True)) or (op is Op.OR and _is_const(x, False)):
            return y
    return None


class _Rewriter:
    """One forward walk: fold, apply identities, CSE and fold static ifs, rewriting operands as it goes."""

    def __init__(self, task, distinct):
        self.task, self.distinct = task, distinct
        self.repl = {}      # removed statement -> the dominating value that replaces it
        self.changed = False
        # A static If folded or statements dropped after a jump: writes may be gone that a construct around
        # them was assumed to make (its loads were not forwarded across it), so another round may find more.
        # Without that, a second walk would find nothing: every operand is rewritten before its user is
        # looked at, and dead code going (the DCE between rounds) removes no value a lookup could hit.
        self.reshaped = False

    def run(self):
        self.block(self.task.header, {}, {})
        self.task.num_threads = self.repl.get(self.task.num_threads, self.task.num_threads)
        self.block(self.task.body, {}, {})
        return self.changed

    def block(self, block, scope, memory):
        """Rewrite `block`; `scope` maps CSE keys to the values available here, `memory` an element this
        thread stored or loaded to its value (both copied into nested blocks). A load of such an element
        takes the value: the same number, one load fewer, and a gradient replay that need not re-read
        an array the launch itself changed."""
        out = []
        pending = list(reversed(block.stmts))
        while pending:
            s = pending.pop()
            s.replace_operands(self.repl)
            if isinstance(s, N.If) and isinstance(s.cond, N.Const):
                taken = s.then_body if s.cond.value else s.else_body
                pending.extend(reversed(taken.stmts))
                self.changed = self.reshaped = True
                continue
            new = s
            if isinstance(s, N.Compute):
                same = _identity(s)
                if same is not None:
                    self.replace(s, same)
                    continue
                new = _fold(s)
            key = _cse_key(new)
            if key is not None and key in scope:
                self.replace(s, scope[key])
                continue
            if key is not None:
                scope[key] = new
            if isinstance(new, N.GlobalLoad) and new.guard is None:
                known = memory.get(_element(new))
                if known is not None:   # stored or loaded before by this thread, not written since
                    self.replace(s, known)
                    continue
                memory[_element(new)] = new
            if type(new).WRITES_ARRAY:
                _forget(memory, {N.may_write(new.array, new.field, self.distinct)}, self.distinct, _element(new))
                if isinstance(new, N.GlobalStore):
                    memory[_element(new)] = new.value
            if new is not s:
                self.replace(s, new)
            if new.BLOCK_FIELDS:
                written = _written_in(new, self.distinct) if memory else set()   # nothing known: nothing to forget
                for b in new.blocks():   # a loop body also runs after its own later stores
                    inner = dict(memory)
                    if isinstance(new, (N.RangeFor, N.While)):
                        _forget(inner, written, self.distinct)
                    self.block(b, dict(scope), inner)
                _forget(memory, written, self.distinct)
            out.append(new)
        kept = _truncate_after_jump(out)
        self.reshaped |= len(kept) != len(out)
        out = kept
        self.changed |= len(out) != len(block.stmts) or any(x is not y for x, y in zip(out, block.stmts))
        block.stmts[:] = out

    def replace(self, old, new):
        self.repl[old] = new
        self.changed = True


def _element(s):
    """The element a GlobalLoad/GlobalStore addresses: (array, field, index values)."""
    return (s.array, s.field, tuple(s.indices))


def _written_in(construct, distinct):
    """What `construct` can write (nodes.may_write of each write)."""
    return {N.may_write(t.array, t.field, distinct) for b in construct.blocks() for t in N.walk(b)
            if type(t).WRITES_ARRAY}


def _forget(memory, written, distinct, element=None):
    """Drop what `memory` knows of the elements `written` (nodes.may_write) may have changed: any index of a
    written array may alias, and unless `distinct`, so may two parameters of one dtype. `element`: the one
    element a single write changes; another component of the same array element is not it."""
    for k in [k for k in memory if N.may_write(k[0], k[1], distinct) in written and not _other_component(k, element)]:
        del memory[k]


def _other_component(a, b):
    """Whether elements a and b (_element) are the same array's and differ in a component index (the last
    axes of a vector or matrix ndarray: static, always in range, so no two constants there alias), as the
    components of one `v[t] = ...` store do (`x[t] = x[t - 1] + dt * v[t]` then reads them all back)."""
    if b is None or a[0] is not b[0] or a[1] != b[1] or len(a[2]) != len(b[2]):
        return False
    comps = len(a[0].element_shape)
    return any(isinstance(i, N.Const) and isinstance(j, N.Const) and i.value != j.value
               for i, j in zip(a[2][len(a[2]) - comps:], b[2][len(b[2]) - comps:])) if comps else False


def _fold(s):
    """A new Const with the value of Compute `s` when all its operands are Const, else `s`."""
    if not all(isinstance(a, N.Const) for a in s.args):
        return s
    try:
        value = eval_op(s.op, s.dtype, [to_scalar(a.value, a.dtype) for a in s.args])
    except Exception:   # undefined at run time (e.g. integer division by zero): leave it to the GPU
        return s
    c = N.Const(value.item(), s.dtype)
    c.loc = s.loc
    return c


# ---- dead code ----------------------------------------------------------------------------------------
def eliminate_dead_code(task):
    """Remove unused pure statements, Allocas never loaded (with their stores), and If/RangeFor with empty
    blocks, until nothing changes. Returns whether anything was removed."""
    changed = False
    while True:
        removed, emptied = _dce_round(task)
        changed |= removed
        if not emptied:   # what stays live stays so, unless a dropped If or loop left its operands unused
            return changed


def removable(s):
    """Dropped when unused: pure values and reads without side effects (loads are never CSE'd, a store may
    intervene; a load of the element this thread just stored takes the stored value, see _Rewriter.block),
    slots never loaded with their stores, and adstacks never read with their pushes and pops."""
    kind = type(s)
    return (kind.PURE or (kind.READS_MEMORY and not kind.HAS_SIDE_EFFECTS)
            or isinstance(s, (N.Alloca, N.LocalStore, N.AdStackAlloca, N.AdStackPush, N.AdStackPop)))


def live_statements(task, is_removable=removable):
    """The statements of `task` that what it does depends on: those `is_removable` leaves out, and what
    they read, through operands and the stores of the slots they load."""
    stmts = list(N.walk(task.header)) + list(N.walk(task.body))
    stores = {}
    for s in stmts:
        if isinstance(s, N.LocalStore):
            stores.setdefault(s.slot, []).append(s)
        elif isinstance(s, (N.AdStackPush, N.AdStackPop)):
            stores.setdefault(s.stack, []).append(s)
    work = [task.num_threads] + [s for s in stmts if not is_removable(s)]
    live = set()
    while work:
        s = work.pop()
        if s in live:
            continue
        live.add(s)
        work.extend(s.operands())
        work.extend(stores.get(s, ()))   # a live slot (adstack) keeps its stores (pushes and pops)
    return live


def _dce_round(task):
    """One sweep: (whether anything was removed, whether an emptied If or RangeFor was)."""
    live = live_statements(task)
    emptied = []

    def sweep(block):
        out, removed = [], False
        for s in block.stmts:
            if s.BLOCK_FIELDS:
                for b in s.blocks():
                    removed |= sweep(b)
            if removable(s) and s not in live:
                continue
            if (isinstance(s, N.If) and not s.then_body.stmts and not s.else_body.stmts) or (
                    isinstance(s, N.RangeFor) and not s.body.stmts):
                emptied.append(s)
                continue
            out.append(s)
        removed |= len(out) != len(block.stmts)
        block.stmts[:] = out
        return removed

    return sweep(task.header) | sweep(task.body), bool(emptied)

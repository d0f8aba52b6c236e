"""Readable text of IR: one statement per line (`%12 = add f32 %3 %7`), nested blocks indented."""
from . import nodes as N

INDENT = "  "


def _v(s):
    # Broken IR (a non-statement operand) still prints, so the verifier can show it.
    return f"%{s.id}" if isinstance(s, N.Stmt) else f"<{s!r}>"


def _access(s):
    field = "" if s.field == "primal" else f".{s.field}"
    return f"{s.array.name}{field}[{', '.join(_v(i) for i in s.indices)}]"


def _name(s):
    return f' "{s.name}"' if s.name else ""


def _exit(loop):
    return f" exit_flag={_v(loop.exit_flag)}" if loop.exit_flag is not None else ""


def _head(s):
    """The statement's own line, without nested blocks."""
    if isinstance(s, N.Const):
        return f"{_v(s)} = const {s.dtype} {s.value!r}"
    if isinstance(s, N.ScalarArg):
        return f"{_v(s)} = arg {s.dtype} {s.param.name}"
    if isinstance(s, N.ArrayShape):
        return f"{_v(s)} = shape {s.dtype} {s.array.name} {s.axis}"
    if isinstance(s, N.ThreadIndex):
        return f"{_v(s)} = thread_index {s.dtype}"
    if isinstance(s, N.LoopIndex):
        return f"{_v(s)} = loop_index {s.dtype} {_v(s.loop)}"
    if isinstance(s, N.Compute):
        return f"{_v(s)} = {s.op.value} {s.dtype} {' '.join(_v(a) for a in s.args)}"
    if isinstance(s, N.Alloca):
        return f"{_v(s)} = alloca {s.dtype}{_name(s)}"
    if isinstance(s, N.LocalLoad):
        return f"{_v(s)} = local_load {s.dtype} {_v(s.slot)}"
    if isinstance(s, N.LocalStore):
        return f"local_store {_v(s.slot)} {_v(s.value)}"
    if isinstance(s, N.SlotSelect):
        return f"{_v(s)} = slot_select {s.dtype} ({' '.join(_v(t) for t in s.slots)})[{_v(s.index)}]"
    if isinstance(s, N.SlotStore):
        return f"slot_store ({' '.join(_v(t) for t in s.slots)})[{_v(s.index)}] {_v(s.value)}"
    if isinstance(s, N.GlobalLoad):
        return f"{_v(s)} = load {s.dtype} {_access(s)}" + (f" if {_v(s.guard)}" if s.guard is not None else "")
    if isinstance(s, N.GlobalStore):
        return f"store {_access(s)} {_v(s.value)}"
    if isinstance(s, N.AtomicRMW):
        return f"{_v(s)} = {s.op.value} {s.dtype} {_access(s)} {_v(s.value)}"
    if isinstance(s, N.Print):
        return f"print {s.pieces!r} {' '.join(_v(v) for v in s.values)}".rstrip()
    if isinstance(s, N.RangeFor):
        return f"{_v(s)} = for range({_v(s.begin)}, {_v(s.end)}, {s.step}){_exit(s)}:"
    if isinstance(s, N.While):
        return f"{_v(s)} = while{_exit(s)}:"
    if isinstance(s, N.If):
        return f"if {_v(s.cond)}:"
    if isinstance(s, N.Break):
        return "break"
    if isinstance(s, N.Continue):
        return "continue"
    if isinstance(s, N.AdStackAlloca):
        cap = s.capacity if s.capacity_spec_id is None else f"{s.capacity} spec_id={s.capacity_spec_id}"
        return f"{_v(s)} = adstack {s.dtype} capacity={cap}{_name(s)}"
    if isinstance(s, N.AdStackPush):
        return f"adstack_push {_v(s.stack)} {_v(s.value)}"
    if isinstance(s, N.AdStackPop):
        return f"adstack_pop {_v(s.stack)}"
    if isinstance(s, N.AdStackLoadTop):
        return f"{_v(s)} = adstack_load_top {s.dtype} {_v(s.stack)}"
    if isinstance(s, N.AdStackLoadTopAdj):
        return f"{_v(s)} = adstack_load_top_adj {s.dtype} {_v(s.stack)}"
    if isinstance(s, N.AdStackAccAdjoint):
        return f"adstack_acc_adjoint {_v(s.stack)} {_v(s.value)}"
    if isinstance(s, N.Derivative):
        return f"{_v(s)} = derivative width={s.width}:"
    if isinstance(s, N.Seed):
        return f"{_v(s)} = seed {s.dtype} {_v(s.value)} tangents({', '.join(_v(t) for t in s.tangents)})"
    if isinstance(s, N.Tangent):
        return f"{_v(s)} = tangent {s.dtype} {_v(s.value)} direction={s.direction}"
    return f"<{type(s).__name__} {_v(s)}>"


def format_stmt(stmt, indent=0):
    """`stmt` (and the blocks it owns) as text, `indent` levels deep."""
    pad = INDENT * indent
    lines = [pad + _head(stmt)]
    if isinstance(stmt, N.If):
        lines += [format_block(stmt.then_body, indent + 1)]
        if stmt.else_body.stmts:
            lines += [pad + "else:", format_block(stmt.else_body, indent + 1)]
    else:
        lines += [format_block(b, indent + 1) for b in stmt.blocks()]
    return "\n".join(line for line in lines if line)


def format_block(block, indent=0):
    return "\n".join(format_stmt(s, indent) for s in block.stmts)


def format_task(task, indent=0):
    pad = INDENT * indent
    n = _v(task.num_threads) if task.num_threads is not None else "?"
    return "\n".join(line for line in (
        f"{pad}task {task.name} {task.kind} num_threads={n}",
        f"{pad}{INDENT}header:", format_block(task.header, indent + 2),
        f"{pad}{INDENT}body:", format_block(task.body, indent + 2)) if line)


def format_kernel(kernel):
    """The whole kernel as text: its signature, then each task's header and body."""
    arrays = ", ".join(f"{a.name}({a.dtype},{a.ndim}d)" + ("+grad" if a.needs_grad else "")
                       + ("+dual" if a.needs_dual else "") for a in kernel.arrays)
    scalars = ", ".join(f"{p.name}({p.dtype})" for p in kernel.scalars)
    head = f"kernel {kernel.name} arrays[{arrays}] scalars[{scalars}]"
    return "\n".join([head] + [format_task(t, 1) for t in kernel.tasks])

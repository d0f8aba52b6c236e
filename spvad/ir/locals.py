"""Local slots: store-to-load forwarding, dead stores, slots that hold one constant.

A load of a slot takes the value last stored into it (or loaded from it) when that dominates the load and
nothing can have stored into the slot in between: earlier in the same block, or in an enclosing block when
the constructs in between (and, inside a loop, the loop's own body) do not store into it. A store is dead
when no load can read it before the slot is stored again (backward liveness, loops to a fixed point).
Slots are Function memory the driver may or may not promote to registers; reverse mode's adjoint slots
(load, add, store, reset) become plain values this way.

A loop's exit flag is read at the top of every iteration: stores into it are never dead.
"""
from . import nodes as N
from .interp import to_scalar
from .slot_arrays import grouped_slots


def forward_locals(kernel):
    """Forward stored values to loads and drop dead stores in every task, in place; returns the kernel."""
    for task in kernel.tasks:
        grouped = grouped_slots(task.body)   # addressed at run time too: left as they are
        _forward(task.body, {}, {}, grouped)
        flags = {s.exit_flag for s in N.walk(task.body) if isinstance(s, (N.RangeFor, N.While))}
        _drop_dead_stores(task.body, set(), flags | grouped, True)
        constant = {slot: v for slot, v in _constant_slots(task.body).items() if slot not in grouped}
        if constant:
            _load_constant_slots(task.body, constant, {})
    return kernel


def _constant_slots(body):
    """Slots that hold one constant all the time: every store into them stores it, and it is +0 (what the
    Alloca holds) or the task stores it first, at its top level, before anything reads the slot. Reverse
    mode's sums often end so (starting at -0.0), once the stores of their sums are forwarded and dead."""
    allocas, stores = [], []
    for s in N.walk(body):
        if isinstance(s, N.Alloca):
            allocas.append(s)
        elif isinstance(s, N.LocalStore):
            stores.append(s)
    stored, varies = {s: {} for s in allocas}, set()   # slot -> {key: constant stored}; slots storing others
    for s in stores:
        if s.slot in stored:
            if isinstance(s.value, N.Const):
                stored[s.slot][_key(s.value.value, s.slot.dtype)] = s.value.value
            else:
                varies.add(s.slot)
    out, first = {}, None
    for slot, values in stored.items():
        if slot in varies:
            continue
        if set(values) <= {_key(0, slot.dtype)}:
            out[slot] = 0
        elif len(values) == 1:
            first = _stored_first(body) if first is None else first
            if first.get(slot):
                out[slot] = next(iter(values.values()))
    return out


def _key(value, dtype):
    return repr(to_scalar(value, dtype).item())


def _stored_first(body):
    """Slot -> whether the first top-level statement of the task touching it (after its Alloca) stores into
    it, for every slot touched (one walk for all the slots asked about)."""
    first = {}
    for s in body.stmts:
        inside = (t for b in s.blocks() for t in N.walk(b)) if s.BLOCK_FIELDS else ()
        for t in (s, *inside):
            if isinstance(t, (N.LocalLoad, N.LocalStore)) and t.slot not in first:
                first[t.slot] = isinstance(s, N.LocalStore) and s.slot is t.slot
    return first


def _load_constant_slots(block, slots, repl):
    """Replace each load of a slot in `slots` (slot -> value) by a Const of that value, in place."""
    for k, s in enumerate(block.stmts):
        s.replace_operands(repl)
        if isinstance(s, N.LocalLoad) and s.slot in slots:
            const = block.stmts[k] = repl[s] = N.Const(to_scalar(slots[s.slot], s.dtype).item(), s.dtype)
            const.loc = s.loc
        for b in s.blocks():
            _load_constant_slots(b, slots, repl)


def _forward(block, known, repl, grouped):
    """Rewrite `block`: `known` maps a slot to the value it holds here, `repl` a removed load to its value;
    slots in `grouped` are never known."""
    out = []
    for s in block.stmts:
        s.replace_operands(repl)
        if isinstance(s, N.LocalLoad) and s.slot in known:
            repl[s] = known[s.slot]
            continue
        if isinstance(s, N.LocalLoad) and s.slot not in grouped:
            known[s.slot] = s   # a second load before the next store reads the same
        elif isinstance(s, N.LocalStore) and s.slot not in grouped:
            known[s.slot] = s.value
        elif isinstance(s, N.Alloca):
            known.pop(s, None)   # zeroes the slot where it runs
        elif s.blocks():
            stored = _stored_in(s)
            inner = {k: v for k, v in known.items() if k not in stored} if isinstance(
                s, (N.RangeFor, N.While)) else known   # a loop body also runs after its own stores
            for b in s.blocks():
                _forward(b, dict(inner), repl, grouped)
            for slot in stored:
                known.pop(slot, None)
        out.append(s)
    block.stmts[:] = out


def _stored_in(construct):
    inside = [t for b in construct.blocks() for t in N.walk(b)]
    return {t.slot for t in inside if isinstance(t, N.LocalStore)} | {t for t in inside if isinstance(t, N.Alloca)}


def _drop_dead_stores(block, live, flags, mutate):
    """Backward liveness of slots over `block`: drop (when `mutate`) each store whose value no load can read
    before the slot is stored again; returns the slots live before `block`. `live`: those live after it."""
    live = set(live)
    keep = []
    for s in reversed(block.stmts):
        if isinstance(s, N.LocalStore):
            if s.slot not in live and s.slot not in flags:
                continue
            live.discard(s.slot)
        elif isinstance(s, N.LocalLoad):
            live.add(s.slot)
        elif isinstance(s, N.Alloca):
            live.discard(s)
        elif isinstance(s, N.If):
            live = (_drop_dead_stores(s.then_body, live, flags, mutate)
                    | _drop_dead_stores(s.else_body, live, flags, mutate))
        elif isinstance(s, (N.RangeFor, N.While)):
            live = _loop_liveness(s, live, flags, mutate)
        keep.append(s)
    if mutate:
        block.stmts[:] = keep[::-1]
    return live


def _loop_liveness(loop, live_after, flags, mutate):
    """A body's stores may be read by its next iteration: live at its end is what is live after the loop
    and at the body's top, to a fixed point. Before the loop: the same (it may run no iteration)."""
    live = set(live_after) | ({loop.exit_flag} if loop.exit_flag is not None else set())
    while True:
        top = _drop_dead_stores(loop.body, live, flags, False)
        grown = live | top
        if grown == live:
            break
        live = grown
    if mutate:
        _drop_dead_stores(loop.body, live, flags, True)
    return live

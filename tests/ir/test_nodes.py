"""IR node kinds declare what they carry: every attribute the passes leave on a node is a dataclass field (or
`id` / `loc`), a loop holds its exit flag, the traits table is consistent and is what the verifier, the
interpreter and simplify ask, and `clone_stmt` copies statements so that a cloned kernel computes the same."""
import dataclasses

import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir import simplify
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import InterpError, eval_num_threads, run_kernel
from spvad.ir.ops import Op
from spvad.ir.verify import IRVerifyError, verify
from spvad.pipeline import Mode, run_passes

F32 = ArraySpec(sp.f32, 1)
F32D = ArraySpec(sp.f32, 1, needs_grad=True, needs_dual=True)
LOOPS = (N.RangeFor, N.While)


# ---- kernels (plain functions: the frontend needs no decorator) ---------------------------------------------
@sp.func
def leaky(v):
    if v < 0.0:
        return 0.1 * v
    else:
        return v


def exits(x: sp.Array, lim: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = x[i]
        for j in range(n):
            if s > 4.0:
                break
            if x[(i + j) % x.shape[0]] < 0.0:
                continue
            s = s * 1.5 + leaky(x[(i + 2 * j) % x.shape[0]])
        k = 0
        while s < lim[i] and k < 20:   # a data-dependent trip count: the gradient measures it (depth probe)
            s = s * 2.0 + 0.1
            k += 1
        out[i] = s


def extremum(x: sp.Array, m: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(m[None], x[i] * x[i])


def vectors(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        v = sp.vec2(x[i], 2.0 * x[i])
        for _ in range(3):
            v = v * 0.5 + sp.vec2(1.0, x[i])
        out[i] = v.x + v.y


CASES = {
    "exits": (exits, [F32D, F32, F32D, sp.i32]),
    "extremum": (extremum, [F32D, ArraySpec(sp.f32, 0, needs_grad=True, needs_dual=True)]),
    "vectors": (vectors, [F32D, F32D]),
}
MODES = ("primal", "reverse", "dual", "checked")


def compiled(case, mode):
    """The IR of `case` after the passes of `mode` (pipeline.run_passes, verifying after each)."""
    fn, specs = CASES[case]
    kernel, _, _ = build_kernel(fn, list(specs))
    return run_passes(kernel, Mode(mode), verify_each=True)[0]


def kernels_in(kernel):
    """`kernel` and the kernels its tasks carry (a gradient task's depth probe)."""
    yield kernel
    for task in kernel.tasks:
        for f in dataclasses.fields(task):
            value = getattr(task, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, N.Kernel):
                    yield from kernels_in(v)


def statements(kernel):
    return [s for t in kernel.tasks for b in (t.header, t.body) for s in N.walk(b)]


def undeclared(obj):
    declared = {f.name for f in dataclasses.fields(obj)} | ({"id", "loc"} if isinstance(obj, N.Stmt) else set())
    return set(vars(obj)) - declared


# ---- declared fields --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES)
def test_passes_leave_only_declared_attributes(case, mode):
    kernels = list(kernels_in(compiled(case, mode)))
    if case == "exits" and mode == "reverse":
        assert any(k.name.endswith("_depth") for k in kernels), "no depth probe was walked"
    for k in kernels:
        verify(k)
        for obj in [k, *k.tasks, *statements(k)]:
            assert not undeclared(obj), f"{type(obj).__name__} in {k.name} carries {undeclared(obj)}"


@pytest.mark.parametrize("mode", MODES)
def test_loops_hold_their_exit_flag(mode):
    """After the passes no Break/Continue is left: a loop that had a break holds a u1 exit flag instead, an
    Alloca defined before the loop (the verifier checks that, as for any operand)."""
    kernels = list(kernels_in(compiled("exits", mode)))
    stmts = [s for k in kernels for s in statements(k)]
    assert not [s for s in stmts if isinstance(s, (N.Break, N.Continue))]
    flagged = [s for s in stmts if isinstance(s, LOOPS) and s.exit_flag is not None]
    assert {type(s) for s in flagged} == {N.RangeFor, N.While}
    for loop in flagged:
        assert loop.exit_flag in loop.operands() and loop.exit_flag.dtype == T.u1


def test_verify_rejects_an_exit_flag_that_is_not_a_bool_slot(kb):
    x = kb.array("x")
    i = kb.parallel(x)
    slot = kb.alloca(T.i32, "n")
    with kb.range_for(kb.const(0), kb.const(3)) as j:
        kb.store(x, i, kb.cast(j, T.f32))
    j.loop.exit_flag = slot
    with pytest.raises(IRVerifyError, match="exit flag must be a u1 Alloca"):
        verify(kb.kernel)


@pytest.mark.parametrize("kind", ["for", "while"])
def test_the_interpreter_leaves_a_loop_when_its_exit_flag_is_set(kb, kind):
    """The flag is tested as each iteration begins: the iteration that sets it still runs to its end."""
    out = kb.array("out", T.i32)
    kb.serial()
    count, after, done = kb.alloca(T.i32, "count"), kb.alloca(T.i32, "after"), kb.alloca(T.u1, "done")
    loop = kb.while_() if kind == "while" else kb.range_for(kb.const(0), kb.const(100))
    with loop:
        kb.lstore(count, kb.op(Op.ADD, kb.lload(count), kb.const(1)))
        with kb.if_(kb.op(Op.EQ, kb.lload(count), kb.const(3))):
            kb.lstore(done, kb.const(True))
        kb.lstore(after, kb.op(Op.ADD, kb.lload(after), kb.const(1)))
    kb.task.body.stmts[-1].exit_flag = done
    kb.store(out, kb.const(0), kb.lload(count))
    kb.store(out, kb.const(1), kb.lload(after))
    verify(kb.kernel)
    buffers = {(0, "primal"): np.zeros(2, np.int32)}
    run_kernel(kb.kernel, buffers, [])
    assert buffers[(0, "primal")].tolist() == [3, 3]


# ---- traits -----------------------------------------------------------------------------------------------
KINDS = [c for c in vars(N).values() if isinstance(c, type) and issubclass(c, N.Stmt) and c is not N.Stmt]
TRAITS = {
    "PURE": {N.Const, N.ScalarArg, N.ArrayShape, N.ThreadIndex, N.LoopIndex, N.Compute},
    "READS_MEMORY": {N.LocalLoad, N.SlotSelect, N.GlobalLoad, N.AtomicRMW, N.AdStackLoadTop,
                     N.AdStackLoadTopAdj, N.AdStackAccAdjoint},
    "HAS_SIDE_EFFECTS": {N.Alloca, N.LocalStore, N.SlotStore, N.GlobalStore, N.AtomicRMW, N.AdStackAlloca,
                         N.AdStackPush, N.AdStackPop, N.AdStackAccAdjoint, N.Print, N.Derivative},
    "WRITES_ARRAY": {N.GlobalStore, N.AtomicRMW},
    "ACCESSES_ARRAY": {N.GlobalLoad, N.GlobalStore, N.AtomicRMW},
    "HEADER_OK": {N.Const, N.ScalarArg, N.ArrayShape, N.Compute},
}


@pytest.mark.parametrize("trait", TRAITS)
def test_trait_table(trait):
    assert {k for k in KINDS if getattr(k, trait)} == TRAITS[trait]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_traits_agree_with_each_other(kind):
    if kind.PURE:
        assert not kind.READS_MEMORY and not kind.HAS_SIDE_EFFECTS
    if kind.WRITES_ARRAY:
        assert kind.HAS_SIDE_EFFECTS and kind.ACCESSES_ARRAY
    if kind.HEADER_OK:    # the host evaluates headers: values of the kernel's arguments alone
        assert kind.PURE and kind not in (N.ThreadIndex, N.LoopIndex)
    if kind.ACCESSES_ARRAY:
        assert {"array", "indices", "field"} <= {f.name for f in dataclasses.fields(kind)}


HEADER_ROWS = {   # one statement (with what it needs) before num_threads in a task header
    "const": lambda kb, x, p: kb.const(2),
    "arg": lambda kb, x, p: kb.arg(p),
    "shape": lambda kb, x, p: kb.shape(x),
    "compute": lambda kb, x, p: kb.op(Op.MUL, kb.arg(p), kb.shape(x)),
    "thread_index": lambda kb, x, p: kb.tid(),
    "alloca": lambda kb, x, p: kb.alloca(T.i32),
    "load": lambda kb, x, p: kb.load(x, kb.const(0)),
    "store": lambda kb, x, p: kb.store(x, kb.const(0), kb.const(1.0)),
}


@pytest.mark.parametrize("row", HEADER_ROWS)
def test_verifier_and_interpreter_allow_exactly_the_header_ok_kinds(row, kb):
    x, p = kb.array("x"), kb.scalar("n")
    task = kb.begin_task("serial")
    HEADER_ROWS[row](kb, x, p)
    kb.body(kb.const(1))
    kb.store(x, kb.const(0), kb.const(5.0))
    if all(type(s).HEADER_OK for s in task.header.stmts):
        verify(kb.kernel)
        assert eval_num_threads(task, [3], [(4,)]) == 1
        return
    with pytest.raises(IRVerifyError, match="not allowed in a task header"):
        verify(kb.kernel)
    with pytest.raises(InterpError, match="not allowed in a task header"):
        eval_num_threads(task, [3], [(4,)])


DCE_ROWS = {   # one unused statement of each kind simplify's dead-code elimination decides on
    "const": lambda kb, x, st: kb.const(7.0),
    "compute": lambda kb, x, st: kb.op(Op.SIN, kb.load(x, kb.tid())),
    "local_load": lambda kb, x, st: kb.lload(kb.alloca(T.f32)),
    "load": lambda kb, x, st: kb.load(x, kb.tid()),
    "adstack_top": lambda kb, x, st: kb.top(st),
    "atomic": lambda kb, x, st: kb.atomic("add", x, kb.tid(), kb.const(1.0)),
    "push": lambda kb, x, st: kb.push(st, kb.const(2.0)),
    "acc_adjoint": lambda kb, x, st: kb.acc_adj(st, kb.const(2.0)),
    "store": lambda kb, x, st: kb.store(x, kb.tid(), kb.const(3.0)),
}


@pytest.mark.parametrize("row", DCE_ROWS)
def test_dead_code_elimination_follows_the_traits(row, kb):
    """Unused pure values and side-effect-free reads go; whatever writes stays, except pushes onto a stack
    nothing reads (`st` here: dropped with its pushes once the row's statement is gone)."""
    x = kb.array("x")
    kb.parallel(x)
    st = kb.adstack(T.f32, 4, "st")
    kb.push(st, kb.const(1.0))
    s = DCE_ROWS[row](kb, x, st)
    kind = type(s)
    simplify.eliminate_dead_code(kb.task)
    kept = any(t is s for t in N.walk(kb.task.body))
    assert kept == (not kind.PURE and not (kind.READS_MEMORY and not kind.HAS_SIDE_EFFECTS)
                    and kind is not N.AdStackPush)


# ---- cloning ----------------------------------------------------------------------------------------------
def clone_block(block, m):
    out = N.Block()
    for s in block.stmts:
        new = N.clone_stmt(s, m)
        for name in s.BLOCK_FIELDS:
            setattr(new, name, clone_block(getattr(s, name), m))
        out.append(new)
    return out


def clone_kernel(kernel):
    tasks = []
    for t in kernel.tasks:
        hm = {}
        header = clone_block(t.header, hm)
        tasks.append(N.Task(t.name, t.kind, header, hm[t.num_threads], clone_block(t.body, {})))
    return N.Kernel(kernel.name + "_clone", kernel.arrays, kernel.scalars, tasks, kernel.filename)


@pytest.mark.parametrize("case", CASES)
def test_a_cloned_kernel_computes_the_same(case, rng):
    kernel = compiled(case, "primal")
    copy = verify(clone_kernel(kernel))   # operands, loops and exit flags all point into the copy
    old, new = statements(kernel), statements(copy)
    assert len(old) == len(new) and not {id(s) for s in old} & {id(s) for s in new}
    assert {s.id for s in old}.isdisjoint(s.id for s in new)
    for a, b in zip(old, new):
        assert type(a) is type(b) and b.loc == a.loc and not undeclared(b)
    arrays = [np.asarray(rng.uniform(0.1, 3.0, (13,) * a.ndim), np.float32) for a in kernel.arrays]
    scalars = [5] * len(kernel.scalars)
    results = []
    for k in (kernel, copy):
        buffers = {(j, "primal"): a.copy() for j, a in enumerate(arrays)}
        run_kernel(k, buffers, scalars)
        results.append(buffers)
    for key in results[0]:
        np.testing.assert_array_equal(results[1][key], results[0][key], err_msg=str(key))


def test_clone_stmt_swaps_mapped_operands_and_keeps_the_rest(kb):
    x = kb.array("x")
    i = kb.parallel(x)
    a, b = kb.load(x, i), kb.const(2.0)
    s = kb.op(Op.MUL, a, b)
    a2 = N.Const(3.0, T.f32)
    m = {a: a2}
    c = N.clone_stmt(s, m)
    assert m[s] is c and c is not s and c.id != s.id
    assert c.args == (a2, b) and s.args == (a, b) and (c.op, c.dtype) == (s.op, s.dtype)
    with kb.range_for(kb.const(0), kb.const(4)) as j:
        pass
    loop2 = N.clone_stmt(j.loop, {})
    assert N.clone_stmt(j, {j.loop: loop2}).loop is loop2 and N.clone_stmt(j, {}).loop is j.loop
    assert loop2.body is j.loop.body    # blocks are shared: the caller gives a construct its own

"""simplify: results identical before and after (interpreter on random data), and things really go away."""
import numpy as np

from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.interp import run_kernel
from spvad.ir.ops import Op
from spvad.ir.simplify import eliminate_dead_code, fold_static_ifs, simplify
from spvad.ir.verify import verify


def count(kernel, kind=N.Stmt):
    return sum(isinstance(s, kind) for t in kernel.tasks for b in (t.header, t.body) for s in N.walk(b))


def run_both(build, make_buffers, scalars=()):
    """Run the kernel from `build()` unsimplified and simplified on the same data; return both kernels."""
    before, after = build(), build()
    simplify(after)
    verify(after)
    b1, b2 = make_buffers(), make_buffers()
    run_kernel(before, b1, list(scalars))
    run_kernel(after, b2, list(scalars))
    for key in b1:
        np.testing.assert_array_equal(b1[key], b2[key], err_msg=str(key))
    return before, after


def test_folds_constants_cse_and_identities(make_kb):
    KernelBuilder = make_kb

    def build():
        kb = KernelBuilder()
        x, y, z = kb.array("x"), kb.array("y"), kb.array("z", T.i32)
        i = kb.parallel(x)
        two = kb.op(Op.ADD, kb.const(1.5), kb.const(0.5))            # folds to 2.0
        v = kb.load(x, i)
        a = kb.op(Op.MUL, kb.op(Op.SIN, v), two)
        b = kb.op(Op.MUL, kb.op(Op.SIN, v), kb.const(2.0))          # CSE with `a` once folded
        one = kb.op(Op.MUL, v, kb.const(1.0))                        # identity: v
        neg0 = kb.op(Op.ADD, one, kb.const(-0.0))                    # identity: v
        kb.store(y, i, kb.op(Op.ADD, kb.op(Op.ADD, a, b), neg0))
        j = kb.op(Op.SUB, kb.op(Op.ADD, i, kb.const(0)), kb.const(0))  # identities on ints: i
        k = kb.op(Op.MUL, kb.op(Op.FLOORDIV, kb.const(-7), kb.const(2)), kb.const(1))  # folds to -4
        kb.store(z, j, kb.op(Op.ADD, kb.load(z, j), k))
        kb.op(Op.COS, v)                                             # dead
        return kb.kernel

    def bufs():
        r = np.random.default_rng(7)
        return {(0, "primal"): r.standard_normal(11).astype(np.float32),
                (1, "primal"): r.standard_normal(11).astype(np.float32),
                (2, "primal"): r.integers(1, 9, 11).astype(np.int32)}

    before, after = run_both(build, bufs)
    assert count(after, N.Compute) < count(before, N.Compute)
    ops = [s.op for s in N.walk(after.tasks[0].body) if isinstance(s, N.Compute)]
    assert ops.count(Op.SIN) == 1 and Op.COS not in ops and Op.FLOORDIV not in ops and Op.SUB not in ops
    consts = {s.value for s in N.walk(after.tasks[0].body) if isinstance(s, N.Const)}
    assert 2.0 in consts and -4 in consts


def test_float_identities_stay_exact(kb):
    x = kb.array("x")
    i = kb.parallel(x)
    v = kb.load(x, i)
    kb.store(x, i, kb.op(Op.ADD, v, kb.const(0.0)))       # x + 0.0 is not x for x = -0.0: keep it
    simplify(kb.kernel)
    assert count(kb.kernel, N.Compute) == 1
    xs = np.array([-0.0, 1.5], np.float32)
    run_kernel(kb.kernel, {(0, "primal"): xs}, [])
    assert not np.signbit(xs[0])


def test_no_fold_of_integer_division_by_zero(kb):
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    kb.store(x, i, kb.op(Op.MOD, kb.const(3), kb.const(0)))
    simplify(kb.kernel)
    assert [s.op for s in N.walk(kb.kernel.tasks[0].body) if isinstance(s, N.Compute)] == [Op.MOD]


def test_cse_into_nested_blocks_but_not_out_of_them(kb):
    x = kb.array("x")
    i = kb.parallel(x)
    v = kb.load(x, i)
    s1 = kb.op(Op.SIN, v)
    cond = kb.op(Op.GT, v, kb.const(0.5))
    with kb.if_(cond) as branch:
        inner = kb.op(Op.SIN, v)                               # dominated by s1: replaced
        kb.store(x, i, kb.op(Op.EXP, inner))
        e_then = kb.op(Op.COS, v)
        kb.store(x, i, e_then)
    with kb.else_(branch):
        kb.store(x, i, kb.op(Op.COS, v))                       # a sibling block: not CSE'd with e_then
    kb.store(x, i, kb.op(Op.ADD, kb.load(x, i), s1))
    simplify(kb.kernel)
    verify(kb.kernel)
    ops = [s.op for s in N.walk(kb.kernel.tasks[0].body) if isinstance(s, N.Compute)]
    assert ops.count(Op.SIN) == 1 and ops.count(Op.COS) == 2


def test_global_loads_are_not_cse_d_but_dead_ones_go(kb, rng):
    x = kb.array("x")
    i = kb.parallel(x)
    a = kb.load(x, i)
    kb.load(x, i)                                              # dead
    kb.store(x, i, kb.op(Op.MUL, a, kb.const(3.0)))
    b = kb.load(x, i)                                          # must see the store: takes the stored value
    kb.store(x, i, kb.op(Op.ADD, b, a))
    simplify(kb.kernel)
    assert count(kb.kernel, N.GlobalLoad) == 1
    xs = rng.standard_normal(5).astype(np.float32)
    want = xs * np.float32(3) + xs
    run_kernel(kb.kernel, {(0, "primal"): xs}, [])
    np.testing.assert_array_equal(xs, want)


def test_static_ifs_unused_allocas_and_loops(make_kb):
    KernelBuilder = make_kb

    def build():
        kb = KernelBuilder()
        x, y = kb.array("x"), kb.array("y")
        m = kb.scalar("m")
        i = kb.parallel(x)
        unused = kb.alloca(T.f32, "unused")
        kb.lstore(unused, kb.load(x, i))
        acc = kb.alloca(T.f32, "acc")
        with kb.range_for(kb.const(0), kb.arg(m)):
            with kb.if_(kb.op(Op.LT, kb.const(1), kb.const(2))) as s:     # static: then
                kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.load(x, i)))
            with kb.else_(s):
                kb.lstore(acc, kb.const(-1.0))
            with kb.if_(kb.const(False)):
                kb.lstore(unused, kb.const(3.0))
        with kb.range_for(kb.const(0), kb.const(4)):                     # empty after DCE
            kb.op(Op.EXP, kb.load(x, i))
        kb.store(y, i, kb.lload(acc))
        return kb.kernel

    def bufs():
        r = np.random.default_rng(3)
        return {(0, "primal"): r.standard_normal(6).astype(np.float32),
                (1, "primal"): r.standard_normal(6).astype(np.float32)}

    before, after = run_both(build, bufs, [5])
    assert count(after, N.If) == 0 and count(before, N.If) == 2
    assert count(after, N.RangeFor) == 1
    assert [s.name for s in N.walk(after.tasks[0].body) if isinstance(s, N.Alloca)] == ["acc"]
    assert count(after) < count(before) - 8


def test_fold_static_ifs_alone_and_code_after_break(kb):
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    with kb.while_():
        with kb.if_(kb.const(True)):
            kb.brk()
        kb.store(x, i, kb.const(5))                 # unreachable once the if is folded
    fold_static_ifs(kb.kernel)
    verify(kb.kernel)
    loop = kb.kernel.tasks[0].body.stmts[-1]
    assert [type(s) for s in loop.body.stmts] == [N.Const, N.Break]   # no DCE in fold_static_ifs
    xs = np.full(3, 2, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): xs}, [])
    assert xs.tolist() == [2, 2, 2]


def test_dce_drops_what_only_an_emptied_if_or_loop_read(kb):
    """An If or RangeFor whose blocks hold only dead code goes, and then so do its condition and bounds
    (another round: they were live while it stood)."""
    x = kb.array("x")
    i = kb.parallel(x)
    v = kb.load(x, i)
    with kb.if_(kb.op(Op.GT, v, kb.const(0.5))):
        kb.op(Op.SIN, v)                                          # dead
    with kb.range_for(kb.const(0), kb.op(Op.ADD, i, kb.const(3))) as k:
        kb.op(Op.ADD, k, k)                                       # dead
    kb.store(x, i, kb.const(1.0))
    assert eliminate_dead_code(kb.kernel.tasks[0])
    kinds = [type(s) for s in N.walk(kb.kernel.tasks[0].body)]
    assert N.If not in kinds and N.RangeFor not in kinds and N.GlobalLoad not in kinds and N.Compute not in kinds
    assert not eliminate_dead_code(kb.kernel.tasks[0])           # nothing left to remove


def test_dce_keeps_side_effects_and_header_roots(kb):
    x = kb.array("x", T.i32)
    n = kb.scalar("n")
    kb.begin_task()
    kb.const(9)                                      # dead header constant
    kb.body(kb.arg(n))
    i = kb.tid()
    kb.atomic(Op.ATOMIC_ADD, x, kb.const(0), i)              # result unused, still kept
    kb.op(Op.ADD, i, i)                              # dead
    assert eliminate_dead_code(kb.kernel.tasks[0])
    assert [type(s) for s in kb.kernel.tasks[0].header.stmts] == [N.ScalarArg]
    assert [type(s) for s in kb.kernel.tasks[0].body.stmts] == [N.ThreadIndex, N.Const, N.AtomicRMW]
    xs = np.full(1, 1, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): xs}, [4])
    assert xs.tolist() == [7]


def test_simplify_random_arithmetic_matches_interpreter(make_kb, rng):
    """Random expression DAGs over i32 and f32 with some constant leaves: identical results after simplify."""
    KernelBuilder = make_kb
    seeds = rng.integers(0, 2**31, 12)
    f_ops = [Op.ADD, Op.SUB, Op.MUL, Op.MIN, Op.MAX]
    i_ops = [Op.ADD, Op.SUB, Op.MUL, Op.BIT_XOR, Op.FLOORDIV, Op.MOD]
    for seed in seeds:
        def build(seed=seed):
            r = np.random.default_rng(seed)
            kb = KernelBuilder()
            x, xi, y, yi = kb.array("x"), kb.array("xi", T.i32), kb.array("y"), kb.array("yi", T.i32)
            i = kb.parallel(x)
            fv = [kb.load(x, i), kb.const(1.0), kb.const(-0.0), kb.const(float(r.integers(1, 5)))]
            iv = [kb.load(xi, i), i, kb.const(0), kb.const(1), kb.const(int(r.integers(1, 5)))]
            for _ in range(25):
                if r.random() < 0.5:
                    op = f_ops[r.integers(len(f_ops))]
                    fv.append(kb.op(op, fv[r.integers(len(fv))], fv[r.integers(len(fv))]))
                else:
                    op = i_ops[r.integers(len(i_ops))]
                    a, b = iv[r.integers(len(iv))], iv[r.integers(len(iv))]
                    if op in (Op.FLOORDIV, Op.MOD):
                        b = kb.op(Op.ADD, kb.op(Op.BIT_AND, b, kb.const(7)), kb.const(1))
                    iv.append(kb.op(op, a, b))
            kb.store(y, i, fv[-1])
            kb.store(yi, i, iv[-1])
            return kb.kernel

        def bufs():
            r = np.random.default_rng(seed + 1)
            return {(0, "primal"): r.standard_normal(8).astype(np.float32),
                    (1, "primal"): r.integers(-20, 20, 8).astype(np.int32),
                    (2, "primal"): np.full(8, 0.5, np.float32), (3, "primal"): np.full(8, 3, np.int32)}

        before, after = run_both(build, bufs)
        assert count(after) < count(before)


def test_store_to_load_forwarding_stops_at_writes_that_may_intervene(make_kb, rng):
    """x[i] = 2 x[i]; y[i] = x[i] (the stored value, forwarded); then in a loop: x[i] = x[i] + 1 (a later
    iteration's store precedes the load at the top of the body: it stays) and y[i] += x[i] (forwarded);
    after the loop x[i] and y[i] are loaded again. Same results before and after."""
    def build():
        kb = make_kb()
        x, y = kb.array("x"), kb.array("y")
        i = kb.parallel(x)
        kb.store(x, i, kb.op(Op.MUL, kb.load(x, i), kb.const(2.0)))
        kb.store(y, i, kb.load(x, i))
        with kb.range_for(kb.const(0), kb.const(3)):
            kb.store(x, i, kb.op(Op.ADD, kb.load(x, i), kb.const(1.0)))
            kb.atomic(Op.ATOMIC_ADD, y, (i,), kb.load(x, i))
        kb.store(y, i, kb.op(Op.ADD, kb.load(y, i), kb.load(x, i)))
        return kb.kernel

    xs = rng.standard_normal(5).astype(np.float32)
    before, after = run_both(build, lambda: {(0, "primal"): xs.copy(), (1, "primal"): np.zeros(5, np.float32)})
    assert count(before, N.GlobalLoad) == 6 and count(after, N.GlobalLoad) == 4


def test_a_folded_if_lets_the_next_round_forward_across_its_loop(make_kb, rng):
    """A loop whose only store sits in a static `if False`: the first round still sees the store when it
    reaches the loop (x[i] is not forwarded past it), folds the if, and so needs a second round, which
    forwards the load after the loop to the one before it."""
    def build():
        kb = make_kb()
        x, y = kb.array("x"), kb.array("y")
        m = kb.scalar("m")
        i = kb.parallel(x)
        before = kb.load(x, i)
        acc = kb.alloca(T.f32, "acc")
        with kb.range_for(kb.const(0), kb.arg(m)):
            with kb.if_(kb.op(Op.LT, kb.const(2), kb.const(1))):
                kb.store(x, i, kb.const(3.0))
            kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), before))
        kb.store(y, i, kb.op(Op.ADD, kb.lload(acc), kb.load(x, i)))
        return kb.kernel

    xs = rng.standard_normal(5).astype(np.float32)
    before, after = run_both(build, lambda: {(0, "primal"): xs.copy(), (1, "primal"): np.zeros(5, np.float32)}, [3])
    assert count(after, N.If) == 0
    assert count(before, N.GlobalLoad) == 2 and count(after, N.GlobalLoad) == 1


def test_a_vector_store_is_read_back_from_its_components(rng):
    """v[i] = ...; x[i] = x[i] + dt * v[i] (DiffTaichi's advance): the store of v[i]'s second component does
    not make the optimiser forget its first (another component of the same element), so neither is loaded
    back: v is loaded twice (its old components), not three or four times, and the values are numpy's."""
    import spvad as sp

    @sp.kernel
    def advance_vec(v: sp.Array, x: sp.Array, f: sp.Array):
        for i in range(v.shape[0]):
            v[i] = 0.9 * v[i] + 0.1 * f[i]
            x[i] = x[i] + 0.1 * v[i]

    vs, xs, fs = (rng.standard_normal((7, 2)).astype(np.float32) for _ in range(3))
    v, x, f = (sp.from_numpy(a, dtype=sp.vec2) for a in (vs, xs, fs))
    advance_vec(v, x, f)
    v_new = 0.9 * vs.astype(np.float64) + 0.1 * fs
    np.testing.assert_allclose(v.to_numpy(), v_new, rtol=1e-6)
    np.testing.assert_allclose(x.to_numpy(), xs + 0.1 * v_new, rtol=1e-6)
    ir = advance_vec._compiled(advance_vec._bind((v, x, f))[0], "primal").ir
    loads = [s for t in ir.tasks for s in N.walk(t.body) if isinstance(s, N.GlobalLoad) and s.array.name == "v"]
    assert len(loads) == 2

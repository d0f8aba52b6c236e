"""The IR interpreter: op semantics (table rows), control flow, adstacks, atomics, flags and errors."""
import math

import numpy as np
import pytest

from spvad import types as T
from spvad.errors import SpvadError
from spvad.ir import nodes as N
from spvad.ir.interp import InterpError, OutOfBoundsError, eval_num_threads, eval_op, run_kernel
from spvad.ir.ops import Op


def f32(x):
    """`x` rounded to float32, as a Python float."""
    return float(np.float32(x))


I32_MAX, I32_MIN = 2**31 - 1, -2**31

# (op, result dtype, operands, expected)
ROWS = [
    (Op.ADD, T.i32, (I32_MAX, 1), I32_MIN),
    (Op.SUB, T.u32, (1, 2), 2**32 - 1),
    (Op.MUL, T.i32, (65536, 65536), 0),
    (Op.NEG, T.i32, (I32_MIN,), I32_MIN),
    (Op.ABS, T.i32, (-7,), 7),
    (Op.NEG, T.u32, (1,), 2**32 - 1),
    (Op.SHR, T.i32, (-8, 1), -4),
    (Op.SHR, T.u32, (0xFFFFFFF0, 4), 0x0FFFFFFF),
    (Op.SHL, T.i32, (1, 31), I32_MIN),
    (Op.BIT_NOT, T.i32, (5,), -6),
    (Op.BIT_AND, T.i32, (-4, 7), 4),
    (Op.BIT_XOR, T.u32, (0xF0F0, 0xFF00), 0x0FF0),
    (Op.SIGN, T.i32, (-3,), -1), (Op.SIGN, T.i32, (0,), 0), (Op.SIGN, T.f32, (2.5,), 1.0),
    (Op.SIGN, T.f32, (-0.5,), -1.0),
    (Op.ROUND, T.f32, (2.5,), 2.0), (Op.ROUND, T.f32, (-2.5,), -2.0), (Op.ROUND, T.f32, (1.4,), 1.0),
    (Op.ROUND, T.f32, (0.49999997,), 0.0), (Op.ROUND, T.f64, (-1.5,), -2.0), (Op.ROUND, T.f32, (3.5,), 4.0),
    (Op.POW, T.f32, (0.0, 0.0), 1.0), (Op.POW, T.f32, (-2.0, 3.0), -8.0), (Op.ATAN2, T.f32, (0.0, -0.0), f32(math.pi)),
    (Op.RSQRT, T.f32, (4.0,), 0.5),
    (Op.FLOOR, T.f32, (-1.5,), -2.0), (Op.CEIL, T.f32, (-1.5,), -1.0),
    (Op.MIN, T.i32, (-3, 2), -3), (Op.MAX, T.f32, (-3.0, 2.0), 2.0),
    (Op.CAST, T.i32, (-2.7,), -2), (Op.CAST, T.i32, (2.7,), 2), (Op.CAST, T.u32, (-1,), 2**32 - 1),
    (Op.CAST, T.f32, (True,), 1.0), (Op.CAST, T.u1, (3,), True), (Op.CAST, T.u1, (0.0,), False),
    (Op.CAST, T.i32, (False,), 0),
    (Op.SELECT, T.i32, (True, 4, 9), 4), (Op.SELECT, T.i32, (False, 4, 9), 9),
    (Op.AND, T.u1, (True, False), False), (Op.OR, T.u1, (True, False), True), (Op.NOT, T.u1, (True,), False),
    (Op.LT, T.u1, (-1, 1), True), (Op.GE, T.u1, (2.0, 2.0), True),
    # f64 transcendentals are computed in f64 (numpy's: constant folding, native_math; kernels expand them, ir/libm)
    (Op.ATAN2, T.f64, (1.0, -1.0), math.atan2(1.0, -1.0)),
    (Op.POW, T.f64, (2.0, 0.5), math.sqrt(2.0)), (Op.SIN, T.f64, (1.0,), float(np.sin(np.float64(1.0)))),
    (Op.SQRT, T.f64, (2.0,), math.sqrt(2.0)),   # Sqrt is 64-bit: exact
    (Op.FMOD, T.f64, (-7.5, 2.0), -1.5), (Op.FMOD, T.f64, (7.5, -2.0), 1.5),   # C fmod: the sign of a
    (Op.MOD, T.f64, (-7.5, 2.0), 0.5),                                           # Python %: the sign of b
    (Op.HYPOT, T.f64, (3.0, 4.0), 5.0), (Op.HYPOT, T.f32, (0.0, 0.0), 0.0),
    (Op.HYPOT, T.f32, (math.inf, 1.0), math.inf), (Op.HYPOT, T.f32, (-math.inf, math.inf), math.inf),
    (Op.EXP2, T.f32, (3.0,), 8.0), (Op.LOG10, T.f64, (1.0,), 0.0),
    (Op.EXPM1, T.f32, (0.0,), 0.0), (Op.EXPM1, T.f32, (-100.0,), -1.0), (Op.EXPM1, T.f32, (100.0,), math.inf),
    (Op.LOG1P, T.f32, (0.0,), 0.0), (Op.LOG1P, T.f32, (-1.0,), -math.inf),
    (Op.ATOMIC_ADD, T.i32, (I32_MAX, 1), I32_MIN), (Op.ATOMIC_MAX, T.u32, (3, 2**32 - 1), 2**32 - 1),
    (Op.ATOMIC_MIN, T.f32, (-3.0, 2.0), -3.0),
    (Op.POWI, T.i32, (-3, 3), -27), (Op.POWI, T.i32, (3, 21), 3**21 - 2 * 2**32),   # wraps like i32 `*`
    (Op.POWI, T.i32, (-1, -3), -1), (Op.POWI, T.i32, (-1, I32_MIN), 1), (Op.POWI, T.i32, (2, -1), 0),
    (Op.POWI, T.i32, (0, 0), 1),
]


def _operand_dtype(v, out):
    if isinstance(v, bool):
        return T.u1
    return out if not out.is_bool else (T.i32 if isinstance(v, int) else T.f32)


@pytest.mark.parametrize("op,dt,args,expected", ROWS, ids=[f"{r[0].value}-{r[1]}-{r[2]}" for r in ROWS])
def test_op_rows(op, dt, args, expected):
    if op is Op.CAST:
        src = T.u1 if isinstance(args[0], bool) else T.f32 if isinstance(args[0], float) else T.i32
        vals = [src.np.type(args[0]) if not src.is_bool else np.bool_(args[0])]
    elif op is Op.SELECT:
        vals = [np.bool_(args[0]), dt.np.type(args[1]), dt.np.type(args[2])]
    else:
        vals = [np.bool_(a) if isinstance(a, bool) else _operand_dtype(a, dt).np.type(a) for a in args]
    got = eval_op(op, dt, vals)
    assert got.dtype == (np.dtype(bool) if dt.is_bool else dt.np)
    assert got == expected


@pytest.mark.parametrize("dt", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("x,n", [(-2.0, 3), (-1.5, -7), (0.5, 9), (-1.0, I32_MIN), (-1.0, I32_MAX),
                                 (1.0, I32_MIN), (-0.5, 0), (3.0, -1), (-1.0, 2**32 - 1)])
def test_powi_of_a_float_follows_python(dt, x, n):
    """POWI on a float base is Python's `x ** n` (exact for x < 0), computed in the base's dtype."""
    exp_t = T.u32 if n >= 2**31 else T.i32
    got = eval_op(Op.POWI, dt, [dt.np.type(x), exp_t.np.type(n)])
    assert got.dtype == dt.np
    assert got == pytest.approx(x ** n, rel=1e-6 if dt == T.f32 else 1e-15)


@pytest.mark.parametrize("a", [-7, -6, -1, 1, 5, 7, I32_MIN])
@pytest.mark.parametrize("b", [-3, -2, 2, 3, 7])
def test_int_floordiv_mod_follow_python(a, b):
    q = eval_op(Op.FLOORDIV, T.i32, [np.int32(a), np.int32(b)])
    r = eval_op(Op.MOD, T.i32, [np.int32(a), np.int32(b)])
    assert (q, r) == (a // b, a % b)


@pytest.mark.parametrize("a,b", [(-7.5, 2.0), (7.5, -2.0), (-7.5, -2.0), (5.25, 0.5)])
def test_float_floordiv_mod_follow_python(a, b):
    assert eval_op(Op.FLOORDIV, T.f64, [np.float64(a), np.float64(b)]) == a // b
    assert eval_op(Op.MOD, T.f64, [np.float64(a), np.float64(b)]) == a % b


@pytest.mark.parametrize("x", [1e-7, -3e-5, 1e-3, -0.25, 0.5, -0.9, 0.999, 1.0, 2.0, -20.0, 40.0])
def test_expm1_log1p_are_accurate_for_small_x(x):
    """Kahan's forms keep f32's relative accuracy where exp(x) - 1 and log(1 + x) would cancel."""
    assert eval_op(Op.EXPM1, T.f32, [np.float32(x)]) == pytest.approx(math.expm1(f32(x)), rel=1e-6)
    if x > -1:
        assert eval_op(Op.LOG1P, T.f32, [np.float32(x)]) == pytest.approx(math.log1p(f32(x)), rel=1e-6)


@pytest.mark.parametrize("dt", [T.f32, T.f64], ids=str)
def test_hypot_does_not_overflow(dt):
    big = 1e30 if dt == T.f32 else 1e300
    got = eval_op(Op.HYPOT, dt, [dt.np.type(3 * big), dt.np.type(-4 * big)])
    assert got == pytest.approx(5 * big, rel=1e-6)


def test_float32_math_stays_float32():
    x = np.float32(0.7)
    for op in (Op.SIN, Op.EXP, Op.SQRT, Op.RSQRT, Op.ROUND, Op.NEG, Op.SIGN, Op.EXPM1, Op.LOG1P, Op.LOG10):
        assert eval_op(op, T.f32, [x]).dtype == np.float32, op
    for op in (Op.ADD, Op.MUL, Op.DIV, Op.POW, Op.MOD, Op.FLOORDIV, Op.HYPOT, Op.FMOD):
        assert eval_op(op, T.f32, [x, np.float32(1.3)]).dtype == np.float32, op


def test_parallel_sin_times_two(kb, rng):
    x, y = kb.array("x"), kb.array("y")
    i = kb.parallel(x)
    kb.store(y, i, kb.op(Op.MUL, kb.op(Op.SIN, kb.load(x, i)), kb.const(2.0)))
    xs = rng.standard_normal(37).astype(np.float32)
    ys = np.full(37, 7.0, np.float32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): ys}, [])
    assert ys.dtype == np.float32
    np.testing.assert_allclose(ys, np.sin(xs) * np.float32(2), rtol=1e-6)


def test_nested_dynamic_loops_with_break_and_continue(kb, rng):
    x, out = kb.array("x", T.i32), kb.array("out", T.i32)
    m = kb.scalar("m")
    i = kb.parallel(x)
    acc = kb.alloca(T.i32, "acc")
    with kb.range_for(i, kb.arg(m)) as j:
        with kb.if_(kb.op(Op.EQ, kb.op(Op.MOD, j, kb.const(3)), kb.const(1))):
            kb.cont()
        with kb.range_for(j, kb.const(-3), -2) as k:
            with kb.if_(kb.op(Op.EQ, k, kb.const(4))):
                kb.brk()
            kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.op(Op.MUL, k, kb.load(x, i))))
        with kb.if_(kb.op(Op.GT, kb.lload(acc), kb.const(50))):
            kb.brk()
    kb.store(out, i, kb.lload(acc))

    def ref(i, m, xi):
        acc = 0
        for j in range(i, m):
            if j % 3 == 1:
                continue
            for k in range(j, -3, -2):
                if k == 4:
                    break
                acc += k * xi
            if acc > 50:
                break
        return acc

    xs = rng.integers(1, 6, 12).astype(np.int32)
    outs = np.full(12, -99, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): outs}, [10])
    assert outs.tolist() == [ref(i, 10, int(xs[i])) for i in range(12)]


def test_while_loop_collatz(kb, rng):
    x, out = kb.array("x", T.i32), kb.array("out", T.i32)
    i = kb.parallel(x)
    v, steps = kb.alloca(T.i32, "v"), kb.alloca(T.i32, "steps")
    kb.lstore(v, kb.load(x, i))
    with kb.while_():
        with kb.if_(kb.op(Op.NOT, kb.op(Op.NE, kb.lload(v), kb.const(1)))):
            kb.brk()
        cur = kb.lload(v)
        even = kb.if_(kb.op(Op.EQ, kb.op(Op.MOD, cur, kb.const(2)), kb.const(0)))
        with even as s:
            kb.lstore(v, kb.op(Op.FLOORDIV, cur, kb.const(2)))
        with kb.else_(s):
            kb.lstore(v, kb.op(Op.ADD, kb.op(Op.MUL, cur, kb.const(3)), kb.const(1)))
        kb.lstore(steps, kb.op(Op.ADD, kb.lload(steps), kb.const(1)))
    kb.store(out, i, kb.lload(steps))

    def collatz(v):
        n = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            n += 1
        return n

    xs = rng.integers(1, 60, 16).astype(np.int32)
    outs = np.full(16, -1, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): outs}, [])
    assert outs.tolist() == [collatz(int(v)) for v in xs]


def test_alloca_is_zeroed_each_time_it_runs(kb):
    out = kb.array("out", T.i32)
    kb.serial()
    with kb.range_for(kb.const(0), kb.const(3)) as j:
        slot = kb.alloca(T.i32)
        kb.lstore(slot, kb.op(Op.ADD, kb.lload(slot), kb.const(1)))
        kb.store(out, j, kb.lload(slot))
    outs = np.full(3, 5, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): outs}, [])
    assert outs.tolist() == [1, 1, 1]


def test_adstack_push_pop_load_and_adjoints(kb, rng):
    x, out, out_adj = kb.array("x"), kb.array("out"), kb.array("out_adj")
    kb.serial()
    st = kb.adstack(T.f32, 8, "v")
    with kb.range_for(kb.const(0), kb.const(5)) as k:
        kb.push(st, kb.load(x, k))
        kb.acc_adj(st, kb.top(st))
        kb.acc_adj(st, kb.top(st))
    with kb.range_for(kb.const(0), kb.const(5)) as k:
        kb.store(out, k, kb.top(st))
        kb.store(out_adj, k, kb.top_adj(st))
        kb.pop(st)
    # a push after a pop starts with a zero adjoint
    kb.push(st, kb.load(x, kb.const(0)))
    kb.acc_adj(st, kb.const(1.5))
    kb.pop(st)
    kb.push(st, kb.load(x, kb.const(1)))
    kb.store(out_adj, kb.const(5), kb.top_adj(st))
    xs = rng.standard_normal(5).astype(np.float32)
    outs, adjs = np.full(5, 9.0, np.float32), np.full(6, 9.0, np.float32)
    flags = np.full(2, 0, np.uint32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): outs, (2, "primal"): adjs}, [], flags)
    np.testing.assert_array_equal(outs, xs[::-1])
    np.testing.assert_array_equal(adjs[:5], 2 * xs[::-1])
    assert adjs[5] == 0.0
    assert flags.tolist() == [0, 0]


def test_adstack_overflow_records_flag_and_needed_depth(kb, rng):
    x, out = kb.array("x"), kb.array("out")
    kb.serial()
    big, small = kb.adstack(T.f32, 10, "big"), kb.adstack(T.f32, 3, "small")
    with kb.range_for(kb.const(0), kb.const(5)) as k:
        v = kb.load(x, k)
        kb.push(big, v)
        kb.push(small, v)
    kb.store(out, kb.const(0), kb.top(small))   # pushes past the capacity wrote the last entry
    with kb.range_for(kb.const(0), kb.const(5)):
        kb.pop(big)
        kb.pop(small)
    kb.push(small, kb.load(x, kb.const(4)))      # balanced pops: the stack is usable again
    kb.store(out, kb.const(1), kb.top(small))
    xs = rng.standard_normal(5).astype(np.float32)
    outs = np.full(2, 9.0, np.float32)
    flags = np.full(3, 0, np.uint32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): outs}, [], flags)
    assert flags.tolist() == [0b10, 0, 5]
    assert outs.tolist() == [xs[4], xs[4]]


def test_adstack_overflow_depth_is_max_over_threads(kb):
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    st = kb.adstack(T.i32, 3)
    with kb.range_for(kb.const(0), kb.op(Op.ADD, i, kb.const(1))):
        kb.push(st, i)
    with kb.range_for(kb.const(0), kb.op(Op.ADD, i, kb.const(1))):
        kb.pop(st)
    flags = np.full(2, 0, np.uint32)
    run_kernel(kb.kernel, {(0, "primal"): np.full(6, 1, np.int32)}, [], [flags])
    assert flags.tolist() == [1, 6]


def test_adstack_underflow_raises(kb):
    kb.serial()
    st = kb.adstack(T.f32, 2)
    kb.pop(st)
    with pytest.raises(InterpError, match="underflow"):
        run_kernel(kb.kernel, {}, [])


def test_atomics_return_old_values(kb, rng):
    x, acc, old_add, old_max = (kb.array(n, T.i32) for n in ("x", "acc", "old_add", "old_max"))
    i = kb.parallel(x)
    v = kb.load(x, i)
    kb.store(old_add, i, kb.atomic(Op.ATOMIC_ADD, acc, kb.const(0), v))
    kb.store(old_max, i, kb.atomic(Op.ATOMIC_MAX, acc, kb.const(1), v))
    kb.atomic(Op.ATOMIC_MIN, acc, kb.const(2), v)
    xs = rng.integers(-50, 50, 20).astype(np.int32)
    accs = np.array([3, -100, 100], np.int32)
    oa, om = np.full(20, 7, np.int32), np.full(20, 7, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): xs, (1, "primal"): accs, (2, "primal"): oa, (3, "primal"): om}, [])
    assert oa.tolist() == (3 + np.concatenate([[0], np.cumsum(xs)[:-1]])).tolist()
    assert om.tolist() == np.maximum.accumulate(np.concatenate([[-100], xs[:-1]])).tolist()
    assert accs.tolist() == [3 + xs.sum(), max(-100, xs.max()), min(100, xs.min())]


def test_grad_field_and_bool_arrays(kb, rng):
    x, flag = kb.array("x", needs_grad=True), kb.array("flag", T.u1)
    i = kb.parallel(x)
    g = kb.load(x, i, field="grad")
    kb.store(x, i, kb.op(Op.ADD, kb.load(x, i), g), field="grad")
    kb.store(flag, i, kb.op(Op.GT, g, kb.const(0.0)))
    xs, gs = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    fl = np.full(9, True)
    g0 = gs.copy()
    run_kernel(kb.kernel, {(0, "primal"): xs, (0, "grad"): gs, (1, "primal"): fl}, [])
    np.testing.assert_array_equal(gs, xs + g0)
    assert fl.tolist() == (g0 > 0).tolist()


def test_out_of_bounds_raises(kb):
    x = kb.array("x")
    i = kb.parallel(x)
    kb.store(x, kb.op(Op.ADD, i, kb.const(1)), kb.const(1.0))
    with pytest.raises(OutOfBoundsError) as e:
        run_kernel(kb.kernel, {(0, "primal"): np.full(4, 2.0, np.float32)}, [])
    assert isinstance(e.value, SpvadError) and isinstance(e.value, IndexError)


def test_integer_division_by_zero_raises(kb):
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    kb.store(x, i, kb.op(Op.FLOORDIV, kb.load(x, i), kb.op(Op.SUB, i, i)))
    with pytest.raises(InterpError, match="floordiv"):
        run_kernel(kb.kernel, {(0, "primal"): np.full(3, 2, np.int32)}, [])


def test_eval_num_threads_from_header(kb):
    x, y = kb.array("x", ndim=2), kb.array("y")
    n = kb.scalar("n")
    task = kb.begin_task()
    cols = kb.shape(x, 1)
    kb.body(kb.op(Op.ADD, kb.op(Op.MUL, cols, kb.const(2)), kb.arg(n)))
    assert eval_num_threads(task, [5], [(3, 4), (7,)]) == 13


def test_tasks_run_in_order(kb):
    y = kb.array("y", T.i32)
    kb.serial()
    kb.store(y, kb.const(0), kb.const(4))
    i = kb.parallel(3)
    kb.atomic(Op.ATOMIC_ADD, y, kb.const(0), kb.op(Op.ADD, i, kb.const(1)))
    kb.serial()
    kb.store(y, kb.const(1), kb.op(Op.MUL, kb.load(y, kb.const(0)), kb.const(2)))
    ys = np.full(2, 3, np.int32)
    run_kernel(kb.kernel, {(0, "primal"): ys}, [])
    assert ys.tolist() == [10, 20]
    assert isinstance(kb.kernel.tasks[1].body.stmts[0], N.ThreadIndex)

"""eliminate_loop_exits on the IR interpreter: rewriting break/continue into exit flags keeps what every
kernel computes (for, reversed for, while, nested loops, exits deep in ifs, data-dependent exits), leaves no
Break and no Continue (a loop that had a break holds its exit flag), and is idempotent."""
import numpy as np
import pytest

import spvad as sp
from spvad.autodiff.loop_exits import eliminate_loop_exits
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.ir.printer import format_kernel
from spvad.ir.verify import verify

F32, I32 = ArraySpec(sp.f32, 1), ArraySpec(sp.i32, 1)
LOOPS = (N.RangeFor, N.While)


# ---- kernels (plain functions: the frontend needs no decorator) ---------------------------------------------
def break_on_threshold(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(n):
            s = s + x[(i + j) % x.shape[0]]
            if s > 0.6:
                break
            s = s * 1.25
        out[i] = s


def skip_negatives(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(n):
            v = x[(i + j) % x.shape[0]]
            if v < 0.0:
                continue
            s = s + v * v
        out[i] = s


def break_and_continue_in_branches(x: sp.Array, out: sp.Array, cnt: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 1.0
        c = 0
        for j in range(n):
            v = x[(3 * i + j) % x.shape[0]]
            if v < -0.7:
                break
            elif v < 0.0:
                s = s - v
                continue
            else:
                if v > 0.8:
                    if s > 2.0:
                        break
                    s = s + 1.0
                    continue
            s = s * (1.0 + v)
            c += 1
        out[i] = s
        cnt[i] = c


def nested_exits(x: sp.Array, out: sp.Array, cnt: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        c = 0
        for a in range(n):
            if x[(i + a) % x.shape[0]] < -0.8:
                continue                                  # the outer loop's continue, before the inner loop
            for b in range(n):
                v = x[(i + a * n + b) % x.shape[0]]
                if v < -0.3:
                    break                                 # leaves the inner loop only
                if v > 0.5:
                    continue
                s = s + v
                c += 1
            if s > 1.5:
                break                                     # the outer loop's break, after the inner loop
            s = s * 0.9
        out[i] = s
        cnt[i] = c


def while_with_exits(x: sp.Array, lim: sp.Array, out: sp.Array, cnt: sp.Array):
    for i in range(x.shape[0]):
        v = abs(x[i]) + 0.1
        k = 0
        while v < lim[i]:
            k += 1
            if k > 12:
                break
            if x[(i + k) % x.shape[0]] < 0.0:
                v = v * 1.5
                continue
            v = v * 2.0 + 0.25
        out[i] = v
        cnt[i] = k


def reversed_range_with_break(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(n, 0, -1):
            v = x[(i * j) % x.shape[0]]
            if v * s < -0.1:
                break
            s = s + v
        out[i] = s


def while_inside_for(x: sp.Array, out: sp.Array, cnt: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = 0.0
        c = 0
        for a in range(n):
            v = abs(x[(i + a) % x.shape[0]])
            while v < 3.0:
                v = v * 1.75
                c += 1
                if x[(i + c) % x.shape[0]] > 0.9:
                    break
            if v > 4.5:
                continue
            s = s + v
        out[i] = s
        cnt[i] = c


def no_exits(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = x[i]
        for j in range(n):
            s = s * 0.5 + x[(i + j) % x.shape[0]]
        out[i] = s


# (kernel, argument specs)
CASES = [
    (break_on_threshold, [F32, F32, sp.i32]),
    (skip_negatives, [F32, F32, sp.i32]),
    (break_and_continue_in_branches, [F32, F32, I32, sp.i32]),
    (nested_exits, [F32, F32, I32, sp.i32]),
    (while_with_exits, [F32, F32, F32, I32]),
    (reversed_range_with_break, [F32, F32, sp.i32]),
    (while_inside_for, [F32, F32, I32, sp.i32]),
    (no_exits, [F32, F32, sp.i32]),
]
IDS = [c[0].__name__ for c in CASES]


def build(fn, specs):
    kernel, _, _ = build_kernel(fn, list(specs))
    return verify(kernel)


def eliminate(kernel):
    for task in kernel.tasks:
        eliminate_loop_exits(task)
    return verify(kernel)


def random_inputs(rng, specs, size=23):
    """Random non-zero floats of both signs (while_with_exits' `lim`: positive, up to 8); -7 in int outputs;
    n in 0..6."""
    arrays, scalars = [], []
    for spec in specs:
        if isinstance(spec, ArraySpec) and spec.dtype == sp.f32:
            arrays.append((rng.uniform(0.05, 1.0, size) * np.where(rng.random(size) < 0.5, -1.0, 1.0))
                          .astype(np.float32))
        elif isinstance(spec, ArraySpec):
            arrays.append(np.full(size, -7, np.int32))
        else:
            scalars.append(int(rng.integers(0, 7)))
    if specs is CASES[IDS.index("while_with_exits")][1]:
        arrays[1] = np.abs(arrays[1]) * 8
    return arrays, scalars


def run(kernel, arrays, scalars):
    buffers = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    run_kernel(kernel, buffers, list(scalars))
    return [buffers[(k, "primal")] for k in range(len(arrays))]


def owned(loop):
    """Statements of `loop`'s body that belong to it: nested loops' bodies left out."""
    def visit(block):
        for s in block.stmts:
            yield s
            if not isinstance(s, LOOPS):
                for b in s.blocks():
                    yield from visit(b)
    return list(visit(loop.body))


def loops_of(kernel):
    return [s for t in kernel.tasks for s in N.walk(t.body) if isinstance(s, LOOPS)]


@pytest.mark.parametrize("fn,specs", CASES, ids=IDS)
def test_outputs_unchanged(fn, specs, rng):
    before, after = build(fn, specs), eliminate(build(fn, specs))
    for trial in range(6):
        arrays, scalars = random_inputs(rng, specs)
        expected, got = run(before, arrays, scalars), run(after, arrays, scalars)
        for k, (e, g) in enumerate(zip(expected, got)):
            np.testing.assert_array_equal(g, e, err_msg=f"array {k}, scalars {scalars}")


@pytest.mark.parametrize("rewritten", [False, True])
def test_break_and_continue_against_python(rewritten):
    """One kernel against the same loop in plain Python, on data taking every exit somewhere."""
    x = np.array([0.5, -0.9, 0.3, 0.95, -0.2, 0.7, -0.75, 0.1, 0.85, -0.4, 0.2], np.float32)
    k = build(break_and_continue_in_branches, [F32, F32, I32, sp.i32])
    if rewritten:
        k = eliminate(k)
    out, cnt = run(k, [x, np.zeros_like(x), np.zeros(x.size, np.int32)], [6])[1:]
    ref_s, ref_c = [], []
    for i in range(x.size):          # the kernel in plain Python (float32 steps)
        s, c = np.float32(1.0), 0
        for j in range(6):
            v = x[(3 * i + j) % x.size]
            if v < -0.7:
                break
            elif v < 0.0:
                s = np.float32(s - v)
                continue
            elif v > 0.8:
                if s > 2.0:
                    break
                s = np.float32(s + np.float32(1.0))
                continue
            s = np.float32(s * np.float32(np.float32(1.0) + v))
            c += 1
        ref_s.append(s)
        ref_c.append(c)
    np.testing.assert_array_equal(cnt, ref_c)
    np.testing.assert_allclose(out, ref_s, rtol=1e-6)
    assert min(ref_c) < max(ref_c)


@pytest.mark.parametrize("fn,specs", CASES, ids=IDS)
def test_no_break_or_continue_but_exit_flags(fn, specs):
    """A rewritten loop holds no Break and no Continue: a loop that had a break leaves through its exit flag
    (a u1 slot the loop tests as each iteration begins), a loop without one has none."""
    before = build(fn, specs)
    exits = [s for loop in loops_of(before) for s in owned(loop) if isinstance(s, (N.Break, N.Continue))]
    assert bool(exits) == (fn is not no_exits)
    had_break = {loop: any(isinstance(s, N.Break) for s in owned(loop)) for loop in loops_of(before)}
    kernel = eliminate(before)   # in place: the same loops
    for loop in loops_of(kernel):
        stmts = owned(loop)
        assert not [s for s in stmts if isinstance(s, (N.Break, N.Continue))]
        flag = loop.exit_flag
        assert (flag is not None) == had_break[loop]
        assert flag is None or (isinstance(flag, N.Alloca) and flag.dtype == sp.u1)


@pytest.mark.parametrize("fn,specs", CASES, ids=IDS)
def test_idempotent(fn, specs, rng):
    once = eliminate(build(fn, specs))
    text = format_kernel(once)
    twice = eliminate(once)
    assert format_kernel(twice) == text
    arrays, scalars = random_inputs(rng, specs)
    for e, g in zip(run(build(fn, specs), arrays, scalars), run(twice, arrays, scalars)):
        np.testing.assert_array_equal(g, e)


def test_hand_built_while_true_with_an_exit_in_the_middle(rng):
    """A While whose only exit is a Break in the middle of its body, after a store (the frontend's own whiles
    always start with their condition): the statements before the exit run once more than those after."""
    from irbuild import KernelBuilder
    from spvad import types as T
    from spvad.ir.ops import Op

    def make():
        kb = KernelBuilder()
        x, out, cnt = kb.array("x"), kb.array("out"), kb.array("cnt", T.i32)
        tid = kb.parallel(x)
        v, k = kb.alloca(T.f32, "v"), kb.alloca(T.i32, "k")
        kb.lstore(v, kb.op(Op.ABS, kb.load(x, tid)))
        with kb.while_():
            kb.lstore(k, kb.op(Op.ADD, kb.lload(k), kb.const(1)))
            with kb.if_(kb.op(Op.GT, kb.lload(v), kb.const(2.0))):
                kb.brk()
            kb.lstore(v, kb.op(Op.MUL, kb.lload(v), kb.const(1.5)))
        kb.store(out, tid, kb.lload(v))
        kb.store(cnt, tid, kb.lload(k))
        return verify(kb.kernel)

    x = (rng.uniform(0.05, 1.0, 17) * np.where(rng.random(17) < 0.5, -1.0, 1.0)).astype(np.float32)
    arrays = [x, np.zeros(17, np.float32), np.zeros(17, np.int32)]
    expected, got = run(make(), arrays, []), run(eliminate(make()), arrays, [])
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
    ref_k = []
    for xi in x:                     # the loop in plain Python
        v, k = np.float32(abs(xi)), 0
        while True:
            k += 1
            if v > 2.0:
                break
            v = np.float32(v * np.float32(1.5))
        ref_k.append(k)
    np.testing.assert_array_equal(got[2], ref_k)

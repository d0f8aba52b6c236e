"""Loop-invariant code motion (ir/licm.py): what moves out of a loop, what stays, and that moving never changes
a result, on the interpreter (each kernel run before and after the pass on random non-zero data)."""
import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.ir.licm import hoist_loop_invariants
from spvad.ir.verify import verify
from spvad.pipeline import PRIMAL, run_passes
from tests.common_kernels import integrate

F32 = ArraySpec(sp.f32, 1)
I32 = ArraySpec(sp.i32, 1)


def nested(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(n):
                v = v * 0.9 + w[i] * 0.5 + float(a)
        y[i] = v


def writes_same_dtype(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        for k in range(n):
            y[i] = y[i] + w[i]        # w may be y's ndarray: w[i] must be read every iteration


def stored_slot(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        s = x[i]
        t = 0.0
        for k in range(n):
            t = t + s
            s = s * 0.5
        y[i] = t


def int_division(x: sp.Array, c: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + float(c[i] // n)   # n == 0: the loop does not run, the division must not either
        y[i] = v


def out_of_bounds_unless_run(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + w[i + 100]        # valid only when the loop does not run
        y[i] = v


def compiled(fn, specs, optimise):
    kernel = build_kernel(fn, specs)[0]
    return run_passes(kernel, PRIMAL, verify_each=True, skip=() if optimise else ("licm",))[0]


def loops_of(kernel):
    return [s for t in kernel.tasks for s in N.walk(t.body) if isinstance(s, (N.RangeFor, N.While))]


def loads_in_loops(kernel):
    return [s for loop in loops_of(kernel) for s in N.walk(loop.body) if isinstance(s, N.GlobalLoad)]


def run(kernel, arrays, n):
    buffers = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    run_kernel(kernel, buffers, [n])
    return [buffers[(k, "primal")] for k in range(len(arrays))]


def data(rng, fn):
    x = (np.where(rng.random(8) < 0.5, -1, 1) * rng.uniform(0.2, 1.0, 8)).astype(np.float32)
    second = rng.integers(1, 9, 8).astype(np.int32) if fn is int_division else rng.uniform(0.2, 1.0, 8).astype(
        np.float32)
    return [x, second, rng.uniform(0.2, 1.0, 8).astype(np.float32)]


CASES = [integrate, nested, writes_same_dtype, stored_slot, int_division]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_moving_changes_no_result(fn, n, rng):
    specs = [F32, I32 if fn is int_division else F32, F32, sp.i32]
    args = data(rng, fn)
    want, got = run(compiled(fn, specs, False), args, n), run(compiled(fn, specs, True), args, n)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_an_invariant_load_leaves_the_loop_with_its_trip_condition():
    k = compiled(integrate, [F32, F32, F32, sp.i32], True)
    assert not loads_in_loops(k)
    (w,) = [s for t in k.tasks for s in N.walk(t.body) if isinstance(s, N.GlobalLoad) and s.array.name == "w"]
    assert isinstance(w.guard, N.Compute)   # the loop may run no iteration
    (loop,) = loops_of(k)
    assert not any(isinstance(s, N.Const) for s in loop.body.stmts)   # 0.01 left too


def test_a_value_climbs_out_of_every_loop_it_does_not_depend_on():
    k = compiled(nested, [F32, F32, F32, sp.i32], True)
    outer, inner = loops_of(k)
    assert not [s for s in N.walk(outer.body) if isinstance(s, N.GlobalLoad)]   # w[i] left both loops
    assert not any(isinstance(s, N.LoopIndex) and s.loop is outer for s in inner.body.stmts)   # float(a) left it


def test_what_must_stay_stays():
    assert loads_in_loops(compiled(writes_same_dtype, [F32, F32, F32, sp.i32], True))   # w may alias y
    k = compiled(stored_slot, [F32, F32, F32, sp.i32], True)
    (loop,) = loops_of(k)
    assert any(isinstance(s, N.LocalLoad) for s in loop.body.stmts)                  # s changes in the loop
    k = compiled(int_division, [F32, I32, F32, sp.i32], True)
    (loop,) = loops_of(k)
    assert any(isinstance(s, N.Compute) and s.op.value == "floordiv" for s in N.walk(loop.body))


def test_a_guarded_load_reads_nothing_when_the_loop_would_not_run(rng):
    """w[i + 100] is out of bounds: with n = 0 the loop never reads it, and neither does the moved load."""
    k = compiled(out_of_bounds_unless_run, [F32, F32, F32, sp.i32], True)
    assert not loads_in_loops(k)
    x = rng.uniform(0.2, 1.0, 8).astype(np.float32)
    out = run(k, [x, x.copy(), np.zeros(8, np.float32)], 0)
    np.testing.assert_array_equal(out[2], x)
    with pytest.raises(IndexError, match=r"w\[100\] is out of bounds"):
        run(k, [x, x.copy(), np.zeros(8, np.float32)], 1)


def test_the_pass_alone_keeps_the_ir_valid():
    for fn in CASES:
        specs = [F32, I32 if fn is int_division else F32, F32, sp.i32]
        kernel = run_passes(build_kernel(fn, specs)[0], PRIMAL, skip=("licm",))[0]
        verify(hoist_loop_invariants(kernel, guard_loads=True))

"""Local slots (ir/locals.py): store-to-load forwarding, dead stores (liveness through ifs and loops, exit
flags kept) and slots that only ever hold zero. Every kernel runs on the interpreter with and without the
pass, primal and gradient, on random non-zero data: the results must be identical."""
import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.pipeline import PRIMAL, REVERSE, run_passes
from tests.common_kernels import integrate

F32 = ArraySpec(sp.f32, 1, needs_grad=True)


def branches_and_breaks(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        t = w[i]
        k = 0
        while k < n:
            k += 1
            if v > 2.0:
                break
            if k % 2 == 0:
                t = t * 0.5
                continue
            v = v * 1.3 + t
        s = v
        s = s * w[i]               # the first store of s is read; this one overwrites it
        y[i] = s + t


def nested(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        acc = 0.0
        v = x[i]
        for a in range(n):
            u = v
            for b in range(a):
                u = u * w[i] + 0.1
            acc = acc + u
            v = v * 0.9
        y[i] = acc


CASES = [integrate, branches_and_breaks, nested]


def compiled(fn, mode, skip):
    return run_passes(build_kernel(fn, [F32, F32, F32, sp.i32])[0], mode, verify_each=True, skip=skip)[0]


def run(kernel, arrays, grads, n):
    buffers = {(k, "primal"): a.copy() for k, a in enumerate(arrays)}
    buffers.update({(k, "grad"): g.copy() for k, g in enumerate(grads)})
    run_kernel(kernel, buffers, [n])
    return buffers


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", [PRIMAL, REVERSE], ids=["primal", "reverse"])
@pytest.mark.parametrize("n", [0, 3, 7])
def test_forwarding_changes_no_result(fn, mode, n, rng):
    arrays = [rng.uniform(0.2, 1.5, 6).astype(np.float32) for _ in range(3)]
    grads = [np.zeros(6, np.float32), np.zeros(6, np.float32), rng.uniform(0.5, 1.5, 6).astype(np.float32)]
    want = run(compiled(fn, mode, ("locals",)), arrays, grads, n)
    got = run(compiled(fn, mode, ()), arrays, grads, n)
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=str(key))


def slot_ops(block):
    return [s for s in N.walk(block) if isinstance(s, (N.LocalLoad, N.LocalStore))]


def test_adjoint_slots_become_values():
    """In the integrator's reverse loop only the loop-carried slots are left: v's adjoint and w's sum."""
    before = compiled(integrate, REVERSE, ("locals",))
    after = compiled(integrate, REVERSE, ())
    loops = [s for t in after.tasks for s in N.walk(t.body) if isinstance(s, N.RangeFor)]
    reverse_loop = loops[-1]
    assert {s.slot.name for s in slot_ops(reverse_loop.body)} == {"adj_v", "acc_w"}
    assert len(slot_ops(after.tasks[0].body)) < len(slot_ops(before.tasks[0].body)) / 3


def test_exit_flag_stores_stay():
    k = compiled(branches_and_breaks, PRIMAL, ())
    (loop,) = [s for t in k.tasks for s in N.walk(t.body) if isinstance(s, N.While)]
    assert loop.exit_flag is not None
    assert any(isinstance(s, N.LocalStore) and s.slot is loop.exit_flag for s in N.walk(loop.body))


def test_sums_start_at_minus_zero_so_their_first_add_folds():
    """-0.0 + g is g bit for bit: the integrator's reverse loop adds no constant."""
    k = compiled(integrate, REVERSE, ())
    reverse_loop = [s for t in k.tasks for s in N.walk(t.body) if isinstance(s, N.RangeFor)][-1]
    adds = [s for s in N.walk(reverse_loop.body) if isinstance(s, N.Compute) and s.op.value == "add"]
    assert adds and not any(isinstance(a, N.Const) for s in adds for a in s.args)

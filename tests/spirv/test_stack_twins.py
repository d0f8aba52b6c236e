"""spirv/stack_twins.py: adstacks pushed and popped in lockstep share their leader's counter; anything that
could put the two counts apart (a move in another block, a read between the two moves, another capacity)
keeps them separate. The gradients through shared counters are checked end to end by the integrator tests
(tests/autodiff); here the analysis, and a twin's overflow still raising."""
import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.ir.ops import Op
from spvad.spirv.stack_twins import lockstep_twins
from tests.irbuild import KernelBuilder


def _loop_task(second_push_in_if=False, read_between=False, capacity_b=8):
    """for k in range(8): push a (v), [read a], push b (2 v); then for k: read both, pop a, pop b."""
    kb = KernelBuilder()
    kb.parallel(4)
    a, b = kb.adstack(T.f32, 8, "a"), kb.adstack(T.f32, capacity_b, "b")
    v = kb.const(1.5)
    with kb.range_for(kb.const(0), kb.const(8)):
        kb.push(a, v)
        if read_between:
            kb.top(b)
        if second_push_in_if:
            with kb.if_(kb.op(Op.LT, v, kb.const(2.0))):
                kb.push(b, kb.op(Op.MUL, v, kb.const(2.0)))
        else:
            kb.push(b, kb.op(Op.MUL, v, kb.const(2.0)))
    with kb.range_for(kb.const(0), kb.const(8)):
        kb.op(Op.ADD, kb.top(a), kb.top(b))
        kb.pop(a)
        kb.pop(b)
    return kb.kernel.tasks[0], [a, b]


def test_lockstep_stacks_share_a_counter():
    task, (a, b) = _loop_task()
    assert lockstep_twins(task, [a, b]) == {b: a}


@pytest.mark.parametrize("change", [dict(second_push_in_if=True), dict(read_between=True),
                                    dict(capacity_b=16)])
def test_stacks_that_may_drift_apart_keep_their_own(change):
    task, stacks = _loop_task(**change)
    assert lockstep_twins(task, stacks) == {}


@sp.kernel
def two_partials(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + 0.01 * sp.sin(v) * x[i]   # the reverse keeps 0.01 sin(v) and cos(v): two stacks
        y[i] = v


def test_an_overflowing_twin_still_raises(fresh):   # its sp.init(ad_stack_size=4) goes afterwards
    sp.init(ad_stack_size=4)
    x = sp.from_numpy(np.linspace(0.5, 1.5, 8).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (8,), needs_grad=True)
    two_partials(x, y, 3)
    y.grad.fill(1.0)
    two_partials.grad(x, y, 3)
    sp.sync()   # fits: no error
    with pytest.raises(sp.AdStackOverflowError):
        two_partials.grad(x, y, 40)
        sp.sync()

"""ir/rows.py: the first-axis rows a kernel's accesses touch, as expressions of its scalars."""
import pytest

from spvad import types as T
from spvad.ir import rows
from spvad.ir.ops import Op
from tests.irbuild import KernelBuilder


def _row_of(build):
    """Row expressions of a one-store kernel whose first index `build(kb, t)` makes (t: the scalar arg)."""
    kb = KernelBuilder()
    x = kb.array("x", ndim=2)
    t_param = kb.scalar("t")
    i = kb.parallel(4)
    t = kb.arg(t_param)
    kb.store(x, (build(kb, t), i), kb.const(1.0))
    return rows.accessed_rows(kb.kernel, writes=True)[(0, "primal")]


@pytest.mark.parametrize("build, want", [
    (lambda kb, t: t, ((0, 0),)),
    (lambda kb, t: kb.op(Op.ADD, t, kb.const(1)), ((0, 1),)),
    (lambda kb, t: kb.op(Op.ADD, kb.const(2), t), ((0, 2),)),
    (lambda kb, t: kb.op(Op.SUB, t, kb.const(3)), ((0, -3),)),
    (lambda kb, t: kb.op(Op.ADD, kb.op(Op.SUB, t, kb.const(3)), kb.const(1)), ((0, -2),)),
    (lambda kb, t: kb.const(5), ((None, 5),)),
    (lambda kb, t: kb.op(Op.SUB, kb.const(3), t), None),       # -t: not a shift of a scalar
    (lambda kb, t: kb.op(Op.MUL, t, kb.const(2)), None),
    (lambda kb, t: kb.op(Op.ADD, t, t), None),
    (lambda kb, t: kb.tid(), None),                             # a thread's own row: any row
])
def test_row_expressions(build, want):
    assert _row_of(build) == want


def test_reads_and_writes_are_separate_and_one_unknown_row_makes_all():
    kb = KernelBuilder()
    x = kb.array("x", ndim=2)
    t_param = kb.scalar("t")
    i = kb.parallel(4)
    t = kb.arg(t_param)
    v = kb.load(x, t, i)
    kb.store(x, (kb.op(Op.ADD, t, kb.const(1)), i), v)
    kb.store(x, (kb.load(kb.array("idx", dtype=T.i32), i), i), v)
    assert rows.accessed_rows(kb.kernel, writes=False) == {(0, "primal"): ((0, 0),), (1, "primal"): None}
    assert rows.accessed_rows(kb.kernel, writes=True) == {(0, "primal"): None}


@pytest.mark.parametrize("exprs, scalars, want", [
    (((0, 1),), [3], frozenset({4})),
    (((None, 0), (0, 1)), [3], frozenset({0, 4})),
    (((0, 1),), [9], None),     # row 10 of 10 rows: out of bounds, so any row
    (((0, -1),), [0], None),
    (None, [0], None),
])
def test_evaluate(exprs, scalars, want):
    assert rows.evaluate(exprs, scalars, 10) == want

"""ir/rows.py: the rows a kernel's accesses touch along each axis, as affine expressions of its scalars."""
import pytest

from spvad import types as T
from spvad.ir import rows
from spvad.ir.ops import Op
from tests.irbuild import KernelBuilder

T0, T1 = (((0, 1),), 0), (((1, 1),), 0)   # the rows `t` and `k` (scalars 0 and 1)


def _rows_of(build):
    """Row expressions of a one-store kernel whose first index `build(kb, t, k)` makes (t, k: scalar args)."""
    kb = KernelBuilder()
    x = kb.array("x", ndim=2)
    t_param, k_param = kb.scalar("t"), kb.scalar("k")
    i = kb.parallel(4)
    t, k = kb.arg(t_param), kb.arg(k_param)
    kb.store(x, (build(kb, t, k), i), kb.const(1.0))
    found = rows.accessed_rows(kb.kernel, writes=True)[(0, "primal")]
    return found and found.get(0)


@pytest.mark.parametrize("build, want", [
    (lambda kb, t, k: t, T0),
    (lambda kb, t, k: kb.op(Op.ADD, t, kb.const(1)), (((0, 1),), 1)),
    (lambda kb, t, k: kb.op(Op.ADD, kb.const(2), t), (((0, 1),), 2)),
    (lambda kb, t, k: kb.op(Op.SUB, t, kb.const(3)), (((0, 1),), -3)),
    (lambda kb, t, k: kb.op(Op.ADD, kb.op(Op.SUB, t, kb.const(3)), kb.const(1)), (((0, 1),), -2)),
    (lambda kb, t, k: kb.const(5), ((), 5)),
    (lambda kb, t, k: kb.op(Op.SUB, kb.const(3), t), (((0, -1),), 3)),
    (lambda kb, t, k: kb.op(Op.MUL, t, kb.const(2)), (((0, 2),), 0)),
    (lambda kb, t, k: kb.op(Op.ADD, t, t), (((0, 2),), 0)),
    (lambda kb, t, k: kb.op(Op.ADD, t, k), (((0, 1), (1, 1)), 0)),                    # v[t + k]
    (lambda kb, t, k: kb.op(Op.ADD, kb.op(Op.ADD, kb.op(Op.MUL, kb.const(6), t), k), kb.const(1)),
     (((0, 6), (1, 1)), 1)),                                                            # p[6 * t + k + 1]
    (lambda kb, t, k: kb.op(Op.SUB, t, t), ((), 0)),
    (lambda kb, t, k: kb.op(Op.MUL, t, k), None),                                       # not affine
    (lambda kb, t, k: kb.tid(), None),                                                  # a thread's own row: any row
])
def test_row_expressions(build, want):
    assert _rows_of(build) == (None if want is None else (want,))


def test_reads_and_writes_are_separate_and_one_unknown_row_makes_all():
    kb = KernelBuilder()
    x = kb.array("x", ndim=2)
    t_param = kb.scalar("t")
    i = kb.parallel(4)
    t = kb.arg(t_param)
    v = kb.load(x, t, i)
    kb.store(x, (kb.op(Op.ADD, t, kb.const(1)), i), v)
    kb.store(x, (kb.load(kb.array("idx", dtype=T.i32), i), i), v)
    assert rows.accessed_rows(kb.kernel, writes=False) == {(0, "primal"): {0: (T0,)}, (1, "primal"): None}
    assert rows.accessed_rows(kb.kernel, writes=True) == {(0, "primal"): None}


def test_every_axis_whose_indices_are_rows_counts():
    """`h[i, t]` names column t (axis 1); `w[0, i]`, `w[1, i]` rows 0 and 1 (axis 0); `g[t, 1]` and `g[t + 1, 0]`
    both axes; an axis where one access's index is no row expression is left out."""
    kb = KernelBuilder()
    h, w, g = kb.array("h", ndim=2), kb.array("w", ndim=2), kb.array("g", ndim=2)
    t_param = kb.scalar("t")
    i = kb.parallel(4)
    t = kb.arg(t_param)
    kb.store(h, (i, t), kb.op(Op.ADD, kb.load(w, kb.const(0), i), kb.load(w, kb.const(1), i)))
    kb.store(g, (t, kb.const(1)), kb.load(h, i, t))
    kb.store(g, (kb.op(Op.ADD, t, kb.const(1)), kb.const(0)), kb.load(h, kb.const(2), i))
    assert rows.accessed_rows(kb.kernel, writes=True) == {
        (0, "primal"): {1: (T0,)}, (2, "primal"): {0: (T0, (((0, 1),), 1)), 1: (((), 0), ((), 1))}}
    assert rows.accessed_rows(kb.kernel, writes=False) == {(0, "primal"): None,
                                                          (1, "primal"): {0: (((), 0), ((), 1))}}


@pytest.mark.parametrize("exprs, scalars, want", [
    (((((0, 1),), 1),), [3], {4}),
    ((((), 0), (((0, 1),), 1)), [3], {0, 4}),
    (((((0, 2), (1, 1)), 1),), [3, 2], {9}),
    (((((0, 1),), 1),), [9], None),     # row 10 of 10 rows: out of bounds, so any row
    (((((0, 1),), -1),), [0], None),
    (None, [0], None),
])
def test_evaluate(exprs, scalars, want):
    assert rows.evaluate(exprs, scalars, 10) == want

"""Every table keyed by `Op` covers exactly the ops it must: adding an op without a row in one of them fails
here (the gradient tables of tests/autodiff check that each differentiable op is tested)."""
import itertools

import pytest

from spvad import types as T
from spvad.autodiff.rules import AFTER_AUTODIFF, ATOMIC_RULES, NO_FLOAT_OPERAND, PARTIALS, ZERO_GRADIENT
from spvad.ir.interp import EVAL
from spvad.ir.ops import ARITY, ATOMICS, Op, result_dtype
from spvad.spirv.lower_ops import ATOMIC_LOWER, LOWER

COMPUTE_OPS = set(Op) - ATOMICS


def _names(ops):
    return sorted(op.value for op in ops)


def test_arity_and_eval_cover_every_op():
    assert set(ARITY) == set(Op), _names(set(Op) ^ set(ARITY))
    assert set(EVAL) == set(Op), _names(set(Op) ^ set(EVAL))


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.value)
def test_every_op_has_a_type_rule(op):
    """Some operand types are accepted (a missing rule raises for all of them)."""
    accepted = []
    for dts in itertools.product(T.ALL, repeat=ARITY[op]):
        try:
            accepted.append(result_dtype(op, list(dts), cast_to=T.f32))
        except TypeError:
            pass
    assert accepted, f"{op.value}: no operand types accepted"


def test_every_compute_op_is_differentiable_or_marked():
    """PARTIALS, ZERO_GRADIENT (zero almost everywhere), NO_FLOAT_OPERAND (ints and bools) and AFTER_AUTODIFF
    (the math library's float-bit ops) partition the Compute ops; atomics have their own rules."""
    parts = [set(PARTIALS), ZERO_GRADIENT, NO_FLOAT_OPERAND, AFTER_AUTODIFF]
    for a, b in itertools.combinations(parts, 2):
        assert not a & b, f"in two derivative tables: {_names(a & b)}"
    covered = set().union(*parts)
    assert covered == COMPUTE_OPS, f"missing {_names(COMPUTE_OPS - covered)}, extra {_names(covered - COMPUTE_OPS)}"
    assert set(ATOMIC_RULES) == ATOMICS


def test_every_op_has_a_lowering():
    assert set(LOWER) == COMPUTE_OPS, _names(set(LOWER) ^ COMPUTE_OPS)
    assert set(ATOMIC_LOWER) == ATOMICS, _names(set(ATOMIC_LOWER) ^ ATOMICS)


def test_no_float_operand_ops_take_no_float():
    """The NO_FLOAT_OPERAND mark agrees with the type rules."""
    for op in NO_FLOAT_OPERAND:
        for dts in itertools.product(T.ALL, repeat=ARITY[op]):
            if any(t.is_float for t in dts):
                with pytest.raises(TypeError):
                    result_dtype(op, list(dts))


def test_every_math_op_is_a_function_kernels_can_call():
    """`sp.<op value>` exists for every op the frontend maps by name, and is the builtin of that name."""
    import spvad as sp
    from spvad.frontend.calls import MATH1, MATH2
    for name in {**MATH1, **MATH2}:
        fn = getattr(sp, name, None)
        assert fn is not None and getattr(fn, "_spvad_builtin", None) == name, f"sp.{name} is missing"

"""The verifier: a valid kernel passes; each broken invariant is rejected with its own message."""
import pytest

from spvad import types as T
from spvad.errors import SpvadError
from spvad.ir import nodes as N
from spvad.ir.ops import Op
from spvad.ir.verify import IRVerifyError, verify


def valid(kb):
    """A kernel using most statement kinds; every row below breaks one thing in a variant of it."""
    x, y = kb.array("x", ndim=2, needs_grad=True), kb.array("y")
    m = kb.scalar("m")
    i = kb.parallel(y)
    acc = kb.alloca(T.f32, "acc")
    st = kb.adstack(T.f32, 4)
    with kb.range_for(kb.const(0), kb.arg(m)) as j:
        v = kb.load(x, i, j)
        kb.push(st, v)
        with kb.if_(kb.op(Op.GT, v, kb.const(0.0))):
            kb.cont()
        kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.op(Op.SIN, v)))
    with kb.while_():
        kb.brk()
    kb.acc_adj(st, kb.top(st))
    kb.pop(st)
    kb.atomic(Op.ATOMIC_ADD, x, (i, kb.const(0)), kb.lload(acc), field="grad")
    kb.store(y, i, kb.lload(acc))
    kb.serial()
    kb.store(y, kb.const(0), kb.cast(kb.const(3), T.f32))
    return kb.kernel


def test_valid_kernel_passes(kb):
    assert verify(valid(kb)) is kb.kernel


def body(kb, task=0):
    return kb.kernel.tasks[task].body


def _use_before_def(kb):
    i = kb.parallel(4)
    a = kb.op(Op.ADD, i, i)
    b = kb.op(Op.MUL, i, i)
    a.args = (b, i)


def _use_outside_defining_block(kb):
    y = kb.array("y", T.i32)
    i = kb.parallel(y)
    with kb.if_(kb.const(True)):
        inner = kb.op(Op.ADD, i, i)
    kb.store(y, i, inner)


def _header_value_in_body(kb):
    y = kb.array("y", T.i32)
    kb.begin_task()
    n = kb.shape(y)
    kb.body(n)
    kb.store(y, kb.tid(), n)


def _compute_wrong_dtype(kb):
    i = kb.parallel(4)
    kb.op(Op.ADD, i, i, dtype=T.f32)


def _compute_ill_typed(kb):
    i = kb.parallel(4)
    kb.add(N.Compute(Op.ADD, (i, kb.const(1.0)), T.f32))


def _local_load_not_alloca(kb):
    i = kb.parallel(4)
    kb.add(N.LocalLoad(i))


def _local_store_wrong_dtype(kb):
    i = kb.parallel(4)
    kb.lstore(kb.alloca(T.f32), i)


def _global_store_wrong_dtype(kb):
    y = kb.array("y")
    i = kb.parallel(y)
    kb.store(y, i, i)


def _index_not_i32(kb):
    y = kb.array("y")
    i = kb.parallel(y)
    kb.load(y, kb.cast(i, T.u32))


def _index_count(kb):
    y = kb.array("y", ndim=2)
    i = kb.parallel(4)
    kb.load(y, i)


def _loop_bound_not_i32(kb):
    kb.parallel(4)
    with kb.range_for(kb.const(0), kb.const(3, T.u32)):
        pass


def _loop_step_zero(kb):
    kb.parallel(4)
    with kb.range_for(kb.const(0), kb.const(3), 0):
        pass


def _if_cond_not_bool(kb):
    i = kb.parallel(4)
    with kb.if_(i):
        pass


def _break_outside_loop(kb):
    kb.parallel(4)
    with kb.if_(kb.const(True)):
        kb.brk()


def _continue_outside_loop(kb):
    kb.serial()
    kb.cont()


def _loop_index_outside_loop(kb):
    kb.parallel(4)
    with kb.range_for(kb.const(0), kb.const(3)) as j:
        pass
    kb.add(N.LoopIndex(j.loop))


def _thread_index_in_serial(kb):
    kb.serial()
    kb.tid()


def _thread_index_in_header(kb):
    kb.begin_task()
    kb.tid()
    kb.body(kb.const(1))


def _header_with_load(kb):   # a parallel task's header may read arrays' contents (ir/thread_count.py)
    y = kb.array("y", T.i32)
    kb.begin_task("serial")
    kb.body(kb.load(y, kb.const(0)))


def _header_with_grad_load(kb):
    y = kb.array("y", T.i32, needs_grad=True)
    kb.begin_task()
    kb.body(kb.load(y, kb.const(0), field="grad"))


def _num_threads_in_body(kb):
    kb.begin_task()
    kb.body(None)
    kb.task.num_threads = kb.const(4)


def _num_threads_not_i32(kb):
    kb.begin_task()
    kb.body(kb.const(4, T.u32))


def _stack_op_on_non_stack(kb):
    kb.serial()
    kb.pop(kb.alloca(T.f32))


def _stack_defined_in_sibling_block(kb):
    kb.serial()
    with kb.if_(kb.const(True)):
        st = kb.adstack(T.f32, 2)
    kb.pop(st)


def _push_wrong_dtype(kb):
    kb.serial()
    kb.push(kb.adstack(T.f32, 2), kb.const(1))


def _stmt_twice(kb):
    i = kb.parallel(4)
    body(kb).stmts.append(i)


def _stmt_twice_across_tasks(kb):
    kb.parallel(4)
    c = kb.const(2)
    kb.serial()
    kb.add(c)


def _array_not_in_kernel(kb):
    i = kb.parallel(4)
    kb.load(N.ArrayParam("ghost", T.f32, 1, 0), i)


def _bad_field(kb):
    y = kb.array("y")
    i = kb.parallel(y)
    kb.load(y, i, field="hessian")


def _bad_atomic_op(kb):
    y = kb.array("y")
    i = kb.parallel(y)
    kb.atomic(Op.MUL, y, i, kb.const(1.0))


def _atomic_op_in_a_compute(kb):
    y = kb.array("y")
    i = kb.parallel(y)
    kb.store(y, i, kb.op(Op.ATOMIC_ADD, kb.load(y, i), kb.const(1.0)))


def _scalar_not_in_kernel(kb):
    kb.parallel(4)
    kb.arg(N.ScalarParam("ghost", T.i32, 0))


def _const_does_not_fit(kb):
    kb.parallel(4)
    kb.const(2**31, T.i32)


def _bad_capacity(kb):
    kb.serial()
    kb.adstack(T.f32, 0)


def _args_as_list(kb):
    i = kb.parallel(4)
    kb.op(Op.ADD, i, i).args = [i, i]


def _operand_not_a_stmt(kb):
    i = kb.parallel(4)
    kb.op(Op.ADD, i, i).args = (i, 3)


ROWS = [
    (_args_as_list, "Compute.args must be a tuple"),
    (_operand_not_a_stmt, "before its definition"),
    (_use_before_def, "before its definition"),
    (_use_outside_defining_block, "before its definition"),
    (_header_value_in_body, "before its definition"),
    (_compute_wrong_dtype, "yields i32, but the statement says f32"),
    (_compute_ill_typed, "ill-typed add"),
    (_local_load_not_alloca, "slot is not an Alloca"),
    (_local_store_wrong_dtype, "stored value must be f32"),
    (_global_store_wrong_dtype, "stored value must be f32"),
    (_index_not_i32, "an index must be i32"),
    (_index_count, "1 indices for a 2-d array"),
    (_loop_bound_not_i32, "loop bound must be i32"),
    (_loop_step_zero, "nonzero int"),
    (_if_cond_not_bool, "if condition must be u1"),
    (_break_outside_loop, "break outside a loop"),
    (_continue_outside_loop, "outside a loop"),
    (_loop_index_outside_loop, "loop_index outside"),
    (_thread_index_in_serial, "ThreadIndex is only allowed"),
    (_thread_index_in_header, "ThreadIndex is not allowed in a task header"),
    (_header_with_load, "GlobalLoad is not allowed in a task header"),
    (_header_with_grad_load, "GlobalLoad is not allowed in a task header"),
    (_num_threads_in_body, "num_threads is not defined in the task header"),
    (_num_threads_not_i32, "num_threads must be i32"),
    (_stack_op_on_non_stack, "not an AdStackAlloca"),
    (_stack_defined_in_sibling_block, "before its definition"),
    (_push_wrong_dtype, "pushed value must be f32"),
    (_stmt_twice, "appears twice"),
    (_stmt_twice_across_tasks, "appears twice"),
    (_array_not_in_kernel, "is not kernel.arrays"),
    (_bad_field, "field must be one of"),
    (_bad_atomic_op, "atomic op must be one of"),
    (_atomic_op_in_a_compute, "is an AtomicRMW op, not a Compute op"),
    (_scalar_not_in_kernel, "not a parameter of the kernel"),
    (_const_does_not_fit, "does not fit dtype i32"),
    (_bad_capacity, "capacity must be a positive int"),
]


@pytest.mark.parametrize("breaker,message", ROWS, ids=[r[0].__name__.strip("_") for r in ROWS])
def test_rejects(kb, breaker, message):
    breaker(kb)
    with pytest.raises(IRVerifyError, match=message):
        verify(kb.kernel)


def test_error_names_kernel_task_and_statement(kb):
    _compute_wrong_dtype(kb)
    with pytest.raises(SpvadError) as e:
        verify(kb.kernel)
    text = str(e.value)
    bad = body(kb).stmts[-1]
    assert "kernel k, task t0 (body)" in text
    assert f"%{bad.id} = add f32 %{bad.args[0].id} %{bad.args[1].id}" in text


def test_loop_index_in_nested_block_of_its_loop_is_fine(kb):
    x = kb.array("x", T.i32)
    kb.parallel(4)
    with kb.range_for(kb.const(0), kb.const(3)) as j:
        with kb.while_():
            with kb.if_(kb.op(Op.GT, j, kb.const(1))):
                kb.store(x, kb.add(N.LoopIndex(j.loop)), j)
            kb.brk()
    verify(kb.kernel)

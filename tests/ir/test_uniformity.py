"""ir/uniformity.py on representative kernels: which values are the same for every thread computing them
together, and which atomics update one address for all of them (spirv/lower_reduce.py reduces those)."""
import spvad as sp
from tests.common_kernels import dense
from spvad import types as T
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir import nodes as N
from spvad.ir.ops import Op
from spvad.ir.uniformity import uniform_atomics, uniform_values
from spvad.pipeline import PRIMAL, REVERSE, run_passes


def test_constants_scalars_shapes_and_their_arithmetic_are_uniform(kb):
    x, out = kb.array("x"), kb.array("out")
    n = kb.scalar("n")
    tid = kb.parallel(x)
    c, s, sh = kb.const(3), kb.arg(n), kb.shape(out)
    k = kb.op(Op.MOD, kb.op(Op.ADD, c, s), sh)
    varying = kb.op(Op.ADD, tid, c)
    a = kb.atomic(Op.ATOMIC_ADD, out, k, kb.load(x, tid))
    b = kb.atomic(Op.ATOMIC_ADD, out, varying, kb.load(x, tid))
    u = uniform_values(kb.task)
    assert {c, s, sh, k} <= u and tid not in u and varying not in u
    assert uniform_atomics(kb.task) == {a} and b not in uniform_atomics(kb.task)


def test_an_atomic_whose_old_value_is_read_is_not_reducible(kb):
    x, cnt, out = kb.array("x"), kb.array("cnt", T.i32, 0), kb.array("out")
    tid = kb.parallel(x)
    slot = kb.atomic(Op.ATOMIC_ADD, cnt, (), kb.const(1))
    kb.store(out, slot, kb.load(x, tid))
    assert uniform_atomics(kb.task) == set()


def test_loads_from_unwritten_arrays_at_uniform_addresses_are_uniform(kb):
    x, idx, out = kb.array("x"), kb.array("idx", T.i32), kb.array("out")
    tid = kb.parallel(x)
    first = kb.load(idx, kb.const(0))
    per_thread = kb.load(idx, tid)
    a = kb.atomic(Op.ATOMIC_ADD, out, first, kb.load(x, tid))
    b = kb.atomic(Op.ATOMIC_ADD, out, per_thread, kb.load(x, tid))
    assert uniform_atomics(kb.task) == {a} and b not in uniform_atomics(kb.task)


def test_a_load_from_an_array_of_a_written_dtype_is_not_uniform(kb):
    # `idx` and `cnt` may be one ndarray bound twice: the load may see another thread's write
    x, idx, cnt, out = kb.array("x"), kb.array("idx", T.i32), kb.array("cnt", T.i32), kb.array("out")
    tid = kb.parallel(x)
    first = kb.load(idx, kb.const(0))
    kb.store(cnt, tid, kb.const(1))
    kb.atomic(Op.ATOMIC_ADD, out, first, kb.load(x, tid))
    assert first not in uniform_values(kb.task) and uniform_atomics(kb.task) == set()


def test_loop_indices_of_loops_entered_at_a_uniform_index_are_uniform_even_with_divergent_trips(kb):
    x, out = kb.array("x"), kb.array("out")
    tid = kb.parallel(x)
    with kb.range_for(kb.const(0), kb.op(Op.MOD, tid, kb.const(5))) as k:   # trip count varies by thread
        a = kb.atomic(Op.ATOMIC_ADD, out, k, kb.load(x, tid))
    with kb.range_for(tid, kb.const(8)) as j:                               # the start varies by thread
        b = kb.atomic(Op.ATOMIC_ADD, out, j, kb.load(x, tid))
    assert uniform_atomics(kb.task) == {a} and b not in uniform_atomics(kb.task)


def test_a_slot_is_uniform_only_when_every_store_is_uniform_and_in_uniform_control_flow(kb):
    x, out = kb.array("x"), kb.array("out")
    tid = kb.parallel(x)
    trips, varying, under_if = kb.alloca(T.i32), kb.alloca(T.i32), kb.alloca(T.i32)
    with kb.range_for(kb.const(0), kb.shape(out)):   # a uniform trip count: the counter stays uniform
        kb.lstore(trips, kb.op(Op.ADD, kb.lload(trips), kb.const(1)))
    kb.lstore(varying, tid)
    with kb.if_(kb.op(Op.GT, kb.load(x, tid), kb.const(0.0))):
        kb.lstore(under_if, kb.const(1))               # a uniform value, but only some threads store it
    a = kb.atomic(Op.ATOMIC_ADD, out, kb.lload(trips), kb.load(x, tid))
    b = kb.atomic(Op.ATOMIC_ADD, out, kb.lload(varying), kb.load(x, tid))
    c = kb.atomic(Op.ATOMIC_ADD, out, kb.lload(under_if), kb.load(x, tid))
    assert uniform_atomics(kb.task) == {a}
    assert b not in uniform_atomics(kb.task) and c not in uniform_atomics(kb.task)


def test_a_counter_in_a_loop_with_a_divergent_trip_count_is_not_uniform(kb):
    x, out = kb.array("x"), kb.array("out")
    tid = kb.parallel(x)
    trips = kb.alloca(T.i32)
    with kb.range_for(kb.const(0), tid):
        kb.lstore(trips, kb.op(Op.ADD, kb.lload(trips), kb.const(1)))
    kb.atomic(Op.ATOMIC_ADD, out, kb.lload(trips), kb.load(x, tid))
    assert uniform_atomics(kb.task) == set()


def test_a_break_makes_the_rest_of_the_loop_divergent_control_flow(kb):
    x, out = kb.array("x"), kb.array("out")
    tid = kb.parallel(x)
    slot = kb.alloca(T.i32)
    with kb.range_for(kb.const(0), kb.const(4)) as k:
        with kb.if_(kb.op(Op.GT, kb.load(x, tid), kb.const(0.0))):
            kb.brk()
        kb.lstore(slot, k)
        a = kb.atomic(Op.ATOMIC_ADD, out, k, kb.load(x, tid))   # the index is still the iteration's
    b = kb.atomic(Op.ATOMIC_ADD, out, kb.lload(slot), kb.load(x, tid))
    assert uniform_atomics(kb.task) == {a} and b not in uniform_atomics(kb.task)


def _specs(*ndims, dtype=T.f32):
    return [ArraySpec(dtype, d, needs_grad=dtype.is_float) for d in ndims]


def test_the_dense_layer_weight_gradient_is_a_uniform_atomic_and_the_input_gradient_is_not():
    """The reverse of a broadcast: W.grad[j, k] += ..., j and k loop indices (the reverse loops count their
    trips in local slots first); x.grad[b, k] is per thread."""
    ir = run_passes(build_kernel(dense, _specs(2, 2, 2))[0], REVERSE)[0]
    (task,) = ir.tasks
    atomics = [s for s in N.walk(task.body) if isinstance(s, N.AtomicRMW)]
    reducible = uniform_atomics(task)
    assert {(s.array.name, s.field) for s in reducible} == {("W", "grad")}
    assert all(s in reducible for s in atomics if s.array.name == "W")


@sp.kernel
def total_sq(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


def test_a_sum_into_a_scalar_is_a_uniform_atomic_from_the_frontend():
    ir = run_passes(build_kernel(total_sq.fn, _specs(1, 0))[0], PRIMAL)[0]
    (task,) = ir.tasks
    (atomic,) = [s for s in N.walk(task.body) if isinstance(s, N.AtomicRMW)]
    assert uniform_atomics(task) == {atomic}

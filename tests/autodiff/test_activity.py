"""Activity analysis on small kernels whose answer is plain: a value is active when it depends on a
differentiated input and flows into a differentiated output (through values, local slots and loops);
unused inputs, integer indices, comparisons and zero-gradient ops are not. Also which arrays a derivative
would silently stop at (varied_outputs) and which slots a replay must reproduce (needed_slots)."""
import pytest

import spvad as sp
from spvad.autodiff.activity import Activity, varied_outputs
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.verify import verify


def f32(grad=False, dual=False):
    return ArraySpec(sp.f32, 1, needs_grad=grad, needs_dual=dual)


def build(fn, *specs):
    kernel, _, _ = build_kernel(fn, list(specs))
    verify(kernel)
    (task,) = kernel.tasks
    return kernel, task


def loads(task, name):
    out = [s for s in N.walk(task.body) if isinstance(s, N.GlobalLoad) and s.array.name == name]
    assert out, f"no load of {name}"
    return out


def stored(task, name):
    out = [s.value for s in N.walk(task.body) if isinstance(s, (N.GlobalStore, N.AtomicRMW))
           and s.array.name == name]
    assert out, f"no store into {name}"
    return out


def slot(task, name):
    (a,) = [s for s in N.walk(task.body) if isinstance(s, N.Alloca) and s.name == name]
    return a


def computes(task, op_name):
    out = [s for s in N.walk(task.body) if isinstance(s, N.Compute) and s.op.name == op_name]
    assert out, f"no {op_name}"
    return out


def index_of(kernel, name):
    (a,) = [a for a in kernel.arrays if a.name == name]
    return a.index


# ---- an input that never reaches a differentiated output -----------------------------------------------------
def side_output(x: sp.Array, z: sp.Array, out: sp.Array, aux: sp.Array):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
        aux[i] = z[i] + 1.0


@pytest.mark.parametrize("aux_grad", [False, True])
def test_input_reaching_only_an_output_without_grad(aux_grad):
    kernel, task = build(side_output, f32(True), f32(True), f32(True), f32(aux_grad))
    act = Activity(task)
    assert all(s in act.active for s in loads(task, "x") + stored(task, "out"))
    # z's value depends on a needs-grad input either way, but reaches a gradient only when aux has one
    assert all(s in act.varied for s in loads(task, "z") + stored(task, "aux"))
    assert all((s in act.active) == aux_grad for s in loads(task, "z") + stored(task, "aux"))
    assert varied_outputs(task) == (set() if aux_grad else {index_of(kernel, "aux")})


def test_no_differentiated_input_no_activity():
    """out has a gradient but nothing it is computed from does: nothing is active, nothing to replay."""
    kernel, task = build(side_output, f32(), f32(), f32(True), f32())
    act = Activity(task)
    assert not act.active and not act.varied and not act.active_slots
    assert varied_outputs(task) == set()


def test_output_without_grad_is_not_reverse_work():
    """The same kernel with no differentiated output: values vary, none is active; aux and out are where
    the derivative would stop."""
    kernel, task = build(side_output, f32(True), f32(True), f32(), f32())
    act = Activity(task)
    assert loads(task, "x")[0] in act.varied and not act.active and not act.rev_work
    assert varied_outputs(task) == {index_of(kernel, "out"), index_of(kernel, "aux")}


# ---- integer indices, comparisons, zero-gradient ops -------------------------------------------------------
def gather(x: sp.Array, idx: sp.Array, out: sp.Array):
    for i in range(out.shape[0]):
        j = idx[i]
        out[i] = x[j] * 2.0


def test_integer_index_is_not_active():
    kernel, task = build(gather, f32(True), ArraySpec(sp.i32, 1), f32(True))
    act = Activity(task)
    assert all(s in act.active for s in loads(task, "x"))
    idx = loads(task, "idx")
    assert not any(s in act.active or s in act.varied for s in idx)
    assert slot(task, "j") not in act.active_slots
    assert slot(task, "j") in act.needed_slots      # the replay needs the index to re-load x[j]
    assert not any(s.dtype is not None and not s.dtype.is_float for s in act.active)


def select_by_sign(x: sp.Array, w: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        c = x[i]
        if c > 0.0:
            out[i] = w[i]
        else:
            out[i] = -w[i]


def test_value_only_compared_is_varied_not_active():
    kernel, task = build(select_by_sign, f32(True), f32(True), f32(True))
    act = Activity(task)
    (x,) = loads(task, "x")
    assert x in act.varied and x not in act.active
    assert slot(task, "c") not in act.active_slots
    assert slot(task, "c") in act.needed_slots      # but the replay must know which branch ran
    assert not any(s in act.active for s in computes(task, "GT"))
    assert all(s in act.active for s in loads(task, "w") + stored(task, "out"))


def floors(x: sp.Array, w: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[i] = sp.floor(x[i]) + sp.sin(w[i])


def test_zero_gradient_op_stops_activity():
    kernel, task = build(floors, f32(True), f32(True), f32(True))
    act = Activity(task)
    assert not any(s in act.active for s in loads(task, "x") + computes(task, "FLOOR"))
    assert all(s in act.active for s in loads(task, "w") + computes(task, "SIN") + stored(task, "out"))


# ---- through local slots and loops -----------------------------------------------------------------------
def slots_and_loop(x: sp.Array, c: sp.Array, out: sp.Array, out2: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        acc = c[i]
        cnt = 0
        for k in range(n):
            v = v * c[i] + 0.5
            acc = acc * 2.0
            cnt += 1
        out[i] = v
        out2[i] = acc + cnt


@pytest.mark.parametrize("out2_grad", [False, True])
def test_value_through_a_slot_and_a_loop(out2_grad):
    kernel, task = build(slots_and_loop, f32(True), f32(), f32(True), f32(out2_grad), sp.i32)
    act = Activity(task)
    v, acc, cnt = slot(task, "v"), slot(task, "acc"), slot(task, "cnt")
    assert v in act.active_slots
    assert acc not in act.active_slots and cnt not in act.active_slots   # acc: no needs-grad input
    assert not any(s in act.active or s in act.varied for s in loads(task, "c"))
    assert all(s in act.active for s in stored(task, "out"))
    assert not any(s in act.active for s in stored(task, "out2"))
    loop = next(s for s in N.walk(task.body) if isinstance(s, N.RangeFor))
    assert loop in act.busy_constructs
    assert v in act.needed_slots
    if not out2_grad:   # nothing the gradient needs reads them (a store into out2 with a gradient keeps them)
        assert cnt not in act.needed_slots and acc not in act.needed_slots
    assert varied_outputs(task) == set()


def loop_carried(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        u = 0.0
        v = 0.0
        for k in range(n):
            v = u * 2.0           # x reaches v only through the previous iteration's u
            u = x[i]
        out[i] = v


def test_activity_carried_by_a_loop_back_edge():
    kernel, task = build(loop_carried, f32(True), f32(True), sp.i32)
    act = Activity(task)
    assert {slot(task, "u"), slot(task, "v")} <= act.active_slots
    assert all(s in act.active for s in loads(task, "x") + computes(task, "MUL"))


def overwritten(x: sp.Array, y: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        v = y[i] * 3.0            # x's value is dead: it never reaches out
        out[i] = v


def test_slot_activity_is_per_slot():
    """v is active through its second store; its first (x, overwritten unread) is left unpinned: activity is
    per slot, so reporting x active is a conservative answer, not a wrong one."""
    kernel, task = build(overwritten, f32(True), f32(True), f32(True))
    act = Activity(task)
    assert slot(task, "v") in act.active_slots
    assert all(s in act.active for s in loads(task, "y") + stored(task, "out"))
    assert loads(task, "x")[0] in act.varied


# ---- atomics and forward mode --------------------------------------------------------------------------
def atomic_sum(x: sp.Array, w: sp.Array, c: sp.Array, total: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_add(total[0], x[i] * w[i] + c[i])


def test_atomic_into_a_grad_output():
    kernel, task = build(atomic_sum, f32(True), f32(), f32(), f32(True))
    act = Activity(task)
    assert all(s in act.active for s in loads(task, "x") + stored(task, "total"))
    assert not any(s in act.active for s in loads(task, "w") + loads(task, "c"))
    assert any(isinstance(s, N.AtomicRMW) for s in act.rev_work)


def test_forward_mode_flag():
    """With flag needs_dual the same analysis follows the dual companions, not the gradients."""
    kernel, task = build(side_output, f32(dual=True), f32(grad=True), f32(dual=True), f32(grad=True))
    fwd, rev = Activity(task, "needs_dual"), Activity(task)
    assert all(s in fwd.active for s in loads(task, "x") + stored(task, "out"))
    assert not any(s in fwd.active or s in fwd.varied for s in loads(task, "z"))
    assert all(s in rev.active for s in loads(task, "z") + stored(task, "aux"))
    assert not any(s in rev.active for s in loads(task, "x"))
    assert varied_outputs(task, "needs_dual") == set() and varied_outputs(task) == set()
    kernel, task = build(side_output, f32(dual=True), f32(grad=True), f32(grad=True), f32(dual=True))
    assert varied_outputs(task, "needs_dual") == {index_of(kernel, "out")}
    assert varied_outputs(task) == {index_of(kernel, "aux")}

"""Whether lavapipe's loop cap cut a loop short (which launches check it: loop_cap.py).

gallivm runs a SIMD vector of threads (a subgroup: 8 on lavapipe) through the shader with one loop limiter,
65,535 steps, taken one at every loop pass of the vector (masked passes too). Once it is spent, every loop
ends after the pass it is in, with no error: the rest of the thread runs on, each loop for one pass.

So a thread's end holds a two-pass loop left only at its header: after it, its index is 2, or 1 where the
vector's limit had run out, and the thread flags that (one with exactly one step left is flagged too). Exact
whatever the vector's loops did, where a count of its steps beside them was not: values leaving a stopped loop
through a break are stale (their copies at the break never ran: a count read 2 after a 65,534-step loop inside
another), and branches no lane takes and masked passes cost steps too. The check is a specialisation
constant: 0 leaves it out.
"""
from .. import types as T
from .spec import LoopControl, Op, SelectionControl


def loop_cut(L, enabled):
    """The two-pass loop where the u1 `enabled` holds; returns a u1, true where the vector's limit ran out
    (lower_memory.Memory.flag_thread_end sets the loop-cut word there)."""
    f, i32 = L.f, L.ty(T.i32)
    entry = L.cur_label
    then, merge = f.new_label(), f.new_label()
    f.emit_void(Op.OpSelectionMerge, merge, SelectionControl.NONE)
    f.emit_void(Op.OpBranchConditional, enabled, then, merge)
    L.begin(then)
    header, body, done = (f.new_label() for _ in range(3))
    f.emit_void(Op.OpBranch, header)
    L.begin(header)
    following = L.m.new_id()
    i = f.emit(Op.OpPhi, i32, L.i32c(0), then, following, body)
    go = L.emit(Op.OpSLessThan, T.u1, i, L.i32c(2))
    # DontUnroll: a 2-trip loop the driver unrolls takes no steps
    f.emit_void(Op.OpLoopMerge, done, body, LoopControl.DontUnroll)
    f.emit_void(Op.OpBranchConditional, go, body, done)
    L.begin(body)
    f.emit(Op.OpIAdd, i32, i, L.i32c(1), result_id=following)
    f.emit_void(Op.OpBranch, header)
    L.begin(done)
    cut = L.emit(Op.OpINotEqual, T.u1, i, L.i32c(2))
    f.emit_void(Op.OpBranch, merge)
    L.begin(merge)
    return f.emit(Op.OpPhi, L.ty(T.u1), L.const(T.u1, False), entry, cut, done)

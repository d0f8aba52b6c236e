"""Adstack homes in the lowering: the choice of homes, the emitted SPIR-V of each home (spirv-val, no
ArrayStride on Function arrays, adjoint arrays only where used, the heap binding and its size), and IR
kernels using every adstack op run on Vulkan in every home against the IR interpreter, overflow included."""
import re
import struct

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.interp import eval_num_threads, run_kernel
from spvad.ir.ops import Op
from spvad.spirv import tools
from spvad.spirv.lower import lower_task
from spvad.spirv.lower_adstack import (DEFAULT_FUNCTION_BUDGET_WORDS, choose_homes, function_budget_words,
                                       stack_shapes)
from tests import common_kernels

HOME_SETS = [("function", "function"), ("buffer", "buffer"), ("buffer", "function"), ("function", "buffer")]


# ---- choosing homes ---------------------------------------------------------------------------------------
def test_budget_per_device_type():
    assert function_budget_words({"device_type": "cpu"}) == 256
    assert function_budget_words({"device_type": "discrete_gpu"}) == DEFAULT_FUNCTION_BUDGET_WORDS == 1024


@pytest.mark.parametrize("shapes, spec, budget, mode, homes", [
    ([(8, None, 1), (4, None, 2)], None, 1024, "auto", ("function", "function")),
    ([(8, None, 1), (4, None, 2)], None, 1024, "buffer", ("buffer", "buffer")),
    ([(2000, None, 1)], None, 1024, "function", ("function",)),
    ([(1024, None, 1)], None, 1024, "auto", ("function",)),                    # the budget is inclusive
    ([(1, 0, 1), (3, None, 1)], {0: 1021}, 1024, "auto", ("function", "function")),
    ([(1, 0, 1), (3, None, 1)], {0: 1024}, 1024, "auto", ("buffer", "function")),  # largest moves first
    ([(600, None, 1), (300, None, 2), (1, None, 1)], None, 1024, "auto", ("buffer", "function", "function")),
    ([(600, None, 2), (600, None, 2)], None, 1024, "auto", ("buffer", "buffer")),
])
def test_choose_homes(shapes, spec, budget, mode, homes):
    assert choose_homes(shapes, spec, budget, mode) == homes


# ---- an IR kernel with every adstack op -----------------------------------------------------------------
def adstack_kernel(dt, capacity=8, spec_id=None):
    """Per thread: push n values (varying with the iteration) on stack s (dt, adjoints used) and n floats
    on stack t (primal only, like reverse mode's snapshots), then pop both back, accumulating
    top + adjoint + t's top into y[tid]. n > 8 overflows s, n > 4 overflows t."""
    x, y = N.ArrayParam("x", T.f32, 1, 0), N.ArrayParam("y", T.f32, 1, 1)
    n = N.ScalarParam("n", T.i32, 0)
    body = N.Block()
    add = body.append
    tid = add(N.ThreadIndex())
    s = add(N.AdStackAlloca(dt, capacity, "s", spec_id))
    t = add(N.AdStackAlloca(T.f32, 4, "t"))
    acc = add(N.Alloca(T.f32, "acc"))
    xv = add(N.GlobalLoad(x, (tid,)))
    nv, zero = add(N.ScalarArg(n)), add(N.Const(0, T.i32))
    up = add(N.RangeFor(zero, nv, 1, N.Block()))
    k = up.body.append(N.LoopIndex(up))
    up.body.append(N.AdStackPush(s, pushed_value(up.body, dt, tid, k, xv)))
    kf = up.body.append(N.Compute(Op.CAST, (k,), T.f32))
    up.body.append(N.AdStackPush(t, up.body.append(N.Compute(Op.ADD, (xv, kf), T.f32))))
    down = add(N.RangeFor(nv, zero, -1, N.Block()))
    b = down.body.append
    top = b(N.AdStackLoadTop(s))
    if not dt.is_bool:
        b(N.AdStackAccAdjoint(s, top))
    adj = b(N.AdStackLoadTopAdj(s))
    parts = [b(N.Compute(Op.CAST, (top,), T.f32)), b(N.Compute(Op.CAST, (adj,), T.f32)), b(N.AdStackLoadTop(t))]
    total = b(N.LocalLoad(acc))
    for p in parts:
        total = b(N.Compute(Op.ADD, (total, p), T.f32))
    b(N.LocalStore(acc, total))
    b(N.AdStackPop(s))
    b(N.AdStackPop(t))
    add(N.GlobalStore(y, (tid,), add(N.LocalLoad(acc))))
    header = N.Block()
    threads = header.append(N.ArrayShape(x, 0))
    task = N.Task("t0", "parallel", header, threads, body)
    return N.Kernel("adstacks", [x, y], [n], [task])


def pushed_value(block, dt, tid, k, xv):
    """The pushed value: (k + tid) % 3 as dt, plus x for floats (bools: != 0)."""
    m = block.append(N.Compute(Op.MOD, (block.append(N.Compute(Op.ADD, (k, tid), T.i32)),
                                        block.append(N.Const(3, T.i32))), T.i32))
    v = block.append(N.Compute(Op.CAST, (m,), dt))
    if dt.is_float:
        v = block.append(N.Compute(Op.ADD, (v, block.append(N.Compute(Op.CAST, (xv,), dt))), dt))
    return v


def lower_ok(kernel, homes, features=None):
    low = lower_task(kernel, kernel.tasks[0], local_size=8, homes=homes,
                     features=features or runtime.get().device.info["features"])
    tools.validate(low.spirv, kernel_name=kernel.name)
    return low, tools.disassemble(low.spirv)


def decorated(text, decoration):
    return set(re.findall(rf"OpDecorate (%\S+) {decoration}\b", text))


@pytest.mark.parametrize("homes", HOME_SETS)
@pytest.mark.parametrize("dt", [T.f32, T.f64, T.i32, T.u32, T.u1])
def test_spirv_of_each_home(dt, homes):
    low, text = lower_ok(adstack_kernel(dt), homes)
    assert low.homes == homes and low.flag_binding == 2
    arrays = re.findall(r"^\s*(%\S+) = OpTypeArray", text, re.M)
    assert not set(arrays) & decorated(text, "ArrayStride")   # NVIDIA rejects ArrayStride on Function arrays
    # Function arrays: s.primal and s.adjoint (adjoint ops use it), t.primal only (no adjoint op on t)
    names = set(re.findall(r'OpName %\S+ "(\w+\.\w+)"', text))
    expected = {"s.count", "t.count", "s.peak", "t.peak"}
    expected |= {"s.primal", "s.adjoint"} if homes[0] == "function" else set()
    expected |= {"t.primal"} if homes[1] == "function" else set()
    assert names == expected
    if "buffer" in homes:
        assert low.stack_heap.binding == 3 and low.num_buffers == 4 and "adstack_heap" in text
        words = {"s": 8 * 2 * (2 if dt == T.f64 else 1), "t": 4}   # s: primal + adjoint; t: primal only
        assert low.stack_heap.bytes_per_thread() == 4 * sum(w for (name, w), h in zip(words.items(), homes)
                                                             if h == "buffer")
    else:
        assert low.stack_heap is None and low.num_buffers == 3 and "adstack_heap" not in text


def test_reverse_mode_stacks_have_no_adjoint_array():
    integrate = sp.kernel(common_kernels.integrate)
    x = sp.from_numpy(np.ones(3, np.float32), needs_grad=True)
    args = (x, x, sp.ndarray(sp.f32, (3,), needs_grad=True), 5)
    ct = integrate._compiled(integrate._bind(args)[0], "reverse").tasks[0]
    # 0.01*sin(v) and cos(v) (autodiff/store_or_recompute.py): capacity from spec constant 0, one word, one array
    assert ct.stack_shapes == [(1, 0, 1)] * 2
    for homes in (("function",) * 2, ("buffer",) * 2):
        text = tools.disassemble(ct.variant(homes).spirv)
        assert "adjoint" not in text and ("_ptr_Function__arr" in text) == (homes[0] == "function")


@pytest.mark.parametrize("homes", [("function",) * 2, ("buffer",) * 2])
def test_pushes_are_branch_free_and_overflow_is_flagged_once_at_the_end(homes):
    """No branch and no atomic in a push: every atomic (the overflow and loop-cap flags) comes after the last
    loop (the loop-cap check's too), in one selection construct (a branch with atomics in each push cost
    lavapipe 7 ms of compile time and 40% of the integrator gradient's run time)."""
    integrate = sp.kernel(common_kernels.integrate)
    x = sp.from_numpy(np.ones(3, np.float32), needs_grad=True)
    args = (x, x, sp.ndarray(sp.f32, (3,), needs_grad=True), 5)
    text = tools.disassemble(integrate._compiled(integrate._bind(args)[0], "reverse").tasks[0]
                             .variant(homes).spirv)
    lines = text.splitlines()
    merges = [re.search(r"OpLoopMerge (%\S+)", ln).group(1) for ln in lines if "OpLoopMerge" in ln]
    capped = bool(runtime.get().device.info["limits"].get("max_loop_iterations"))
    assert len(merges) == 2 + capped   # the forward sweep, the reverse sweep, lavapipe's loop-cap check
    after_loops = max(i for i, ln in enumerate(lines) for m in merges if ln.strip().startswith(f"{m} = OpLabel"))
    atomics = [i for i, ln in enumerate(lines) if "OpAtomic" in ln]
    assert atomics and min(atomics) > after_loops
    # all inside one `if`: the selection just before the first atomic merges after the last
    sel = max(i for i in range(min(atomics)) if "OpSelectionMerge" in lines[i])
    merge = re.search(r"OpSelectionMerge (%\S+)", lines[sel]).group(1)
    assert lines.index(next(ln for ln in lines if ln.strip().startswith(f"{merge} = OpLabel"))) > max(atomics)
    assert not any("OpSelectionMerge" in ln for ln in lines[sel + 1:max(atomics)])

# ---- on Vulkan, against the interpreter -----------------------------------------------------------------
def run_on_device(kernel, low, data, scalars, spec=None):
    """Launch the lowered task once on the runtime's device; returns the flag words. `data`:
    {(array index, "primal"): ndarray}, copied back in place."""
    dev = runtime.get().device
    runtime.get().sync()
    shapes = [data[(a.index, "primal")].shape for a in kernel.arrays]
    n = eval_num_threads(kernel.tasks[0], scalars, shapes)
    bufs = {key: dev.create_buffer(v.nbytes) for key, v in data.items()}
    for key, v in data.items():
        bufs[key].view(v.dtype)[:] = v
    flag = dev.create_buffer(4 * (N.FLAG_WORDS_HEADER + len(low.adstacks)))
    buffers = [bufs[b] for b in low.bindings] + [flag]
    if low.stack_heap is not None:
        buffers.append(dev.create_buffer(n * low.stack_heap.bytes_per_thread(spec)))
    assert len(buffers) == low.num_buffers
    pipe = dev.create_pipeline(low.spirv, name=kernel.name, num_buffers=low.num_buffers,
                               push_constant_size=low.push_size, spec_constants=spec or None)
    push = struct.pack(low.push_format, *[scalars[f[1]] if f[0] == "scalar" else shapes[f[1]][f[2]]
                                          for f in low.push_fields])
    dev.launch(pipe, buffers, push, (-(-n // low.local_size), 1, 1))
    dev.sync()
    for key, v in data.items():
        v[:] = bufs[key].view(v.dtype)[:v.size]
    words = flag.view(np.uint32).copy()
    for obj in [pipe] + buffers:
        obj.release()
    return words


@pytest.mark.parametrize("homes", HOME_SETS)
@pytest.mark.parametrize("dt", [T.f32, T.f64, T.i32, T.u32, T.u1])
@pytest.mark.parametrize("n", [3, 6, 11])   # 6 overflows t, 11 overflows both
def test_adstacks_on_device_match_the_interpreter(dt, homes, n, rng):
    if dt == T.f64 and not runtime.get().device.info["features"]["float64"]:
        pytest.skip("the device has no float64")
    kernel = adstack_kernel(dt)
    low, _ = lower_ok(kernel, homes)
    x = rng.uniform(-1, 1, 13).astype(np.float32)   # 13 threads, local size 8: a partial second group
    data = {(0, "primal"): x.copy(), (1, "primal"): np.zeros(13, np.float32)}
    ref = {key: v.copy() for key, v in data.items()}
    ref_flags = np.zeros(N.FLAG_WORDS_HEADER + 2, np.uint32)
    run_kernel(kernel, ref, [n], ref_flags)
    flags = run_on_device(kernel, low, data, [n])
    np.testing.assert_allclose(data[(1, "primal")], ref[(1, "primal")], rtol=1e-6)
    np.testing.assert_array_equal(flags, ref_flags)
    assert bool(flags[0]) == (n > 4)


@pytest.mark.parametrize("homes", HOME_SETS)
def test_spec_constant_capacity_sizes_the_slices(homes, rng):
    """Capacity 6 chosen at launch (default 1): the host's bytes per thread and the shader's slice layout
    agree, and overflow follows the launched capacity."""
    kernel = adstack_kernel(T.f64, capacity=1, spec_id=0)
    low, _ = lower_ok(kernel, homes)
    if homes[0] == "buffer":   # s: 6 f64 entries, primal and adjoint
        assert low.stack_heap.bytes_per_thread({0: 6}) - low.stack_heap.bytes_per_thread() == 5 * 2 * 8
    kernel.tasks[0].body.stmts[1].capacity = 6   # what the interpreter should see
    assert stack_shapes(kernel.tasks[0])[0] == (6, 0, 4)
    for n in (5, 7):
        x = rng.uniform(-1, 1, 11)
        data = {(0, "primal"): x.astype(np.float32), (1, "primal"): np.zeros(11, np.float32)}
        ref = {key: v.copy() for key, v in data.items()}
        ref_flags = np.zeros(N.FLAG_WORDS_HEADER + 2, np.uint32)
        run_kernel(kernel, ref, [n], ref_flags)
        flags = run_on_device(kernel, low, data, [n], spec={0: 6})
        np.testing.assert_allclose(data[(1, "primal")], ref[(1, "primal")], rtol=1e-6)
        np.testing.assert_array_equal(flags, ref_flags)

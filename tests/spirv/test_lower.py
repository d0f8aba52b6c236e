"""IR -> SPIR-V lowering: every Op for every dtype it accepts, every statement kind, buffers, push
constants, atomics and adstacks; each module must pass spirv-val (vulkan1.1), and a few run on Vulkan
against the IR interpreter."""
import itertools
import os
import re
import struct

import numpy as np
import pytest

from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.ops import ARITY, ATOMICS, Op, result_dtype
from spvad.spirv import tools
from spvad.spirv.lower import LoweringError, lower_task

from irbuild import KernelBuilder

NO_ATOMIC_F32 = {"float64": True, "int64": True, "atomic_float32_add": False}
ATOMIC_F32 = {"float64": True, "int64": True, "atomic_float32_add": True}


# ---- the IR builder: arrays carry .grad and .dual buffers, so every field can be lowered -----------------
class KB(KernelBuilder):
    def array(self, name, dtype=T.f32, ndim=1):
        return super().array(name, dtype, ndim, needs_grad=True, needs_dual=True)


def lower_ok(kb, task=0, **kw):
    """Lower one task, run spirv-val on it, return (LoweredTask, disassembly)."""
    low = lower_task(kb.kernel, kb.kernel.tasks[task], **kw)
    tools.validate(low.spirv, kernel_name=kb.kernel.name)
    return low, tools.disassemble(low.spirv)


def decorated(text, decoration):
    """Names of the ids carrying `decoration` (e.g. ArrayStride)."""
    return re.findall(rf"OpDecorate (%\S+) {decoration}\b", text)


def definition(text, name):
    m = re.search(rf"^\s*{re.escape(name)} = (Op\w+)", text, re.M)
    return m.group(1)


# ---- ops (tests/ir/test_op_tables.py checks that LOWER and ATOMIC_LOWER cover every op) ------------------
def op_cases():
    """(op, operand dtypes, result dtype) for every Compute op and every operand dtype its type rule accepts
    (atomics: see the atomics section)."""
    for op in (op for op in Op if op not in ATOMICS):
        if op is Op.CAST:
            for src, dst in itertools.product(T.ALL, T.ALL):
                yield op, (src,), dst
            continue
        for dt in T.ALL:
            if op is Op.POWI:   # the exponent is i32 or u32 whatever the base
                candidates = [(dt, e) for e in (T.i32, T.u32)]
            elif op is Op.F64_FROM_BITS:   # (high word, low word)
                candidates = [(dt, T.u32)]
            else:
                candidates = [(T.u1, dt, dt) if op is Op.SELECT else (dt,) * ARITY[op]]
            for dts in candidates:
                try:
                    yield op, dts, result_dtype(op, list(dts))
                except TypeError:
                    pass


OP_CASES = list(op_cases())


def test_op_cases_cover_every_op():
    assert {c[0] for c in OP_CASES} == set(Op) - ATOMICS


def op_kernel(op, dts, rt):
    """out[i] = op(a0[i], a1[i], ...) over 1-D arrays of the operand dtypes."""
    kb = KB(f"op_{op.value}")
    ins = [kb.array(f"a{k}", dt) for k, dt in enumerate(dts)]
    out = kb.array("out", rt)
    i = kb.parallel(out)
    kb.store(out, i, kb.op(op, *(kb.load(a, i) for a in ins), dtype=rt))
    return kb


@pytest.mark.parametrize("op, dts, rt", OP_CASES, ids=lambda v: getattr(v, "value", str(v)))
def test_op_lowers_and_validates(op, dts, rt):
    low, text = lower_ok(op_kernel(op, dts, rt))
    assert low.bindings == [(k, "primal") for k in range(len(dts) + 1)]
    if T.f64 in dts or rt == T.f64:
        assert "OpCapability Float64" in text


@pytest.mark.parametrize("op", [Op.SIN, Op.EXP, Op.LOG2, Op.POW, Op.ATAN2, Op.TAN, Op.EXP2, Op.LOG10, Op.EXPM1,
                                Op.LOG1P])
def test_f64_transcendentals_go_through_f32(op):
    _, text = lower_ok(op_kernel(op, (T.f64,) * ARITY[op], T.f64))
    ext = [ln for ln in text.splitlines() if "OpExtInst " in ln]
    assert ext and all("OpExtInst %float" in ln for ln in ext), ext
    assert "OpFConvert %float" in text and "OpFConvert %double" in text


@pytest.mark.parametrize("op, inst", [(Op.SQRT, "Sqrt"), (Op.FLOOR, "Floor"), (Op.ABS, "FAbs"),
                                      (Op.MIN, "FMin"), (Op.SIGN, "FSign"), (Op.HYPOT, "Sqrt")])
def test_f64_exact_ops_stay_f64(op, inst):
    _, text = lower_ok(op_kernel(op, (T.f64,) * ARITY[op], T.f64))
    assert f"OpExtInst %double %1 {inst}" in text and "OpFConvert" not in text


def test_python_semantics_instructions():
    """Only instructions Vulkan defines for every operand: i32 // and % divide magnitudes (OpSRem/OpSMod
    are undefined for negative operands, OpSDiv for INT_MIN / -1); |x| and float -> int casts select."""
    for op in (Op.FLOORDIV, Op.MOD):
        _, text = lower_ok(op_kernel(op, (T.i32, T.i32), T.i32))
        assert "OpUDiv" in text and not re.search(r"OpS(Rem|Mod|Div)\b", text)
    _, text = lower_ok(op_kernel(Op.ABS, (T.i32,), T.i32))
    assert "SAbs" not in text
    _, text = lower_ok(op_kernel(Op.CAST, (T.f32,), T.i32))
    assert text.count("OpSelect") >= 3   # NaN and out-of-range values never reach OpConvertFToS
    _, text = lower_ok(op_kernel(Op.MOD, (T.u32, T.u32), T.u32))
    assert "OpUMod" in text
    _, text = lower_ok(op_kernel(Op.MOD, (T.f32, T.f32), T.f32))
    assert "OpFMod" in text
    _, text = lower_ok(op_kernel(Op.FMOD, (T.f64, T.f64), T.f64))
    assert "OpFRem" in text and "OpFMod" not in text and "OpFConvert" not in text
    _, text = lower_ok(op_kernel(Op.SHR, (T.i32, T.i32), T.i32))
    assert "OpShiftRightArithmetic" in text
    _, text = lower_ok(op_kernel(Op.SHR, (T.u32, T.u32), T.u32))
    assert "OpShiftRightLogical" in text
    _, text = lower_ok(op_kernel(Op.NE, (T.f32, T.f32), T.u1))
    assert "OpFUnordNotEqual" in text


def test_powi_never_divides_by_an_overflowed_power():
    """x ** n with n < 0 is 1 / x**|n|, and +-0 where x**|n| is infinite: Vulkan defines 1 / y only for
    |y| <= 2**126 (NVIDIA's f64 gave 1.0 for 1.5 ** INT_MIN)."""
    for dt in (T.f32, T.f64):
        _, text = lower_ok(op_kernel(Op.POWI, (dt, T.i32), dt))
        assert "OpIsInf" in text


@pytest.mark.parametrize("base", [T.f32, T.i32], ids=str)
def test_powi_is_straight_line_code(base):
    """POWI squares over all 32 bits of |n| with selects: no loop, which lavapipe could silently cut short."""
    _, text = lower_ok(op_kernel(Op.POWI, (base, T.i32), base))
    assert "OpLoopMerge" not in text and text.count("OpBranchConditional") == 1   # the `tid < n` guard only
    assert text.count("OpSelect") >= 32


def test_f64_without_float64_feature_raises():
    with pytest.raises(LoweringError, match="float64"):
        lower_task(*(lambda kb: (kb.kernel, kb.kernel.tasks[0]))(op_kernel(Op.ADD, (T.f64,) * 2, T.f64)),
                   features={"float64": False, "int64": False, "atomic_float32_add": False})


# ---- the entry point, push constants and buffers -------------------------------------------------------
def test_parallel_and_serial_entry_points():
    kb = KB()
    x = kb.array("x", T.f32)
    i = kb.parallel(x)
    kb.store(x, i, kb.op(Op.ADD, kb.load(x, i), kb.const(1.0)))
    kb.serial()
    kb.store(x, kb.const(0), kb.const(2.0))
    low, text = lower_ok(kb, 0, local_size=64)
    assert low.local_size == 64 and "LocalSize 64 1 1" in text
    for builtin in ("WorkgroupId", "NumWorkgroups", "LocalInvocationIndex"):
        assert f"BuiltIn {builtin}" in text
    assert re.search(r'OpEntryPoint GLCompute %main "main"( %\w+){3}$', text, re.M)
    assert low.flag_binding is None and low.adstacks == [] and low.spec_ids == {}
    low, text = lower_ok(kb, 1, local_size=64)
    assert low.local_size == 1 and "LocalSize 1 1 1" in text
    assert low.push_size == 0 and low.push_fields == [] and "PushConstant" not in text


def test_push_constants_layout_and_bool_scalars():
    kb = KB()
    x = kb.array("x", T.f64, 3)
    ps = [kb.scalar("a", T.f32), kb.scalar("b", T.f64), kb.scalar("c", T.u1), kb.scalar("d", T.u32),
          kb.scalar("e", T.i32)]
    i = kb.parallel(x)
    v = kb.op(Op.ADD, kb.op(Op.CAST, kb.arg(ps[0]), dtype=T.f64), kb.arg(ps[1]))
    v = kb.op(Op.SELECT, kb.arg(ps[2]), v, kb.op(Op.CAST, kb.arg(ps[3]), dtype=T.f64))
    kb.store(x, (i, kb.arg(ps[4]), kb.shape(x, 2)), v)
    low, text = lower_ok(kb)
    assert low.push_fields == [("scalar", 1, T.f64), ("scalar", 0, T.f32), ("scalar", 2, T.u1),
                               ("scalar", 3, T.u32), ("scalar", 4, T.i32), ("shape", 0, 0, T.i32),
                               ("shape", 0, 1, T.i32), ("shape", 0, 2, T.i32)]
    assert low.push_format == "<dfIIiiii" and low.push_size == struct.calcsize("<dfIIiiii") == 36
    offsets = [int(o) for o in re.findall(r"OpMemberDecorate %Push \d+ Offset (\d+)", text)]
    assert offsets == [0, 8, 12, 16, 20, 24, 28, 32]
    assert "OpINotEqual %bool" in text   # the u32 bool scalar becomes a bool


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("dt", [T.f32, T.f64, T.i32, T.u32, T.u1])
def test_global_load_store_nd(ndim, dt):
    kb = KB()
    x, y = kb.array("x", dt, ndim), kb.array("y", dt, ndim)
    i = kb.parallel(x)
    idx = (i,) + tuple(kb.const(k) for k in range(1, ndim))
    v = kb.load(x, *idx)
    kb.store(y, idx, v, field="grad")
    kb.store(x, idx, kb.load(y, *idx, field="dual"))
    low, text = lower_ok(kb)
    assert low.bindings == [(0, "primal"), (1, "grad"), (1, "dual")]
    shapes = [f for f in low.push_fields if f[0] == "shape"]
    assert shapes == [("shape", 0, 0, T.i32)] + [("shape", a, k, T.i32) for a in (0, 1)
                                                  for k in range(1, ndim)] and shapes == sorted(shapes)
    assert decorated(text, "ArrayStride") and all(
        definition(text, t) == "OpTypeRuntimeArray" for t in decorated(text, "ArrayStride"))
    assert f"ArrayStride {8 if dt == T.f64 else 4}" in text
    if dt.is_bool:
        assert "OpINotEqual %bool" in text and "OpSelect %uint" in text and "%bool = OpTypeBool" in text
        assert "_runtimearr_uint" in text


# ---- control flow --------------------------------------------------------------------------------------
def test_if_with_both_branches_terminating_skips_the_rest():
    kb = KB()
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    acc = kb.alloca(T.i32, "acc")
    with kb.while_():
        s = kb.if_stmt(kb.op(Op.GT, kb.lload(acc), kb.load(x, i)))
        with kb.nested(s.then_body):
            kb.brk()
        with kb.nested(s.else_body):
            kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.const(3)))
            kb.cont()
        kb.store(x, i, kb.const(12345))    # unreachable: must not be emitted
    kb.store(x, i, kb.lload(acc))
    _, text = lower_ok(kb)
    assert "OpUnreachable" in text and "12345" not in text
    assert text.count("OpLoopMerge") == 1 and text.count("OpSelectionMerge") == 2


def test_if_without_else_and_nested_ifs():
    kb = KB()
    x = kb.array("x", T.f32)
    i = kb.parallel(x)
    s = kb.if_stmt(kb.op(Op.LT, kb.load(x, i), kb.const(0.0)))
    with kb.nested(s.then_body):
        t = kb.if_stmt(kb.op(Op.EQ, i, kb.const(3)))
        with kb.nested(t.else_body):
            kb.store(x, i, kb.const(1.0))
    _, text = lower_ok(kb)
    assert text.count("OpSelectionMerge") == 3 and "OpUnreachable" not in text


def test_nested_range_for_with_negative_step():
    kb = KB()
    x = kb.array("x", T.i32)
    n = kb.scalar("n")
    i = kb.parallel(x)
    acc = kb.alloca(T.i32, "acc")
    with kb.range_for(i, kb.arg(n)) as j:
        s = kb.if_stmt(kb.op(Op.EQ, kb.op(Op.MOD, j, kb.const(3)), kb.const(1)))
        with kb.nested(s.then_body):
            kb.cont()
        with kb.range_for(j, kb.const(-3), -2) as k:
            s = kb.if_stmt(kb.op(Op.EQ, k, kb.const(4)))
            with kb.nested(s.then_body):
                kb.brk()
            kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.op(Op.MUL, k, j)))
    kb.store(x, i, kb.lload(acc))
    _, text = lower_ok(kb)
    assert text.count("OpLoopMerge") == 2
    assert "OpSLessThan" in text and "OpSGreaterThan" in text and "%int_n2" in text


def test_while_with_break_continue_and_infinite_while():
    kb = KB()
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    v = kb.alloca(T.i32, "v")
    kb.lstore(v, kb.load(x, i))
    with kb.while_():
        s = kb.if_stmt(kb.op(Op.LE, kb.lload(v), kb.const(1)))
        with kb.nested(s.then_body):
            kb.brk()
        s = kb.if_stmt(kb.op(Op.EQ, kb.op(Op.MOD, kb.lload(v), kb.const(2)), kb.const(0)))
        with kb.nested(s.then_body):
            kb.lstore(v, kb.op(Op.FLOORDIV, kb.lload(v), kb.const(2)))
            kb.cont()
        kb.lstore(v, kb.op(Op.ADD, kb.op(Op.MUL, kb.lload(v), kb.const(3)), kb.const(1)))
    kb.store(x, i, kb.lload(v))
    lower_ok(kb)
    kb.serial()
    with kb.while_():                     # never leaves: its merge block is unreachable
        kb.store(x, kb.const(0), kb.const(1))
    _, text = lower_ok(kb, 1)
    assert "OpUnreachable" in text


def test_loop_whose_body_always_breaks():
    kb = KB()
    x = kb.array("x", T.i32)
    i = kb.parallel(x)
    with kb.range_for(kb.const(0), kb.const(10)):
        kb.store(x, i, kb.const(7))
        kb.brk()
        kb.store(x, i, kb.const(99999))   # unreachable
    _, text = lower_ok(kb)
    assert "99999" not in text


def exit_flag_kernel(kb):
    """A RangeFor and a While that each leave through their exit flag, set when x[i] grows past a bound."""
    x, n = kb.array("x", T.i32), kb.scalar("n")
    i = kb.parallel(x)
    done, stop = kb.alloca(T.u1, "done"), kb.alloca(T.u1, "stop")
    for flag, loop in ((done, kb.range_for(kb.const(0), kb.arg(n))), (stop, kb.while_())):
        kb.lstore(flag, kb.const(False))
        with loop:
            kb.store(x, i, kb.op(Op.ADD, kb.load(x, i), kb.const(3)))
            with kb.if_(kb.op(Op.GE, kb.load(x, i), kb.op(Op.MUL, kb.arg(n), kb.const(2)))):
                kb.lstore(flag, kb.const(True))
        kb.task.body.stmts[-1].exit_flag = flag
    return kb


def test_exit_flag_is_tested_by_a_branch_to_the_merge_block():
    """A loop's exit flag is its body's first test, a conditional branch straight to the loop's merge block
    (not a break inside a selection: lavapipe lost divergent breaks taken from a loop's selections)."""
    _, text = lower_ok(exit_flag_kernel(KB()))
    lines = [line.strip() for line in text.splitlines()]
    merges = [line.split()[1] for line in lines if line.startswith("OpLoopMerge")]
    # selections: `if tid < num_threads` and each loop's `if x[i] >= 2n`, none for the flags
    assert len(merges) == 2 and text.count("OpSelectionMerge") == 3 and "OpUnreachable" not in text
    for flag, merge in zip(("%done", "%stop"), merges):
        k = next(k for k, line in enumerate(lines) if line.endswith(f"OpLoad %bool {flag}")
                 and lines[k - 1].startswith("%") and lines[k - 1].endswith("OpLabel"))
        value = lines[k].split()[0]
        assert lines[k + 1].startswith(f"OpBranchConditional {value} {merge} ")


def test_exit_flags_on_device(device, rng):
    data = {(0, "primal"): rng.integers(-9, 9, 37).astype(np.int32)}
    compare(device, exit_flag_kernel(KB("exit_flags")), data, [6])


def test_alloca_zeroed_at_its_statement_and_bool_locals():
    kb = KB()
    x = kb.array("x", T.u1)
    i = kb.parallel(x)
    with kb.range_for(kb.const(0), kb.const(3)):
        b = kb.alloca(T.u1, "flag")
        kb.lstore(b, kb.op(Op.NOT, kb.lload(b)))
        kb.store(x, i, kb.lload(b))
    _, text = lower_ok(kb)
    assert "OpStore %flag %false" in text
    body = [ln.strip() for ln in text[text.index("OpFunction "):].splitlines()]
    assert body[1].endswith("OpLabel")
    n_vars = sum("OpVariable" in ln for ln in body)
    assert n_vars == 2 and all("OpVariable" in ln and "Function" in ln for ln in body[2:2 + n_vars])


# ---- atomics -------------------------------------------------------------------------------------------
ATOMIC_CASES = [(op, dt, feat) for op in (Op.ATOMIC_ADD, Op.ATOMIC_MAX, Op.ATOMIC_MIN)
                for dt in (T.i32, T.u32, T.f32, T.f64) for feat in (False, True)]


@pytest.mark.parametrize("op, dt, feat", ATOMIC_CASES, ids=str)
def test_atomics(op, dt, feat):
    kb = KB()
    x, y = kb.array("x", dt), kb.array("y", dt)
    i = kb.parallel(x)
    v = kb.load(x, i)
    old = kb.atomic(op, y, kb.const(0), v, field="grad")
    kb.store(x, i, kb.op(Op.ADD, old, v))
    kb.store(y, i, v, field="grad")      # a plain store to the same binding
    low, text = lower_ok(kb, features=ATOMIC_F32 if feat else NO_ATOMIC_F32)
    native_fadd = dt == T.f32 and op is Op.ATOMIC_ADD and feat
    assert ("OpAtomicFAddEXT" in text) == native_fadd
    assert ("SPV_EXT_shader_atomic_float_add" in text) == native_fadd
    cas = dt.is_float and not native_fadd
    assert ("OpAtomicCompareExchange" in text) == cas
    assert ("OpCapability Int64Atomics" in text) == (dt == T.f64)
    if cas:   # the bound buffer is viewed as integer words and plain accesses bitcast
        word = "ulong" if dt == T.f64 else "uint"
        assert f"_runtimearr_{word}" in text and "OpBitcast" in text and "OpPhi" in text
    if dt.is_int:
        sign = "S" if dt == T.i32 else "U"
        name = {Op.ATOMIC_ADD: "OpAtomicIAdd", Op.ATOMIC_MAX: f"OpAtomic{sign}Max",
                Op.ATOMIC_MIN: f"OpAtomic{sign}Min"}[op]
        assert name in text


def test_native_float_add_shares_no_binding_with_cas():
    """A binding that needs CAS (f32 max) is declared as u32 words: its adds become CAS loops too."""
    kb = KB()
    x = kb.array("x", T.f32)
    i = kb.parallel(x)
    v = kb.load(x, i)
    kb.atomic(Op.ATOMIC_ADD, x, kb.const(0), v)
    kb.atomic(Op.ATOMIC_MAX, x, kb.const(1), v)
    _, text = lower_ok(kb, features=ATOMIC_F32)
    assert "OpAtomicFAddEXT" not in text and text.count("OpAtomicCompareExchange") == 2


def test_f64_atomics_need_int64():
    kb = KB()
    x = kb.array("x", T.f64)
    i = kb.parallel(x)
    kb.atomic(Op.ATOMIC_ADD, x, kb.const(0), kb.load(x, i))
    with pytest.raises(LoweringError, match="64-bit integer atomics"):
        lower_task(kb.kernel, kb.task, features={"float64": True, "int64": False, "atomic_float32_add": True})


# ---- adstacks ------------------------------------------------------------------------------------------
def adstack_kernel(dt, capacity=8, spec_id=None, two=False):
    """Push x[i] (as dt) n times, then pop everything back, accumulating adjoints, into y."""
    kb = KB("adstack")
    x, y = kb.array("x", T.f32), kb.array("y", T.f32)
    n = kb.scalar("n")
    i = kb.parallel(x)
    st = kb.adstack(dt, capacity, "s", spec_id)
    other = kb.adstack(T.f32, 4, "t") if two else None
    v = kb.op(Op.CAST, kb.load(x, i), dtype=dt)
    with kb.range_for(kb.const(0), kb.arg(n)):
        kb.add(N.AdStackPush(st, v))
        if other is not None:
            kb.add(N.AdStackPush(other, kb.load(x, i)))
    acc = kb.alloca(T.f32, "acc")
    with kb.range_for(kb.arg(n), kb.const(0), -1):
        top = kb.add(N.AdStackLoadTop(st))
        if not dt.is_bool:
            kb.add(N.AdStackAccAdjoint(st, top))
        adj = kb.add(N.AdStackLoadTopAdj(st))
        kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.op(Op.ADD, kb.op(Op.CAST, top, dtype=T.f32),
                                                          kb.op(Op.CAST, adj, dtype=T.f32))))
        kb.add(N.AdStackPop(st))
    kb.store(y, i, kb.lload(acc))
    return kb


@pytest.mark.parametrize("dt", [T.f32, T.f64, T.i32, T.u32, T.u1])
def test_adstack_ops(dt):
    kb = adstack_kernel(dt, two=True)
    low, text = lower_ok(kb)
    assert low.adstacks == N.adstacks_of(kb.task) and len(low.adstacks) == 2
    assert low.flag_binding == len(low.bindings) == 2
    assert "OpAtomicOr" in text and "OpAtomicUMax" in text and "OpDecorate %adstack_flags Binding 2" in text
    arrays = re.findall(r"^\s*(%\S+) = OpTypeArray", text, re.M)
    assert arrays and not set(arrays) & set(decorated(text, "ArrayStride"))
    assert all(definition(text, t) == "OpTypeRuntimeArray" for t in decorated(text, "ArrayStride"))
    if dt.is_bool:
        assert "%_arr_int_" in text   # bools live in i32 slots
    assert "UMin" in text            # loads clamp their index into the array


def test_adstack_spec_constant_capacity():
    kb = adstack_kernel(T.f32, capacity=16, spec_id=3)
    low, text = lower_ok(kb)
    assert low.spec_ids == {3: 16}
    assert re.search(r"OpDecorate %\d+ SpecId 3", text) and "OpSpecConstant %uint 16" in text
    assert re.search(r"OpTypeArray %float %\d+", text)


def test_adstack_without_capacity_raises():
    kb = adstack_kernel(T.f32, capacity=None)
    with pytest.raises(LoweringError, match="capacity"):
        lower_task(kb.kernel, kb.task)


# ---- running on Vulkan against the interpreter ---------------------------------------------------------
@pytest.fixture(scope="module")
def device():
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    vkdev = pytest.importorskip("spvad.rhi.vulkan.device")
    pytest.importorskip("spvad.ir.interp")
    try:
        dev = vkdev.VulkanDevice(validation=True)
    except Exception as e:   # no Vulkan driver on this machine
        pytest.skip(f"no Vulkan device: {e}")
    yield dev
    dev.close()


def run_on_device(dev, kernel, data, scalars, features=None):
    """Run every task of `kernel` on `dev`; data: {(array_index, field): ndarray}, copied back in place.
    Returns the flag words of each task (or None)."""
    from spvad.ir.interp import eval_num_threads
    features = features or dev.info["features"]
    shapes = [next(v.shape for (a, _), v in data.items() if a == arr.index) for arr in kernel.arrays]
    store = {k: T.storage_np_dtype(kernel.arrays[k[0]].dtype) for k in data}
    bufs = {k: dev.create_buffer(max(v.size * store[k].itemsize, 4)) for k, v in data.items()}
    for k, v in data.items():
        bufs[k].view(store[k])[:v.size] = v.reshape(-1)
    flags, keep = [], []
    for task in kernel.tasks:
        low = lower_task(kernel, task, local_size=8, features=features)
        tools.validate(low.spirv, kernel.name)
        views = [bufs[b] for b in low.bindings]
        flag = None
        if low.flag_binding is not None:
            flag = dev.create_buffer(4 * (N.FLAG_WORDS_HEADER + len(low.adstacks)))
            views.append(flag)
        vals = [scalars[f[1]] if f[0] == "scalar" else shapes[f[1]][f[2]] for f in low.push_fields]
        vals = [int(v) if isinstance(v, (bool, np.bool_)) else v for v in vals]
        pipe = dev.create_pipeline(low.spirv, name=kernel.name, num_buffers=len(views),
                                   push_constant_size=low.push_size, spec_constants=low.spec_ids or None)
        n = eval_num_threads(task, scalars, shapes)
        groups = -(-n // low.local_size)
        dev.launch(pipe, views, struct.pack(low.push_format, *vals), (max(groups, 1), 1, 1))
        dev.sync()   # one task after the other, as the interpreter runs them
        flags.append(None if flag is None else flag.view(np.uint32).copy())
        keep += [pipe, flag]
    for k, v in data.items():
        v.reshape(-1)[:] = bufs[k].view(store[k])[:v.size]
    for obj in keep + list(bufs.values()):
        if obj is not None:
            obj.release()
    assert dev.validation_messages() == []
    return flags


def compare(dev, kb, data, scalars, rtol=1e-5, features=None):
    from spvad.ir.interp import run_kernel
    ref = {k: v.copy() for k, v in data.items()}
    ref_flags = [np.zeros(N.FLAG_WORDS_HEADER + len(N.adstacks_of(t)), np.uint32) for t in kb.kernel.tasks]
    run_kernel(kb.kernel, ref, scalars, ref_flags)
    flags = run_on_device(dev, kb.kernel, data, scalars, features)
    for k in data:
        if data[k].dtype.kind == "f":
            np.testing.assert_allclose(data[k], ref[k], rtol=rtol, atol=1e-6, err_msg=str(k))
        else:
            np.testing.assert_array_equal(data[k], ref[k], err_msg=str(k))
    for got, want in zip(flags, ref_flags):
        if got is not None:
            np.testing.assert_array_equal(got, want)


def rand(rng, n, dt, lo=0.5, hi=3.0):
    """Random non-zero values of dtype `dt` (signs mixed where the dtype has them)."""
    if dt.is_bool:
        return rng.random(n) < 0.5
    if dt == T.u32:
        return rng.integers(1, 50, n).astype(np.uint32)
    if dt == T.i32:
        v = rng.integers(1, 50, n)
        return (v * np.where(rng.random(n) < 0.5, -1, 1)).astype(np.int32)
    v = rng.uniform(lo, hi, n) * np.where(rng.random(n) < 0.5, -1, 1)
    return v.astype(dt.np)


POSITIVE = {Op.SQRT, Op.RSQRT, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.POW, Op.ACOS, Op.ASIN}
SKIP_ON_DEVICE = {Op.TAN}   # f32 tan near its poles differs too much to compare with a fixed tolerance


@pytest.mark.parametrize("op, dts, rt", [c for c in OP_CASES if c[0] not in SKIP_ON_DEVICE],
                         ids=lambda v: getattr(v, "value", str(v)))
def test_ops_on_device_match_interpreter(device, rng, op, dts, rt):
    if T.f64 in dts + (rt,) and not device.info["features"]["float64"]:
        pytest.skip("no float64")
    n = 37
    kb = op_kernel(op, dts, rt)
    data = {}
    for k, dt in enumerate(dts):
        v = rand(rng, n, dt)
        if op in POSITIVE:
            v = np.abs(v)
            if op in (Op.ACOS, Op.ASIN):
                v = v / np.float32(4)
        if op in (Op.SHL, Op.SHR) and k == 1:
            v = (np.abs(v.astype(np.int64)) % 40).astype(dt.np)
        if op is Op.MUL_HI:   # products past 2^32
            v = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
        data[(k, "primal")] = v
    data[(len(dts), "primal")] = np.zeros(n, rt.np)
    # f64 ops the lowering computes in f32 (GLSL.std.450 instructions of 32 bits only) have f32 accuracy
    narrowed = T.f64 in dts and "OpFConvert %float" in tools.disassemble(lower_task(kb.kernel, kb.task).spirv)
    # lavapipe's f32 asin/acos are good to about 4e-4 (GLSL derives their precision from atan2).
    rtol = 1e-3 if op in (Op.ASIN, Op.ACOS) else 2e-6 if narrowed or rt == T.f32 else 1e-12
    compare(device, kb, data, [], rtol=rtol)


def test_control_flow_on_device(device, rng):
    kb = KB("flow")
    x, out = kb.array("x", T.i32), kb.array("out", T.i32)
    n = kb.scalar("n")
    i = kb.parallel(x)
    acc = kb.alloca(T.i32, "acc")
    with kb.range_for(i, kb.arg(n)) as j:
        s = kb.if_stmt(kb.op(Op.EQ, kb.op(Op.MOD, j, kb.const(3)), kb.const(1)))
        with kb.nested(s.then_body):
            kb.cont()
        with kb.range_for(j, kb.const(-3), -2) as k:
            s = kb.if_stmt(kb.op(Op.EQ, k, kb.const(4)))
            with kb.nested(s.then_body):
                kb.brk()
            kb.lstore(acc, kb.op(Op.ADD, kb.lload(acc), kb.op(Op.MUL, k, kb.load(x, i))))
        w = kb.alloca(T.i32, "w")
        kb.lstore(w, j)
        with kb.while_():
            s = kb.if_stmt(kb.op(Op.LE, kb.lload(w), kb.const(1)))
            with kb.nested(s.then_body):
                kb.brk()
            kb.lstore(w, kb.op(Op.FLOORDIV, kb.lload(w), kb.const(2)))
            kb.lstore(acc, kb.op(Op.SUB, kb.lload(acc), kb.const(1)))
    kb.store(out, i, kb.lload(acc))
    data = {(0, "primal"): rng.integers(1, 6, 21).astype(np.int32), (1, "primal"): np.zeros(21, np.int32)}
    compare(device, kb, data, [13])


def test_memory_and_atomics_on_device(device, rng):
    kb = KB("mem")
    x4, b, y = kb.array("x4", T.f32, 4), kb.array("b", T.u1, 2), kb.array("y", T.f32)
    ai, au, sm = kb.array("ai", T.i32), kb.array("au", T.u32), kb.array("sm", T.f32)
    i = kb.parallel(y)
    z, one = kb.const(0), kb.const(1)
    v = kb.load(x4, i, one, z, kb.op(Op.SUB, kb.shape(x4, 3), one))
    flag = kb.load(b, i, one)
    kb.store(b, (i, z), kb.op(Op.NOT, flag))
    kb.store(x4, (i, z, one, z), kb.op(Op.MUL, v, kb.const(2.0)))
    old = kb.atomic(Op.ATOMIC_ADD, y, z, v, field="grad")
    kb.atomic(Op.ATOMIC_ADD, sm, kb.op(Op.MOD, i, kb.const(2)), v)   # the only atomic on its binding: native
    kb.atomic(Op.ATOMIC_MAX, y, one, v, field="grad")
    kb.atomic(Op.ATOMIC_MIN, y, kb.const(2), v, field="grad")
    kb.store(y, i, kb.op(Op.SELECT, flag, v, kb.op(Op.MUL, old, kb.const(0.0))))
    vi = kb.op(Op.CAST, kb.op(Op.MUL, v, kb.const(10.0)), dtype=T.i32)
    for k, op in enumerate((Op.ATOMIC_ADD, Op.ATOMIC_MAX, Op.ATOMIC_MIN)):
        kb.atomic(op, ai, kb.const(k), vi)
        kb.atomic(op, au, kb.const(k), kb.op(Op.CAST, vi, dtype=T.u32))
    n = 19
    for feat in (False, True):
        if feat and not device.info["features"]["atomic_float32_add"]:
            continue
        data = {(0, "primal"): rand(rng, (n, 2, 3, 4), T.f32).reshape(n, 2, 3, 4),
                (1, "primal"): (rng.random((n, 2)) < 0.5), (2, "primal"): np.zeros(n, np.float32),
                (2, "grad"): np.array([0, -100, 100] + [0] * (n - 3), np.float32),
                (3, "primal"): np.array([0, -1000, 1000], np.int32),
                (4, "primal"): np.array([0, 0, 0xFFFFFFFF], np.uint32), (5, "primal"): np.ones(2, np.float32)}
        # The atomic add's old value depends on thread order: multiply it by 0 above, compare the rest.
        feats = dict(device.info["features"], atomic_float32_add=feat)
        text = tools.disassemble(lower_task(kb.kernel, kb.task, features=feats).spirv)
        assert ("OpAtomicFAddEXT" in text) == feat
        compare(device, kb, data, [], features=feats)


@pytest.mark.parametrize("dt", [T.f32, T.i32, T.u1, T.f64])
@pytest.mark.parametrize("n", [5, 8, 11])
def test_adstacks_on_device(device, rng, dt, n):
    if dt == T.f64 and not device.info["features"]["float64"]:
        pytest.skip("no float64")
    kb = adstack_kernel(dt, capacity=8, two=True)
    m = 13
    data = {(0, "primal"): rand(rng, m, T.f32), (1, "primal"): np.zeros(m, np.float32)}
    compare(device, kb, data, [n])   # n > 8 overflows stack 0 and n > 4 stack 1: flags must agree


def test_adstack_spec_constant_on_device(device, rng):
    kb = adstack_kernel(T.f32, capacity=4, spec_id=0)
    m = 9
    data = {(0, "primal"): rand(rng, m, T.f32), (1, "primal"): np.zeros(m, np.float32)}
    compare(device, kb, data, [4])


@pytest.mark.parametrize("op", [Op.ATOMIC_ADD, Op.ATOMIC_MAX, Op.ATOMIC_MIN], ids=lambda op: op.value)
def test_f64_atomics_on_device(device, rng, op):
    """f64 atomics are CAS loops on u64 words: they need the device's 64-bit buffer atomics."""
    if not device.info["features"].get("int64_atomics"):
        pytest.skip("the device does not report (enable) shaderBufferInt64Atomics")
    kb = KB("f64_atomics")
    x, y = kb.array("x", T.f64), kb.array("y", T.f64)
    i = kb.parallel(x)
    kb.atomic(op, y, kb.op(Op.MOD, i, kb.const(3)), kb.load(x, i))
    data = {(0, "primal"): rand(rng, 29, T.f64), (1, "primal"): np.array([0.5, -0.5, 0.25])}
    compare(device, kb, data, [], rtol=1e-12)

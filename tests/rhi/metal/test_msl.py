"""SPIR-V -> MSL on Linux: every kernel of a representative set translates, with the entry point and the
[[buffer(k)]] indices of the mapping (binding k -> k, push constants -> n), no invalid `atomicAdd(`, and its
adstacks intact; f64 is refused with a clear error. Runs wherever spirv-cross is installed (no Metal needed)."""
import pathlib
import re
import shutil
import struct

import pytest

import spvad as sp
from metal_cases import ATOMIC_FADD_MODULE, CASES
from spvad.ir import nodes as N
from spvad.rhi.metal import translate as tr
from spvad.rhi.metal.translate import METAL_FEATURES, MslTranslationError, translate
from spvad.spirv import tools

pytestmark = pytest.mark.skipif(shutil.which("spirv-cross") is None, reason="needs spirv-cross")
BUFFER_ATTR = re.compile(r"\[\[buffer\((\d+)\)\]\]")


@pytest.fixture(scope="module", autouse=True)
def runtime():
    """Compiles use the runtime's caches; their target features are METAL_FEATURES throughout, so any
    device will do (Vulkan where the runtime cannot select Metal yet)."""
    init_runtime()
    yield
    sp.reset()


def init_runtime(debug=False):
    try:
        sp.init(debug=debug)
    except sp.DeviceError:
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("SPVAD_BACKEND", raising=False)
            sp.init(backend="vulkan", debug=debug)


def compiled_for_metal(name, grad):
    k, build, _ = CASES[name]
    args = build()
    return k, args, k._compiled(k._bind(args)[0], "reverse" if grad else "primal", features=METAL_FEATURES)


def expected_names(ck, low):
    """MSL parameter name of each buffer index: x, x_grad, ..., adstack_flags (SPIRV-Cross turns . into _)."""
    names = [ck.ir.arrays[a].name + ("" if f == "primal" else "_" + f) for a, f in low.bindings]
    names += ["adstack_flags"] if low.flag_binding is not None else []
    return names + (["adstack_heap"] if getattr(low, "stack_heap", None) is not None else [])


def check_program(ck, low, prog):
    """The MSL of `low` follows the mapping: binding k -> [[buffer(k)]], push constants -> [[buffer(n)]]."""
    names = expected_names(ck, low)
    n = len(names)
    assert prog.entry == "main0" and f"kernel void {prog.entry}(" in prog.source
    assert prog.num_buffers == n and prog.buffer_indices == {k: k for k in range(n)}
    indices = [int(k) for k in BUFFER_ATTR.findall(prog.source)]   # every [[buffer(k)]]: unique
    assert len(indices) == len(set(indices)) == n + (1 if low.push_size else 0)
    assert {idx: arg for space, _, arg, idx in prog.buffer_args if space == "device"} == dict(enumerate(names))
    push = [(arg, idx) for space, _, arg, idx in prog.buffer_args if space == "constant"]
    assert push == ([("push", n)] if low.push_size else [])
    assert prog.push_index == (n if low.push_size else None)
    assert prog.local_size == (low.local_size, 1, 1)
    assert "atomicAdd(" not in prog.source   # GLSL's name: not MSL


CASE_IDS = [(n, g) for n, (_, _, has_grad) in CASES.items() for g in ((False, True) if has_grad else (False,))]


@pytest.mark.parametrize("name,grad", CASE_IDS, ids=[f"{n}-{'grad' if g else 'fwd'}" for n, g in CASE_IDS])
def test_kernel_translates_with_the_buffer_mapping(name, grad):
    _, _, ck = compiled_for_metal(name, grad)
    for ct in ck.tasks:
        check_program(ck, ct.lowered, translate(ct.lowered, ct.task.name))


def test_debug_kernels_translate_with_their_bounds_checks():
    """sp.init(debug=True) compiles bounds checks into every kernel (the flag buffer becomes a binding where
    a kernel had none): every case, forward and gradient, still translates with the mapping."""
    init_runtime(debug=True)
    try:
        for name, grad in CASE_IDS:
            _, _, ck = compiled_for_metal(name, grad)
            for ct in ck.tasks:
                low = ct.lowered
                prog = translate(low, ct.task.name)
                check_program(ck, low, prog)
                if low.bounds_sites:
                    assert low.flag_binding is not None, name
                    assert "atomic_compare_exchange_weak_explicit((device atomic_uint*)&adstack_flags" \
                        in prog.source, name
                if ct.depth_probe is not None:
                    probe = translate(ct.depth_probe, ct.task.name + "_depth")
                    assert probe.num_buffers == ct.depth_probe.num_buffers
    finally:
        init_runtime()


@pytest.mark.parametrize("name", ["integrate", "flip", "halve_until_small"])
def test_buffer_home_adstacks_add_the_heap_binding(name):
    """Large stacks live in a storage buffer (Metal rejects large per-thread arrays): the heap is the binding
    after the flags, and the push constants move one index up."""
    _, _, ck = compiled_for_metal(name, True)
    ct = ck.tasks[0]
    low = ct.variant(("buffer",) * len(ct.lowered.adstacks))
    assert low.stack_heap is not None and low.stack_heap.binding == len(low.bindings) + 1
    prog = translate(low, name)
    check_program(ck, low, prog)
    assert "spvUnsafeArray" not in prog.source or any(h == "function" for h in low.homes)


@pytest.mark.parametrize("grad", [False, True])
def test_a_count_read_from_arrays_translates_with_its_counting_module(grad):
    """The task reads its bounds (a binding of their array); the one-thread counting module binds them and,
    last, the words its dispatch's indirect arguments are read from (ir/thread_count.py)."""
    _, _, ck = compiled_for_metal("array_bounds", grad)
    ct = ck.tasks[0]
    assert (0, "primal") in ct.lowered.bindings and (1, "primal") in ct.lowered.bindings
    count = ct.thread_count
    prog = translate(count, ct.task.name + "_count")
    words = len(ck.ir.arrays)
    assert count.bindings[-1] == (words, "primal") and count.flag_binding is None
    device = [(arg, idx) for space, _, arg, idx in prog.buffer_args if space == "device"]
    assert device[-1] == ("_launch_args", len(count.bindings) - 1)   # SPIRV-Cross drops one leading _
    assert prog.local_size == (1, 1, 1)


def test_float_atomics_become_compare_exchange_loops():
    _, _, ck = compiled_for_metal("float_atomics", False)
    src = translate(ck.tasks[0].lowered, "float_atomics").source
    assert src.count("atomic_compare_exchange_weak_explicit") == 3   # add, max and min
    assert "fast::max" in src or "max(" in src


def test_why_metal_features_exclude_native_float_atomics():
    spirv = tools.assemble(ATOMIC_FADD_MODULE)
    tools.validate(spirv)
    assert "atomicAdd(" in tr.translate_spirv(spirv, "fadd", 1, 0).source   # invalid MSL, no error reported
    assert METAL_FEATURES["atomic_float32_add"] is False


def test_int_atomics_stay_native():
    _, _, ck = compiled_for_metal("int_atomics", False)
    src = translate(ck.tasks[0].lowered, "int_atomics").source
    assert "atomic_fetch_add_explicit" in src and "atomic_fetch_max_explicit" in src
    assert "atomic_compare_exchange" not in src


@pytest.mark.parametrize("name", ["integrate", "flip", "halve_until_small"])
def test_adstacks_survive_translation(name):
    _, _, ck = compiled_for_metal(name, True)
    low = ck.tasks[0].lowered
    prog = translate(low, name)
    assert low.adstacks and low.flag_binding is not None
    adjoint_ops = (N.AdStackLoadTopAdj, N.AdStackAccAdjoint)
    adjoint_used = {s.stack for s in N.walk(ck.tasks[0].task.body) if isinstance(s, adjoint_ops)}
    for stack in low.adstacks:   # Function-scope arrays become thread-local spvUnsafeArrays
        assert re.search(rf"spvUnsafeArray<\w+, \w+> {stack.name}\w*_primal", prog.source), stack.name
        if stack in adjoint_used:   # SPIRV-Cross drops an adjoint array that is never read
            assert re.search(rf"spvUnsafeArray<\w+, \w+> {stack.name}\w*_adjoint", prog.source), stack.name
    assert "atomic_fetch_or_explicit((device atomic_uint*)&adstack_flags" in prog.source
    assert "atomic_fetch_max_explicit((device atomic_uint*)&adstack_flags" in prog.source
    for stack in (s for s in low.adstacks if s.dtype == sp.u1):   # bool entries stored as i32
        assert re.search(rf"spvUnsafeArray<int, \w+> {stack.name}\w*_primal", prog.source), stack.name


def test_spec_constant_capacities_become_macros_set_at_pipeline_creation():
    _, _, ck = compiled_for_metal("integrate", True)
    low = ck.tasks[0].lowered
    assert low.spec_ids, "the integrator's capacity depends on n: a launch-time spec constant"
    prog = translate(low, "integrate")
    for spec_id, default in low.spec_ids.items():
        # an array length: SPIRV-Cross writes a macro, not a [[function_constant]] (not constexpr in MSL)
        assert prog.spec_constants[spec_id] == ("macro", "uint")
        assert f"#define SPIRV_CROSS_CONSTANT_ID_{spec_id} {default}u" in prog.source
        src = prog.specialized_source({spec_id: 37})
        assert src.startswith(f"#define SPIRV_CROSS_CONSTANT_ID_{spec_id} 37u\n")
        assert src.index("37u") < src.index(f"#ifndef SPIRV_CROSS_CONSTANT_ID_{spec_id}")
    assert prog.function_constants({0: 37}) == []


def test_kernel_msl_joins_one_entry_point_per_task():
    k, build, _ = CASES["two_tasks"]
    args = build()
    assert k.msl(*args).count("kernel void main0(") == 2
    assert k.msl(*args, grad=True).count("kernel void main0(") == 2


def test_f64_is_refused_for_metal_with_a_clear_error():
    x = sp.ndarray(sp.f64, (4,))   # lavapipe has float64; the Metal target does not
    y = sp.ndarray(sp.f64, (4,))
    with pytest.raises(sp.SpvadError, match=r"(?s)(float64.*Metal|Metal.*float64)"):
        CASES["sin_out"][0].msl(x, y)


# ---- the mapping itself, on a module built by hand ---------------------------------------------------
SHADERS_REF = pathlib.Path(__file__).resolve().parents[3] / "shaders_ref"


def sin_grad_module():
    return tools.assemble((SHADERS_REF / "grad_sin.spvasm").read_text())


def test_push_block_collides_with_buffer0_without_the_binding_patch():
    spirv = sin_grad_module()
    raw = tools.to_msl(spirv, msl_version=tr.MSL_VERSION, extra_args=tr.MSL_OPTIONS)
    _, args = tr.parse_entry(raw)
    assert sorted(i for *_, i in args) == [0, 0, 1, 2]   # the REPORT's collision, reproduced
    with pytest.raises(MslTranslationError, match=r"share \[\[buffer\(0\)\]\]"):
        tr.check_mapping(args, 3, 3)
    patched = tr.metal_module(spirv, 3)
    assert len(patched) == len(spirv) + 16   # one OpDecorate %push Binding 3
    assert re.search(r"OpDecorate %push Binding 3", tools.disassemble(patched))
    prog = tr.translate_spirv(spirv, "grad_sin", 3, 4)
    assert [(a, i) for _, _, a, i in prog.buffer_args] == [("x", 0), ("y_grad", 1), ("x_grad", 2), ("push", 3)]


def test_check_mapping_rejects_wrong_indices():
    ok = [("device", "T", "a", 0), ("device", "T", "b", 1), ("constant", "P", "push", 2)]
    tr.check_mapping(ok, 2, 2)
    with pytest.raises(MslTranslationError, match="outside 0..1"):
        tr.check_mapping([("device", "T", "a", 5)], 2, None)
    with pytest.raises(MslTranslationError, match="expected 2"):
        tr.check_mapping([("constant", "P", "push", 0)], 2, 2)


def test_local_size_and_malformed_modules():
    assert tr.local_size_of(sin_grad_module()) == (64, 1, 1)
    with pytest.raises(MslTranslationError, match="not a SPIR-V module"):
        tr.metal_module(b"\0" * 20, 0)


FUNCTION_CONSTANT_MODULE = """
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main"
               OpExecutionMode %main LocalSize 1 1 1
               OpDecorate %sc SpecId 7
               OpDecorate %rta ArrayStride 4
               OpMemberDecorate %buf 0 Offset 0
               OpDecorate %buf Block
               OpDecorate %A DescriptorSet 0
               OpDecorate %A Binding 0
       %void = OpTypeVoid
       %fnty = OpTypeFunction %void
       %uint = OpTypeInt 32 0
        %rta = OpTypeRuntimeArray %uint
        %buf = OpTypeStruct %rta
     %p_sbuf = OpTypePointer StorageBuffer %buf
       %p_su = OpTypePointer StorageBuffer %uint
          %A = OpVariable %p_sbuf StorageBuffer
         %c0 = OpConstant %uint 0
         %sc = OpSpecConstant %uint 5
       %main = OpFunction %void None %fnty
      %entry = OpLabel
          %p = OpAccessChain %p_su %A %c0 %c0
               OpStore %p %sc
               OpReturn
               OpFunctionEnd
"""


def test_other_spec_constants_are_function_constants():
    prog = tr.translate_spirv(tools.assemble(FUNCTION_CONSTANT_MODULE), "fc", 1, 0)
    assert prog.spec_constants == {7: ("function", "uint")}
    assert "[[function_constant(7)]]" in prog.source and prog.push_index is None
    assert prog.function_constants({7: 9, 3: 1}) == [(7, "uint", struct.pack("<I", 9))]
    assert prog.specialized_source({7: 9}) == prog.source   # set through MTLFunctionConstantValues


@pytest.mark.parametrize("ty,value,text", [("uint", 64, "64u"), ("int", -3, "(-3)"), ("float", 0.5, "0.5f"),
                                           ("bool", True, "true")])
def test_macro_literals(ty, value, text):
    src = tr.specialize_source("body", {0: ("macro", ty)}, {0: value, 1: 5})
    assert src == f"#define SPIRV_CROSS_CONSTANT_ID_0 {text}\nbody"


@pytest.mark.parametrize("ty,value", [("uint", -1), ("uint", 2**32), ("int", 2**31), ("float", float("nan")),
                                      ("uint", 1.5)])
def test_macro_literals_out_of_range(ty, value):
    with pytest.raises(MslTranslationError):
        tr.specialize_source("", {0: ("macro", ty)}, {0: value})


def test_split_args_keeps_templates_and_attributes_whole():
    assert tr.split_args("device A<int, 2>& a [[buffer(0)]], uint3 g [[thread_position_in_grid]]") == \
        ["device A<int, 2>& a [[buffer(0)]]", "uint3 g [[thread_position_in_grid]]"]


def test_exact_float_arithmetic_reaches_msl_unfused():
    """fast_math=False: SPIRV-Cross turns the NoContraction products and sums into its optnone helpers
    (spvFMul = fma(a, b, 0), spvFAdd...), so Metal's compiler can neither fuse nor reassociate them."""
    k, args, _ = compiled_for_metal(next(iter(CASES)), grad=False)
    exact = sp.kernel(fast_math=False)(k.fn)
    source = exact.msl(*args, grad=True)
    assert "[[clang::optnone]]" in source and re.search(r"spvF(Mul|Add|Sub)\(", source)
    assert not re.search(r"spvF(Mul|Add|Sub)\(", k.msl(*args, grad=True))
@sp.kernel
def blend_many_dims(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, dst: sp.Array, s: sp.f32):
    for i, j in sp.ndrange(a.shape[0], a.shape[7]):
        dst[i, 0, 1, 0, 1, 0, 1, j] = s * a[i, 0, 1, 0, 1, 0, 1, j] * b[i, 0, 0, 0, 0, 0, 0, j] \
            + c[i, 0, 0, 0, 0, 0, 0, j] * d[i, 0, 1, 0, 0, 0, 0, j]


@pytest.mark.parametrize("grad", [False, True])
def test_shape_table_binding_follows_the_others(grad):
    """Extents past the push budget come from the shape table, the last [[buffer(k)]] before the push constants."""
    arrays = [sp.ndarray(sp.f32, (2, 1, 2, 1, 2, 1, 2, 3), needs_grad=True) for _ in range(5)]
    ck = blend_many_dims._compiled(blend_many_dims._bind((*arrays, 1.0))[0], "reverse" if grad else "primal",
                                   features=METAL_FEATURES)
    for ct in ck.tasks:
        low = ct.lowered
        if not low.spilled_shapes:
            continue
        prog = translate(low, ct.task.name)
        names = expected_names(ck, low) + (["print_buffer"] if low.print_binding is not None else []) + ["shape_table"]
        assert low.shape_binding == len(names) - 1 and prog.num_buffers == len(names)
        assert {idx: arg for space, _, arg, idx in prog.buffer_args if space == "device"} == dict(enumerate(names))
        assert prog.push_index == len(names)
        break
    else:
        pytest.fail("no task took its extents from the shape table")


@sp.kernel
def blend_by_value(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, dst: sp.Array, m0: sp.mat4, m1: sp.mat4,
                   m2: sp.mat4):
    for i, j in sp.ndrange(a.shape[0], a.shape[7]):
        dst[i, 0, 1, 0, 1, 0, 1, j] = sp.trace(m0 @ m1 @ m2) * a[i, 0, 1, 0, 1, 0, 1, j] * b[i, 0, 0, 0, 0, 0, 0, j] \
            + c[i, 0, 0, 0, 0, 0, 0, j] * d[i, 0, 1, 0, 0, 0, 0, j]


@pytest.mark.parametrize("grad", [False, True])
def test_scalar_table_binding_follows_the_shape_table(grad):
    """Scalars past the push budget (three mat4 by value: 192 bytes) come from the scalar table, bound after
    the shape table, the last [[buffer(k)]] before the push constants."""
    arrays = [sp.ndarray(sp.f32, (2, 1, 2, 1, 2, 1, 2, 3), needs_grad=True) for _ in range(5)]
    mats = [sp.mat4.identity()] * 3
    ck = blend_by_value._compiled(blend_by_value._bind((*arrays, *mats))[0], "reverse" if grad else "primal",
                                  features=METAL_FEATURES)
    for ct in ck.tasks:
        low = ct.lowered
        if not (low.spilled_scalars and low.spilled_shapes):
            continue
        prog = translate(low, ct.task.name)
        names = expected_names(ck, low) + (["print_buffer"] if low.print_binding is not None else []) + \
            ["shape_table", "scalar_table"]
        assert (low.shape_binding, low.scalar_binding) == (len(names) - 2, len(names) - 1)
        assert prog.num_buffers == len(names) and low.push_size <= 128
        assert {idx: arg for space, _, arg, idx in prog.buffer_args if space == "device"} == dict(enumerate(names))
        assert prog.push_index == len(names)
        break
    else:
        pytest.fail("no task took its scalars from the scalar table")

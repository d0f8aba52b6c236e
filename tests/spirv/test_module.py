"""The SPIR-V builder and the Khronos tool wrappers: a complete compute shader validated by spirv-val,
de-duplication, literal encodings, local-variable hoisting and the error paths."""
import os
import struct

import pytest

from spvad.errors import SpirvValidationError, SpvadError
from spvad.spirv import tools
from spvad.spirv.module import Module, literal_string
from spvad.spirv.spec import (GLSL, MAGIC, VERSION_1_3, BuiltIn, Capability, Decoration, ExecutionMode,
                              ExecutionModel, LoopControl, Op, SelectionControl, StorageClass)


def build_sin_kernel(local_late=True):
    """out[i] = sum_{k<4} sin(in[i]) * k for i < n: buffers, push constant, builtin, if, loop, GLSL."""
    m = Module(version=(1, 3))
    m.capability(Capability.Shader)
    glsl = m.ext_inst_import("GLSL.std.450")
    void, boolean = m.type_void(), m.type_bool()
    u32, f32 = m.type_int(32, False), m.type_float(32)
    v3u32 = m.type_vector(u32, 3)

    rta = m.type_runtime_array(f32)
    m.decorate(rta, Decoration.ArrayStride, 4)
    buf = m.type_struct([rta], unique=True)
    m.decorate(buf, Decoration.Block)
    m.member_decorate(buf, 0, Decoration.Offset, 0)
    m.name(buf, "Buffer")
    buf_ptr = m.type_pointer(StorageClass.StorageBuffer, buf)
    elem_ptr = m.type_pointer(StorageClass.StorageBuffer, f32)
    buffers = []
    for binding, name in enumerate(["x", "y"]):
        var = m.variable(buf_ptr, StorageClass.StorageBuffer)
        m.decorate(var, Decoration.DescriptorSet, 0)
        m.decorate(var, Decoration.Binding, binding)
        m.name(var, name)
        buffers.append(var)

    pc_struct = m.type_struct([u32], unique=True)
    m.decorate(pc_struct, Decoration.Block)
    m.member_decorate(pc_struct, 0, Decoration.Offset, 0)
    m.member_name(pc_struct, 0, "n")
    pc = m.variable(m.type_pointer(StorageClass.PushConstant, pc_struct), StorageClass.PushConstant)
    pc_u32_ptr = m.type_pointer(StorageClass.PushConstant, u32)

    gid = m.variable(m.type_pointer(StorageClass.Input, v3u32), StorageClass.Input)
    m.decorate(gid, Decoration.BuiltIn, BuiltIn.GlobalInvocationId)

    f = m.function(void, m.type_function(void, []))
    m.name(f.id, "main")
    m.entry_point(ExecutionModel.GLCompute, f.id, "main", [gid])
    m.execution_mode(f.id, ExecutionMode.LocalSize, 64, 1, 1)

    zero_u, one_u, four_u = m.const(u32, 0), m.const(u32, 1), m.const(u32, 4)
    fn_f32, fn_u32 = m.type_pointer(StorageClass.Function, f32), m.type_pointer(StorageClass.Function, u32)
    f.begin_block(f.new_label())
    if not local_late:
        acc, k = f.local_variable(fn_f32), f.local_variable(fn_u32)
    i = f.emit(Op.OpCompositeExtract, u32, f.emit(Op.OpLoad, v3u32, gid), 0)
    n = f.emit(Op.OpLoad, u32, f.emit(Op.OpAccessChain, pc_u32_ptr, pc, zero_u))
    in_range = f.emit(Op.OpULessThan, boolean, i, n)
    then_label, end_label = f.new_label(), f.new_label()
    f.emit_void(Op.OpSelectionMerge, end_label, SelectionControl.NONE)
    f.emit_void(Op.OpBranchConditional, in_range, then_label, end_label)

    f.begin_block(then_label)
    if local_late:  # requested in a later block: must still land in the entry block
        acc, k = f.local_variable(fn_f32), f.local_variable(fn_u32)
    x = f.emit(Op.OpLoad, f32, f.emit(Op.OpAccessChain, elem_ptr, buffers[0], zero_u, i))
    s = f.ext_inst(f32, glsl, GLSL.Sin, x)
    f.emit_void(Op.OpStore, acc, m.const(f32, 0.0))
    f.emit_void(Op.OpStore, k, zero_u)
    header, cond, body, cont, merge = (f.new_label() for _ in range(5))
    f.emit_void(Op.OpBranch, header)
    f.begin_block(header)
    f.emit_void(Op.OpLoopMerge, merge, cont, LoopControl.NONE)
    f.emit_void(Op.OpBranch, cond)
    f.begin_block(cond)
    kv = f.emit(Op.OpLoad, u32, k)
    f.emit_void(Op.OpBranchConditional, f.emit(Op.OpULessThan, boolean, kv, four_u), body, merge)
    f.begin_block(body)
    term = f.emit(Op.OpFMul, f32, s, f.emit(Op.OpConvertUToF, f32, kv))
    f.emit_void(Op.OpStore, acc, f.emit(Op.OpFAdd, f32, f.emit(Op.OpLoad, f32, acc), term))
    f.emit_void(Op.OpBranch, cont)
    f.begin_block(cont)
    f.emit_void(Op.OpStore, k, f.emit(Op.OpIAdd, u32, f.emit(Op.OpLoad, u32, k), one_u))
    f.emit_void(Op.OpBranch, header)
    f.begin_block(merge)
    out_ptr = f.emit(Op.OpAccessChain, elem_ptr, buffers[1], zero_u, i)
    f.emit_void(Op.OpStore, out_ptr, f.emit(Op.OpLoad, f32, acc))
    f.emit_void(Op.OpBranch, end_label)
    f.begin_block(end_label)
    f.emit_void(Op.OpReturn)
    f.end()
    return m


def function_lines(text):
    lines = [ln.strip() for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if "OpFunction " in ln)
    return lines[start:]


@pytest.mark.parametrize("local_late", [True, False])
def test_compute_kernel_validates(local_late):
    m = build_sin_kernel(local_late)
    data = m.to_bytes()
    assert struct.unpack("<5I", data[:20])[:4] == (MAGIC, VERSION_1_3, 0, m.bound)
    tools.validate(data, kernel_name="sin_kernel")
    text = tools.disassemble(data)
    for needle in ["OpCapability Shader", 'OpExtInstImport "GLSL.std.450"', "OpEntryPoint GLCompute",
                   "OpExecutionMode %main LocalSize 64 1 1", "OpDecorate %x DescriptorSet 0",
                   "OpDecorate %y Binding 1", "ArrayStride 4", "Block", "BuiltIn GlobalInvocationId",
                   "OpSelectionMerge", "OpBranchConditional", "OpLoopMerge", "Sin", "OpFAdd",
                   "OpTypeRuntimeArray", "PushConstant", "OpReturn"]:
        assert needle in text, needle
    body = function_lines(text)
    # OpFunction, OpLabel, then both Function-scope variables before any other instruction.
    assert body[1].endswith("OpLabel")
    assert "OpVariable" in body[2] and "Function" in body[2]
    assert "OpVariable" in body[3] and "Function" in body[3]
    assert all("OpVariable" not in ln for ln in body[4:])


def test_types_and_constants_are_deduplicated():
    m = Module()
    u32, f32 = m.type_int(32, False), m.type_float(32)
    assert m.type_int(32, False) == u32 and m.type_int(32, True) != u32 and f32 != u32
    assert m.type_vector(f32, 3) == m.type_vector(f32, 3) != m.type_vector(f32, 4)
    assert m.type_pointer(StorageClass.Function, f32) == m.type_pointer(StorageClass.Function, f32)
    assert m.type_pointer(StorageClass.Private, f32) != m.type_pointer(StorageClass.Function, f32)
    assert m.type_struct([f32, u32]) == m.type_struct([f32, u32])
    assert m.type_struct([f32, u32], unique=True) != m.type_struct([f32, u32])
    assert m.type_array(f32, 8) == m.type_array(f32, length_id=m.const(u32, 8))
    assert m.type_function(m.type_void(), [f32]) == m.type_function(m.type_void(), [f32])
    assert m.const(u32, 1) == m.const(u32, 1) != m.const(f32, 1.0)
    assert m.const(f32, 0.0) != m.const(f32, -0.0)   # keyed by bit pattern, not by Python equality
    assert m.const_bool(True) == m.const_bool(1) != m.const_bool(False)
    assert m.ext_inst_import("GLSL.std.450") == m.ext_inst_import("GLSL.std.450")
    parts = [m.const(f32, 1.0), m.const(f32, 2.0)]
    v2 = m.type_vector(f32, 2)
    assert m.const_composite(v2, parts) == m.const_composite(v2, parts)
    assert m.spec_const(u32, 64, 0) != m.spec_const(u32, 64, 1)
    assert m.type_info(u32) == ("int", 32, False) and m.type_info(v2) == ("vector", f32, 2)


def constant_words(m, cid):
    """Literal words of the OpConstant defining `cid`."""
    words = m.words()[5:]
    pos = 0
    while pos < len(words):
        count, opcode = words[pos] >> 16, words[pos] & 0xFFFF
        if opcode == Op.OpConstant and words[pos + 2] == cid:
            return list(words[pos + 3:pos + count])
        pos += count
    raise KeyError(cid)


def test_wide_and_narrow_constant_encoding():
    m = Module()
    m.capability(Capability.Shader)
    m.capability(Capability.Linkage)
    f64, i64, u64 = m.type_float(64), m.type_int(64, True), m.type_int(64, False)
    i32, f32 = m.type_int(32, True), m.type_float(32)
    assert constant_words(m, m.const(f64, 1.0)) == [0, 0x3FF00000]  # low-order word first
    assert constant_words(m, m.const(f64, -2.5)) == list(struct.unpack("<2I", struct.pack("<d", -2.5)))
    assert constant_words(m, m.const(i64, -2)) == [0xFFFFFFFE, 0xFFFFFFFF]
    assert constant_words(m, m.const(u64, 1 << 40 | 7)) == [7, 1 << 8]
    assert constant_words(m, m.const(i32, -1)) == [0xFFFFFFFF]
    assert constant_words(m, m.const(f32, 1.5)) == [0x3FC00000]
    spec = m.spec_const(f64, 0.25, 3)
    with pytest.raises(ValueError):
        m.const(i32, 1 << 32)
    data = m.to_bytes()
    tools.validate(data, "constants", target_env="spv1.3")
    text = tools.disassemble(data)
    assert "Float64" in text and "Int64" in text  # capabilities declared with the types
    for needle in ["OpConstant %double 1", "OpConstant %double -2.5", "OpConstant %long -2",
                   "OpConstant %ulong 1099511627783", f"OpDecorate %{spec} SpecId 3",
                   "OpSpecConstant %double 0.25"]:
        assert needle in text, needle


@pytest.mark.parametrize("text, words", [
    ("", [0]),
    ("abc", [0x00636261]),
    ("main", [0x6E69616D, 0]),
    ("GLSL.std.450", [0x4C534C47, 0x6474732E, 0x3035342E, 0]),
    ("é", [0x0000A9C3]),
])
def test_literal_string_encoding(text, words):
    assert literal_string(text) == words


def test_local_variable_words_follow_entry_label():
    m = Module()
    void, f32 = m.type_void(), m.type_float(32)
    ptr = m.type_pointer(StorageClass.Function, f32)
    f = m.function(void, m.type_function(void))
    entry = f.begin_block()
    f.emit_void(Op.OpStore, f.local_variable(ptr), m.const(f32, 1.0))
    f.emit_void(Op.OpBranch, second := f.new_label())
    f.begin_block(second)
    late = f.local_variable(ptr)
    f.emit_void(Op.OpReturn)
    f.end()
    words = f.words()
    label_at = words.index((2 << 16) | Op.OpLabel)
    assert words[label_at + 1] == entry
    assert words[label_at + 2] == (4 << 16) | Op.OpVariable
    assert words[label_at + 6] == (4 << 16) | Op.OpVariable and words[label_at + 8] == late


def test_builder_rejects_misuse():
    m = Module()
    void = m.type_void()
    f = m.function(void, m.type_function(void))
    with pytest.raises(ValueError, match="outside a block"):
        f.emit_void(Op.OpReturn)
    f.begin_block()
    with pytest.raises(ValueError, match="emit_void"):
        f.emit(Op.OpStore, void, 1, 2)
    with pytest.raises(ValueError, match="use emit"):
        f.emit_void(Op.OpFAdd, 1, 2, 3)
    with pytest.raises(ValueError, match="not ended"):
        m.words()


def broken_module():
    """OpFAdd on integer operands: well-formed words that spirv-val must reject."""
    m = Module()
    m.capability(Capability.Shader)
    void, i32 = m.type_void(), m.type_int(32, True)
    f = m.function(void, m.type_function(void))
    m.entry_point(ExecutionModel.GLCompute, f.id, "main")
    m.execution_mode(f.id, ExecutionMode.LocalSize, 1, 1, 1)
    f.begin_block()
    f.emit(Op.OpFAdd, i32, m.const(i32, 1), m.const(i32, 2))
    f.emit_void(Op.OpReturn)
    f.end()
    return m.to_bytes()


def test_validate_raises_with_kernel_name_and_tool_output():
    with pytest.raises(SpirvValidationError) as info:
        tools.validate(broken_module(), kernel_name="my_broken_kernel")
    message = str(info.value)
    assert "my_broken_kernel" in message and "OpFAdd" in message and "error" in message


def test_assemble_roundtrip_and_errors():
    data = build_sin_kernel().to_bytes()
    again = tools.assemble(tools.disassemble(data, ["--raw-id"]), extra_args=["--preserve-numeric-ids"])
    assert again[:8] == data[:8] and again[12:] == data[12:]  # only the generator word differs
    friendly = tools.assemble(tools.disassemble(data))  # friendly names: ids renumbered, same module
    tools.validate(friendly, "reassembled")
    assert tools.disassemble(friendly, ["--no-header"]).count("\n") == tools.disassemble(data).count("\n") - 5
    with pytest.raises(SpvadError, match="spirv-as"):
        tools.assemble("OpCapability NotACapability\n")


def test_to_msl():
    msl = tools.to_msl(build_sin_kernel().to_bytes())
    assert "kernel void" in msl and "sin(" in msl
    with pytest.raises(SpvadError, match="spirv-cross"):
        tools.to_msl(b"\x03\x02\x23\x07garbage!")


def test_tools_many_calls_do_not_leak_descriptors():
    data = build_sin_kernel().to_bytes()
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(50):
        tools.validate(data, "loop")
        with pytest.raises(SpirvValidationError):
            tools.validate(broken_module(), "loop")
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


def test_missing_tool_names_the_package(monkeypatch):
    monkeypatch.setattr(tools, "_found", {})
    monkeypatch.setenv("PATH", "")
    with pytest.raises(SpvadError, match="apt install spirv-tools"):
        tools.validate(b"", "k")
    with pytest.raises(SpvadError, match="brew install spirv-cross"):
        tools.to_msl(b"")

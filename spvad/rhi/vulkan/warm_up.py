"""A CPU driver's first dispatch in a process sets up its shader compiler (lavapipe: LLVM, its shader cache):
an empty shader dispatched as the device opens, which no sync waits for, lets the driver do that on its own
thread while Python goes on (host writes, the first kernel's compile), as Taichi and Quadrants do in init."""
import os
import struct

from ...spirv.spec import (MAGIC, VERSION_1_0, AddressingModel, Capability, ExecutionMode, ExecutionModel,
                           MemoryModel, Op)


def _instruction(op, *operands):
    return ((1 + len(operands)) << 16 | op, *operands)


MAIN, VOID, FUNCTION_TYPE, LABEL = 1, 2, 3, 4   # the module's ids
_WORDS = (
    MAGIC, VERSION_1_0, 0, 5, 0,   # generator 0, id bound 5, schema 0
    *_instruction(Op.OpCapability, Capability.Shader),
    *_instruction(Op.OpMemoryModel, AddressingModel.Logical, MemoryModel.GLSL450),
    *_instruction(Op.OpEntryPoint, ExecutionModel.GLCompute, MAIN, *struct.unpack("<2I", b"main\0\0\0\0")),
    *_instruction(Op.OpExecutionMode, MAIN, ExecutionMode.LocalSize, 1, 1, 1),
    *_instruction(Op.OpTypeVoid, VOID),
    *_instruction(Op.OpTypeFunction, FUNCTION_TYPE, VOID),
    *_instruction(Op.OpFunction, VOID, MAIN, 0, FUNCTION_TYPE),
    *_instruction(Op.OpLabel, LABEL),
    *_instruction(Op.OpReturn),
    *_instruction(Op.OpFunctionEnd),
)
EMPTY_SHADER = struct.pack(f"<{len(_WORDS)}I", *_WORDS)   # void main() {} with local size 1


def wanted():
    """Not with Mesa's shader cache off: then LLVM compiles the empty shader in every process, which costs
    more than the head start gains (lavapipe, integrator's cold first forward: 55 -> 62 ms, init -3 ms)."""
    return os.environ.get("MESA_SHADER_CACHE_DISABLE", "").strip().lower() in ("", "0", "false", "no", "n", "f")


def warm_up(device):
    """Dispatch the empty shader on `device` (a VulkanDevice); nothing waits for it but the device's close."""
    pipeline = device.create_pipeline(EMPTY_SHADER, name="(driver warm-up)", num_buffers=0, push_constant_size=0)
    device.submit_alone(pipeline, (1, 1, 1))

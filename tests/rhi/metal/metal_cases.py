"""Shared by the Metal tests: `mac` (marks and skips tests that need macOS with Metal) and a representative
set of kernels (forward, gradient, adstacks, atomics, bools, 0-d arrays, several tasks) with their arguments."""
import sys

import numpy as np
import pytest

import spvad as sp
from tests import common_kernels

# A test that needs macOS with a Metal GPU and pyobjc-framework-Metal: marked `mac`, skipped elsewhere.
MAC_REASON = "needs macOS with a Metal GPU and pyobjc-framework-Metal"


def mac(test):
    return pytest.mark.mac(pytest.mark.skipif(sys.platform != "darwin", reason=MAC_REASON)(test))


@sp.kernel
def saxpy(x: sp.Array, y: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


sin_out = sp.kernel(common_kernels.sin_out)
integrate = sp.kernel(common_kernels.sin_steps)
flip = sp.kernel(common_kernels.flip)
halve_until_small = sp.kernel(common_kernels.halve_until_small)


@sp.kernel
def float_atomics(x: sp.Array, total: sp.Array, hi: sp.Array, lo: sp.Array):
    for i in range(x.shape[0]):
        total[None] += x[i] * x[i]
        sp.atomic_max(hi[None], x[i])
        sp.atomic_min(lo[None], x[i])


@sp.kernel
def int_atomics(x: sp.Array, count: sp.Array, top: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            count[()] += 1
        sp.atomic_max(top[()], i)


@sp.kernel
def bool_mask(x: sp.Array, mask: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        mask[i] = x[i] > 0.0
        y[i] = x[i] if mask[i] else -x[i]


@sp.kernel
def two_tasks(x: sp.Array, y: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]
    for i in range(x.shape[0]):
        loss[None] += sp.exp(y[i])


@sp.kernel
def grid_2d(a: sp.Array, b: sp.Array):
    for i, j in sp.ndrange(a.shape[0], a.shape[1]):
        b[i, j] = a[i, j] * sp.cos(a[j % a.shape[0], i % a.shape[1]])


@sp.kernel
def serial_then_parallel(x: sp.Array, loss: sp.Array, c: sp.f32):
    loss[None] = c
    for i in range(x.shape[0]):
        loss[None] += c * x[i]


@sp.kernel
def int_powers(x: sp.Array, n: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] ** n[i] + x[i] ** 40   # Op.POWI: a runtime and a large constant exponent


@sp.kernel
def array_bounds(n: sp.Array, b: sp.Array, x: sp.Array, y: sp.Array):
    for i in range(b[0], b[1] - n[None], 2):   # the count is read from arrays: a counting module too
        y[i] = sp.sin(x[i]) * x[i]


@sp.kernel
def vector_rows(x: sp.Array, M: sp.Array, idx: sp.Array, grid: sp.Array):
    for i in range(x.shape[0]):   # vec2 / mat2 elements: vector views (spirv/lower_vectors.py), atomics on components
        grid[idx[i]] += M[i] @ x[i] * x[i][0]


def f32(n, needs_grad=False, lo=0.2):
    rng = np.random.default_rng(n)
    data = (rng.uniform(lo, 1.5, n) * np.where(rng.random(n) < 0.5, -1, 1)).astype(np.float32)
    return sp.from_numpy(data, needs_grad=needs_grad)


def scalar(needs_grad=False):
    return sp.ndarray(sp.f32, (), needs_grad=needs_grad)


# name -> (kernel, builder of its arguments, whether its gradient is part of the set)
CASES = {
    "saxpy": (saxpy, lambda: (f32(50, True), f32(50, True), 2.0), True),
    "sin_out": (sin_out, lambda: (f32(50, True), f32(50, True)), True),
    "integrate": (integrate, lambda: (f32(50, True), f32(50, True), 0.3, 5), True),
    "flip": (flip, lambda: (f32(50, True), f32(50, True), 4), True),
    "halve_until_small": (halve_until_small, lambda: (f32(50, True), f32(50, True)), True),
    "float_atomics": (float_atomics, lambda: (f32(50, True), scalar(True), scalar(True), scalar(True)), True),
    "int_atomics": (int_atomics, lambda: (f32(50), sp.ndarray(sp.i32, ()), sp.ndarray(sp.i32, ())), False),
    "bool_mask": (bool_mask, lambda: (f32(50, True), sp.ndarray(sp.u1, (50,)), f32(50, True)), True),
    "two_tasks": (two_tasks, lambda: (f32(50, True), f32(50, True), scalar(True)), True),
    "grid_2d": (grid_2d, lambda: (sp.from_numpy(np.ones((6, 7), np.float32), needs_grad=True),
                                  sp.ndarray(sp.f32, (6, 7), needs_grad=True)), True),
    "serial_then_parallel": (serial_then_parallel, lambda: (f32(50, True), scalar(True), 0.5), True),
    "int_powers": (int_powers, lambda: (f32(50, True), sp.from_numpy(np.arange(-25, 25, dtype=np.int32) % 17 - 7),
                                        f32(50, True)), True),
    "vector_rows": (vector_rows, lambda: (
        sp.from_numpy(np.ones((50, 2), np.float32), dtype=sp.vec2, needs_grad=True),
        sp.from_numpy(np.ones((50, 2, 2), np.float32), dtype=sp.mat2, needs_grad=True),
        sp.from_numpy(np.arange(50, dtype=np.int32) % 7), sp.ndarray(sp.vec2, (7,), needs_grad=True)), True),
    "array_bounds": (array_bounds, lambda: (sp.from_numpy(np.array(7, np.int32)),
                                            sp.from_numpy(np.array([1, 50], np.int32)), f32(50, True),
                                            f32(50, True)), True),
}


# A float atomic add as the lowering emits it for devices with VK_EXT_shader_atomic_float: SPIRV-Cross 2021.01
# turns it into GLSL's `atomicAdd(`, which is not MSL (why METAL_FEATURES asks for compare-exchange loops).
ATOMIC_FADD_MODULE = """
               OpCapability Shader
               OpCapability AtomicFloat32AddEXT
               OpExtension "SPV_EXT_shader_atomic_float_add"
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main"
               OpExecutionMode %main LocalSize 1 1 1
               OpDecorate %rta ArrayStride 4
               OpMemberDecorate %buf 0 Offset 0
               OpDecorate %buf Block
               OpDecorate %A DescriptorSet 0
               OpDecorate %A Binding 0
       %void = OpTypeVoid
       %fnty = OpTypeFunction %void
      %float = OpTypeFloat 32
       %uint = OpTypeInt 32 0
        %rta = OpTypeRuntimeArray %float
        %buf = OpTypeStruct %rta
     %p_sbuf = OpTypePointer StorageBuffer %buf
       %p_sf = OpTypePointer StorageBuffer %float
          %A = OpVariable %p_sbuf StorageBuffer
         %c0 = OpConstant %uint 0
     %device = OpConstant %uint 1
    %relaxed = OpConstant %uint 0
        %one = OpConstant %float 1
       %main = OpFunction %void None %fnty
      %entry = OpLabel
          %p = OpAccessChain %p_sf %A %c0 %c0
        %old = OpAtomicFAddEXT %float %p %device %relaxed %one
               OpReturn
               OpFunctionEnd
"""

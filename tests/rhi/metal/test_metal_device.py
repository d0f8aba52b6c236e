"""MetalDevice: its pure logic on every platform (device choice, info, group folding, errors and hints), and
the device itself on macOS (marked `mac`): buffers, pipelines from SPIR-V, spec constants, failures, runtime."""
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

import spvad as sp
from metal_cases import ATOMIC_FADD_MODULE, mac
from spvad.errors import DeviceError, PipelineCreationError
from spvad.rhi.metal import device as md
from spvad.rhi.metal import program as mp
from spvad.spirv import tools

SHADERS_REF = pathlib.Path(__file__).resolve().parents[3] / "shaders_ref"


# ---- pure logic (Linux CI) -------------------------------------------------------------------------------
@pytest.mark.parametrize("groups,max_x,want", [(1, 65535, (1, 1, 1)), (65535, 65535, (65535, 1, 1)),
                                               (65536, 65535, (65535, 2, 1)), (200000, 1000, (1000, 200, 1)),
                                               (0, 65535, (0, 1, 1))])
def test_fold_groups(groups, max_x, want):
    gx, gy, gz = mp.fold_groups(groups, max_x)
    assert (gx, gy, gz) == want
    assert gx * gy >= groups and gx * (gy - 1) < max(groups, 1)   # covers all, at most one partial row


def test_fold_groups_too_many():
    with pytest.raises(DeviceError, match="do not fit"):
        mp.fold_groups(10**6, 100)


def test_select_device():
    names = ["Apple M2 Pro", "AMD Radeon Pro 5500M"]
    assert md.select_device(names, None, default_index=1) == 1
    assert md.select_device(names, 0) == 0
    assert md.select_device(names, "radeon") == 1
    for bad in (2, -1, "nvidia", True):
        with pytest.raises(DeviceError, match=r"no Metal device matches .*\[0\] Apple M2 Pro"):
            md.select_device(names, bad)


def test_make_info_has_the_vulkan_fields():
    info = md.make_info("Apple M2", True, (1024, 1024, 1024), 2**33, 32768)
    assert info["backend"] == "metal" and info["device_type"] == "integrated_gpu"
    assert set(info["limits"]) >= {"max_workgroup_count", "max_workgroup_invocations", "max_workgroup_size",
                                   "max_push_constants_size", "max_storage_buffer_range", "subgroup_size",
                                   "max_memory_allocation_size"}
    assert info["limits"]["max_workgroup_count"][0] == 65535   # the runtime folds launches with it
    assert info["features"] == {"float64": False, "int64": False, "atomic_float32_add": False,
                                "int64_atomics": False}
    assert md.make_info("AMD", False, (1024, 1024, 1024), 2**30, 65536)["device_type"] == "discrete_gpu"


@pytest.mark.parametrize("text,hint", [("Compiler encountered an internal error: stack size exceeded", True),
                                       ("use of undeclared identifier 'atomicAdd'", False)])
def test_pipeline_error_names_kernel_backend_and_hints(text, hint):
    err = mp.pipeline_error("step", "newLibraryWithSource", text)
    assert isinstance(err, PipelineCreationError) and isinstance(err, sp.SpvadError)
    assert "kernel 'step'" in str(err) and "backend metal" in str(err) and text in str(err)
    assert (err.kernel, err.backend, err.driver_messages) == ("step", "metal", [text])
    assert ("lower ad_stack_size" in str(err)) == hint


def test_too_few_threads_per_threadgroup_is_a_pipeline_error():
    mp.check_threads("k", (128, 1, 1), 1024)
    with pytest.raises(PipelineCreationError, match=r"allows 64 threads .* compiled for 128.*ad_stack_size"):
        mp.check_threads("k", (128, 1, 1), 64)


def test_error_text():
    class NSError:
        def localizedDescription(self):
            return "program_source:3:5: error: bad"
    assert mp.error_text(NSError()) == "program_source:3:5: error: bad"
    assert mp.error_text(None) == "no error object returned"
    assert mp.error_text(ValueError("x")) == "x"


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the error where Metal is missing")
def test_metal_device_elsewhere_is_a_clear_device_error():
    with pytest.raises(DeviceError, match=r"pyobjc-framework-Metal.*|Metal exists only on macOS"):
        md.MetalDevice()


def test_importing_the_metal_backend_loads_no_metal():
    code = ("import sys, spvad.rhi.metal.device, spvad.rhi.metal.program, spvad.rhi.metal.translate; "
            "print(sorted(m for m in ('Metal', 'objc', 'vulkan') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- the device's glue, on a recording stand-in for pyobjc's Metal (every platform) ----------------------
class FakeMetal:
    """Just enough of pyobjc's `Metal` to drive MetalDevice: objects record the calls made on them; the
    "compiler" refuses MSL containing `atomicAdd(` and a pipeline takes at most `max_threads` threads."""
    MTLResourceStorageModeShared, MTLLanguageVersion2_1, MTLCommandBufferStatusError = 0, 131073, 5
    MTLDataTypeUInt, MTLDataTypeInt, MTLDataTypeFloat, MTLDataTypeBool = 33, 29, 3, 53
    MTLMathModeSafe, MTLMathFloatingPointFunctionsPrecise = 0, 1

    def __init__(self, max_threads=1024):
        self.calls, self.max_threads, self.sources = [], max_threads, []
        fake = self

        class Obj:
            def __init__(self, kind, **attrs):
                self.__dict__.update(attrs, kind=kind)

            def __getattr__(self, name):   # any other method: record it, return a new object
                return lambda *a: fake.calls.append((self.kind, name, a)) or Obj(name)

        class Size:
            width = height = depth = 1024
        self.Obj, self.Size = Obj, Size
        self.device = Obj("device", name=lambda: "Fake GPU", registryID=lambda: 7, hasUnifiedMemory=lambda: True,
                          maxThreadsPerThreadgroup=lambda: Size(), maxBufferLength=lambda: 2**30,
                          maxThreadgroupMemoryLength=lambda: 32768, newBufferWithLength_options_=self._buffer,
                          newLibraryWithSource_options_error_=self._library,
                          newComputePipelineStateWithFunction_error_=lambda f, e: (
                              Obj("state", maxTotalThreadsPerThreadgroup=lambda: self.max_threads), None))
        self.MTLCompileOptions = self.MTLFunctionConstantValues = Obj("class", new=lambda: Obj("options"))

    def _buffer(self, size, options):
        memory = memoryview(bytearray(b"\xff" * size))   # not zeroed: create_buffer must zero it
        return self.Obj("buffer", contents=lambda: self.Obj("ptr", as_buffer=lambda n: memory[:n]))

    def _library(self, source, options, error):
        self.sources.append(source)
        if "atomicAdd(" in source:
            return None, self.Obj("error", localizedDescription=lambda: "use of undeclared identifier 'atomicAdd'")
        function = (lambda name, values, error: (self.Obj(name), None))
        return self.Obj("library", newFunctionWithName_constantValues_error_=function), None

    def MTLCopyAllDevices(self):
        return [self.device]

    def MTLCreateSystemDefaultDevice(self):
        return self.device

    def MTLSizeMake(self, *xyz):
        return xyz


@pytest.fixture
def fake_metal(monkeypatch):
    fake = FakeMetal()
    monkeypatch.setattr(md, "import_metal", lambda: fake)
    return fake


def test_a_buffer_past_max_buffer_length_is_refused(fake_metal):
    """Metal binds a buffer whole up to maxBufferLength (its binding range and largest allocation alike):
    no addressed buffers there, and a larger array gets a DeviceError naming the limit."""
    dev = md.MetalDevice()
    limits = dev.info["limits"]
    assert limits["max_storage_buffer_range"] == limits["max_memory_allocation_size"] == 2**30
    assert not dev.create_buffer(2**20).addressed
    with pytest.raises(sp.DeviceError, match="maxBufferLength"):
        dev.create_buffer(2**30 + 16)


def test_glue_binds_buffers_push_constants_and_spec_constants(fake_metal):
    dev = md.MetalDevice()
    assert dev.info["name"] == "Fake GPU" and dev.validation_messages() == []
    bufs = [dev.create_buffer(40) for _ in range(4)]
    assert not bufs[0].view(np.uint8).any()
    pipe = dev.create_pipeline(reference("adstack_f32"), name="adstack_f32", num_buffers=4,
                               push_constant_size=12, spec_constants={0: 9})
    assert fake_metal.sources[-1].startswith("#define SPIRV_CROSS_CONSTANT_ID_0 9u\n")
    push = struct.pack("<fii", 0.3, 5, 10)
    dev.launch(pipe, bufs, push, (1, 1, 1))
    dev.sync()
    calls = [(name, args) for kind, name, args in fake_metal.calls if kind == "computeCommandEncoder"]
    assert [a[2] for n, a in calls if n == "setBuffer_offset_atIndex_"] == [0, 1, 2, 3]
    assert ("setBytes_length_atIndex_", (push, 12, 4)) in calls   # push constants at [[buffer(n)]]
    assert ("dispatchThreadgroups_threadsPerThreadgroup_", ((1, 1, 1), (64, 1, 1))) in calls
    assert [n for n, _ in calls][-1] == "endEncoding"
    cmd_calls = [n for k, n, _ in fake_metal.calls if k == "commandBuffer"]
    assert cmd_calls == ["computeCommandEncoder", "commit", "waitUntilCompleted", "status"]
    with pytest.raises(DeviceError, match="binds 4 buffers"):
        dev.launch(pipe, bufs[:3], push, (1, 1, 1))
    with pytest.raises(DeviceError, match="exceed"):
        dev.launch(pipe, bufs, push, (70000, 1, 1))
    dev.close()
    with pytest.raises(DeviceError, match="closed"):
        dev.create_buffer(4)


def test_glue_dispatches_indirectly_from_the_words_buffer(fake_metal):
    dev = md.MetalDevice()
    bufs = [dev.create_buffer(40) for _ in range(4)]
    words = dev.create_buffer(32)
    pipe = dev.create_pipeline(reference("adstack_f32"), name="adstack_f32", num_buffers=4,
                               push_constant_size=12, spec_constants={0: 9})
    push = struct.pack("<fii", 0.3, 5, 10)
    dev.launch_indirect(pipe, bufs, push, words, 12)
    dev.sync()
    calls = [(name, args) for kind, name, args in fake_metal.calls if kind == "computeCommandEncoder"]
    assert [a[2] for n, a in calls if n == "setBuffer_offset_atIndex_"] == [0, 1, 2, 3]
    assert ("setBytes_length_atIndex_", (push, 12, 4)) in calls
    indirect = [a for n, a in calls if n == "dispatchThreadgroupsWithIndirectBuffer_indirectBufferOffset_"
                                              "threadsPerThreadgroup_"]
    assert indirect == [(words._mtl, 12, (64, 1, 1))]
    with pytest.raises(DeviceError, match="indirect arguments at byte 24"):
        dev.launch_indirect(pipe, bufs, push, words, 24)
    dev.close()


def test_glue_turns_failures_into_pipeline_errors(fake_metal):
    dev = md.MetalDevice()
    with pytest.raises(PipelineCreationError, match=r"kernel 'fadd' \(backend metal\): newLibraryWithSource "
                                                    r"failed: use of undeclared identifier 'atomicAdd'"):
        dev.create_pipeline(tools.assemble(ATOMIC_FADD_MODULE), name="fadd", num_buffers=1, push_constant_size=0)
    with pytest.raises(PipelineCreationError, match="SPIR-V -> MSL translation"):
        dev.create_pipeline(b"\x03\x02\x23\x07" + bytes(16), name="bad", num_buffers=0, push_constant_size=0)
    fake_metal.max_threads = 32   # big private arrays lower this on real GPUs
    with pytest.raises(PipelineCreationError, match="allows 32 threads.*ad_stack_size"):
        dev.create_pipeline(reference("grad_sin"), name="grad_sin", num_buffers=3, push_constant_size=4)
    fake_metal.max_threads = 1024
    dev.create_pipeline(reference("grad_sin"), name="grad_sin", num_buffers=3, push_constant_size=4)


def test_glue_compiles_without_fast_math_when_asked(fake_metal):
    """fast_math=False: MTLCompileOptions with fastMathEnabled off (and, where the newer API exists, the
    safe math mode with precise functions); the default leaves Metal's fast math on."""
    dev = md.MetalDevice()
    for fast in (True, False):
        fake_metal.calls.clear()
        dev.create_pipeline(reference("grad_sin"), name="grad_sin", num_buffers=3, push_constant_size=4,
                            fast_math=fast)
        options = [(name, args) for kind, name, args in fake_metal.calls if kind == "options"]
        assert ("setFastMathEnabled_", (fast,)) in options
        assert (("setMathMode_", (FakeMetal.MTLMathModeSafe,)) in options) is not fast
        assert (("setMathFloatingPointFunctions_", (FakeMetal.MTLMathFloatingPointFunctionsPrecise,))
                in options) is not fast
    dev.close()


# ---- the device itself (macOS) ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def metal():
    dev = md.MetalDevice()
    yield dev
    dev.close()


def reference(name):
    return tools.assemble((SHADERS_REF / f"{name}.spvasm").read_text())


@mac
def test_buffers_are_zeroed_shared_views(metal):
    buf = metal.create_buffer(10)
    assert buf.nbytes == 10 and not buf.view(np.uint8).any() and buf.view(np.float32).shape == (2,)
    buf.view(np.float32)[:] = [1.5, 2.5]
    assert buf.view(np.float32).tolist() == [1.5, 2.5]
    buf.release()
    with pytest.raises(DeviceError):
        buf.view(np.float32)


@mac
def test_grad_sin_reference_runs_on_metal(metal):
    n = 1000
    x = np.linspace(-2, 2, n, dtype=np.float32)
    g = np.full(n, 0.5, np.float32)
    bufs = [metal.create_buffer(4 * n) for _ in range(3)]
    bufs[0].view(np.float32)[:], bufs[1].view(np.float32)[:] = x, g
    pipe = metal.create_pipeline(reference("grad_sin"), name="grad_sin", num_buffers=3, push_constant_size=4)
    metal.launch(pipe, bufs, struct.pack("<i", n), mp.fold_groups(-(-n // 64), 65535))
    metal.sync()
    np.testing.assert_allclose(bufs[2].view(np.float32), np.cos(x) * g, rtol=1e-5, atol=1e-6)
    assert not bufs[1].view(np.float32).any()


@mac
@pytest.mark.parametrize("cap,flags", [(8, [0, 0]), (2, [1, 5])])
def test_spec_constant_capacity_and_overflow_flag_on_metal(metal, cap, flags):
    n = 100
    bufs = [metal.create_buffer(4 * n) for _ in range(3)] + [metal.create_buffer(8)]
    bufs[0].view(np.float32)[:] = np.linspace(-1, 1, n, dtype=np.float32)
    bufs[1].view(np.float32)[:] = 1
    pipe = metal.create_pipeline(reference("adstack_f32"), name="adstack_f32", num_buffers=4,
                                 push_constant_size=12, spec_constants={0: cap})
    metal.launch(pipe, bufs, struct.pack("<fii", 0.3, 5, n), (2, 1, 1))
    metal.sync()
    assert bufs[3].view(np.uint32).tolist() == flags


@mac
def test_refused_pipeline_names_the_kernel_and_the_device_stays_usable(metal):
    bad = b"\x03\x02\x23\x07" + bytes(16)   # a SPIR-V header and nothing else: SPIRV-Cross refuses it
    with pytest.raises(PipelineCreationError, match=r"kernel 'broken' \(backend metal\).*translation"):
        metal.create_pipeline(bad, name="broken", num_buffers=0, push_constant_size=0)
    # OpAtomicFAddEXT becomes GLSL's atomicAdd( in the MSL, which the Metal compiler refuses
    with pytest.raises(PipelineCreationError, match=r"kernel 'fadd' \(backend metal\).*newLibraryWithSource"):
        metal.create_pipeline(tools.assemble(ATOMIC_FADD_MODULE), name="fadd", num_buffers=1,
                              push_constant_size=0)
    test_grad_sin_reference_runs_on_metal(metal)


@mac
def test_runtime_on_metal_end_to_end(monkeypatch):
    monkeypatch.delenv("SPVAD_BACKEND", raising=False)
    try:
        sp.init(backend="metal")
    except DeviceError as exc:
        pytest.skip(f"the runtime does not select Metal yet: {exc}")
    try:
        @sp.kernel
        def square(x: sp.Array, y: sp.Array):
            for i in range(x.shape[0]):
                y[i] = x[i] * x[i]
        x = sp.from_numpy(np.arange(300, dtype=np.float32), needs_grad=True)
        y = sp.ndarray(sp.f32, (300,), needs_grad=True)
        square(x, y)
        np.testing.assert_allclose(y.to_numpy(), np.arange(300) ** 2, rtol=1e-6)
        y.grad.fill(1.0)
        square.grad(x, y)
        np.testing.assert_allclose(x.grad.to_numpy(), 2 * np.arange(300), rtol=1e-6)
        assert sp.device_info()["backend"] == "metal"

        @sp.kernel
        def first(n: sp.Array, x: sp.Array, y: sp.Array):
            for i in range(n[None]):   # the count read on the device (dispatchThreadgroupsWithIndirectBuffer)
                y[i] = x[i] * x[i]
        y.fill(0.0)
        first(sp.from_numpy(np.array(201, np.int32)), x, y)
        np.testing.assert_allclose(y.to_numpy(), np.where(np.arange(300) < 201, np.arange(300) ** 2, 0), rtol=1e-6)
    finally:
        sp.reset()

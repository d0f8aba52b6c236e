"""Vulkan RHI tests on hand-written SPIR-V (runs on lavapipe; every test ends with zero validation
messages, synchronization validation included)."""
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from driver_refusal import driver_refuses  # noqa: E402
from spvad.errors import DeviceError, PipelineCreationError  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("spirv-as") is None, reason="needs spirv-as")

HEADER = """
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main" %gid
               OpExecutionMode %main LocalSize 64 1 1
               OpDecorate %gid BuiltIn GlobalInvocationId
               OpDecorate %rta ArrayStride 4
               OpMemberDecorate %buf 0 Offset 0
               OpDecorate %buf Block
               OpMemberDecorate %pcs 0 Offset 0
               OpDecorate %pcs Block
               OpDecorate %A DescriptorSet 0
               OpDecorate %A Binding 0
               OpDecorate %B DescriptorSet 0
               OpDecorate %B Binding 1
               OpDecorate %C DescriptorSet 0
               OpDecorate %C Binding 2
"""
TYPES = """
       %void = OpTypeVoid
       %fnty = OpTypeFunction %void
      %float = OpTypeFloat 32
       %uint = OpTypeInt 32 0
        %int = OpTypeInt 32 1
       %bool = OpTypeBool
     %v3uint = OpTypeVector %uint 3
      %p_in3 = OpTypePointer Input %v3uint
        %gid = OpVariable %p_in3 Input
        %rta = OpTypeRuntimeArray %float
        %buf = OpTypeStruct %rta
     %p_sbuf = OpTypePointer StorageBuffer %buf
       %p_sf = OpTypePointer StorageBuffer %float
          %A = OpVariable %p_sbuf StorageBuffer
          %B = OpVariable %p_sbuf StorageBuffer
          %C = OpVariable %p_sbuf StorageBuffer
        %pcs = OpTypeStruct %uint
       %p_pc = OpTypePointer PushConstant %pcs
      %p_pcu = OpTypePointer PushConstant %uint
         %pc = OpVariable %p_pc PushConstant
         %c0 = OpConstant %uint 0
"""
# C[i] = f(A[i], B[i]) for i < n, n in the push constants; BODY computes %r from %a and %b.
MAIN = """
       %main = OpFunction %void None %fnty
      %entry = OpLabel
          %g = OpLoad %v3uint %gid
          %x = OpCompositeExtract %uint %g 0
        %pnp = OpAccessChain %p_pcu %pc %c0
          %n = OpLoad %uint %pnp
         %ok = OpULessThan %bool %x %n
               OpSelectionMerge %end None
               OpBranchConditional %ok %body %end
       %body = OpLabel
         %pa = OpAccessChain %p_sf %A %c0 %x
         %pb = OpAccessChain %p_sf %B %c0 %x
        %pcx = OpAccessChain %p_sf %C %c0 %x
          %a = OpLoad %float %pa
          %b = OpLoad %float %pb
{body}
               OpStore %pcx %r
               OpBranch %end
        %end = OpLabel
               OpReturn
               OpFunctionEnd
"""
ADD_BODY = "          %r = OpFAdd %float %a %b"
# r = (a + b * scale + float(offset)), negated when `negate`: float, int and bool spec constants.
SPEC_DECOR = """
               OpDecorate %scale SpecId 0
               OpDecorate %offset SpecId 1
               OpDecorate %negate SpecId 2
"""
SPEC_TYPES = """
      %scale = OpSpecConstant %float 1
     %offset = OpSpecConstant %int 0
     %negate = OpSpecConstantFalse %bool
"""
SPEC_BODY = """
         %bs = OpFMul %float %b %scale
         %s1 = OpFAdd %float %a %bs
         %of = OpConvertSToF %float %offset
         %s2 = OpFAdd %float %s1 %of
         %ng = OpFNegate %float %s2
          %r = OpSelect %float %negate %ng %s2"""
LOCAL = 64


def assemble(text):
    """spirv-as for Vulkan 1.1, then spirv-val (never hand the driver an unvalidated module)."""
    out = subprocess.run(["spirv-as", "--target-env", "vulkan1.1", "-o", "-", "-"],
                         input=text.encode(), capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    val = subprocess.run(["spirv-val", "--target-env", "vulkan1.1", "-"], input=out.stdout,
                         capture_output=True)
    assert val.returncode == 0, val.stderr.decode() + val.stdout.decode()
    return out.stdout


def add_module():
    return assemble(HEADER + TYPES + MAIN.format(body=ADD_BODY))


def spec_module():
    return assemble(HEADER + SPEC_DECOR + TYPES + SPEC_TYPES + MAIN.format(body=SPEC_BODY))


def make_device(**kw):
    from spvad.rhi.vulkan.device import VulkanDevice
    return VulkanDevice(**kw)


@pytest.fixture
def dev():
    d = make_device(validation=True)
    yield d
    msgs = d.validation_messages()
    d.close()
    msgs += d.validation_messages()   # leaks show up at vkDestroyDevice
    assert msgs == [], "\n".join(msgs)


def upload(dev, arr):
    buf = dev.create_buffer(arr.nbytes)
    buf.view(arr.dtype)[:] = arr
    return buf


def groups_for(n):
    return ((n + LOCAL - 1) // LOCAL, 1, 1)


def test_importing_rhi_does_not_import_vulkan():
    code = "import sys, spvad.rhi, spvad.rhi.base, spvad.rhi.vulkan; print('vulkan' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("n", [1, 63, 64, 1000, 100_003])
def test_add_matches_numpy(dev, n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    A, B, C = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    dev.sync()
    np.testing.assert_array_equal(C.view(np.float32), a + b)


def test_buffers_zeroed_and_zero_size(dev):
    buf = dev.create_buffer(0)
    assert buf.nbytes == 0 and buf.view(np.float32).size == 0
    big = dev.create_buffer(4096)
    assert not big.view(np.uint8).any()
    big.release()
    big.release()  # idempotent
    with pytest.raises(DeviceError):
        big.view(np.float32)


def test_two_dependent_launches_one_batch(dev):
    n = 5000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    A, B, C, D = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n), dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    pc = struct.pack("<I", n)
    dev.launch(pipe, [A, B, C], pc, groups_for(n))
    dev.launch(pipe, [C, B, D], pc, groups_for(n))   # reads what the first one wrote
    dev.launch(pipe, [D, B, C], pc, groups_for(n))   # overwrites the first one's output (WAR)
    dev.sync()
    np.testing.assert_array_equal(D.view(np.float32), a + 1.0)
    np.testing.assert_array_equal(C.view(np.float32), a + 1.5)


def test_a_buffer_released_while_its_batch_is_submitted_outlives_it(dev, monkeypatch):
    """A release that runs inside the submission of the batch using the buffer (the garbage collector may
    run an ndarray's __del__ there) is deferred to the next sync: the batch is in flight before
    vkQueueSubmit. Destroyed at once, the buffer and its descriptor set would be gone while the command
    buffer using them is submitted (the validation layer reports it; a GPU may fault)."""
    monkeypatch.setattr(dev, "_compiles_at_dispatch", False)   # the pipeline's first dispatch waits too
    n = 1000
    a = np.arange(n, dtype=np.float32)
    A, B, C = upload(dev, a), upload(dev, a), dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    original, released = dev._collector.mark, []

    def mark_and_release():   # called by _flush between ending the command buffer's recording and submitting
        if not released:
            released.append(B.nbytes)
            B.release()
        return original()

    monkeypatch.setattr(dev._collector, "mark", mark_and_release)
    dev.sync()
    assert released and B.released
    np.testing.assert_array_equal(C.view(np.float32), 2 * a)


def test_many_launches_then_one_sync(dev):
    n, steps = 256, 3000   # more than flush_every: early submits in a ring of command buffers
    X, Y = upload(dev, np.zeros(n, np.float32)), dev.create_buffer(4 * n)
    one = upload(dev, np.ones(n, np.float32))
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    pc = struct.pack("<I", n)
    for i in range(steps):    # ping-pong: X -> Y -> X ..., each step adds one
        src, dst = (X, Y) if i % 2 == 0 else (Y, X)
        dev.launch(pipe, [src, one, dst], pc, groups_for(n))
    dev.sync()
    out = (Y if steps % 2 else X).view(np.float32)
    np.testing.assert_array_equal(out, np.full(n, steps, np.float32))
    # host writes before the next launch are seen by it
    X.view(np.float32)[:] = 10.0
    dev.launch(pipe, [X, one, Y], pc, groups_for(n))
    dev.sync()
    np.testing.assert_array_equal(Y.view(np.float32), np.full(n, 11.0, np.float32))


def test_launches_reach_an_idle_device_without_a_sync(dev, monkeypatch):
    """An idle device gets the launches recorded so far every 16 launches (it works while Python records the
    next ones); a busy one gets them later in one batch. Values as with one sync at the end, transfers between."""
    monkeypatch.setattr(dev, "_compiles_at_dispatch", False)   # counts from the pipeline's first dispatch
    n = 256
    X, Y = upload(dev, np.zeros(n, np.float32)), dev.create_buffer(4 * n)
    one = upload(dev, np.ones(n, np.float32))
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    pc = struct.pack("<I", n)
    dev.sync()
    for i in range(16):
        src, dst = (X, Y) if i % 2 == 0 else (Y, X)
        dev.launch(pipe, [src, one, dst], pc, groups_for(n))
    assert dev._cmd is None and dev._inflight, "16 launches for an idle device stayed unsubmitted"
    for i in range(16, 100):
        src, dst = (X, Y) if i % 2 == 0 else (Y, X)
        if i == 50:
            dev.fill_buffer(src, 0, 4 * n, np.float32(i).view(np.uint32))   # a transfer among them
        dev.launch(pipe, [src, one, dst], pc, groups_for(n))
    dev.sync()
    np.testing.assert_array_equal(X.view(np.float32), np.full(n, 100, np.float32))


def test_submit_starts_recorded_launches_on_a_gpu_only(dev, monkeypatch):
    """submit() (a Tape's hint before recording its backward) starts what is recorded on a GPU; on a CPU
    device, whose threads share the host's cores, it keeps recording into the same batch. Values as ever."""
    n = 256
    X, one = upload(dev, np.zeros(n, np.float32)), upload(dev, np.ones(n, np.float32))
    Y = dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    pc = struct.pack("<I", n)
    dev.launch(pipe, [X, one, Y], pc, groups_for(n))   # not the pipeline's first dispatch below (see next test)
    for device_type, started in (("cpu", False), ("discrete", True)):
        monkeypatch.setitem(dev._info, "device_type", device_type)
        dev.sync()
        dev.launch(pipe, [X, one, Y], pc, groups_for(n))
        dev.submit()
        assert (dev._cmd is None) == started, device_type
        dev.launch(pipe, [Y, one, X], pc, groups_for(n))
        dev.sync()
    np.testing.assert_array_equal(X.view(np.float32), np.full(n, 4, np.float32))


def test_a_pipelines_first_dispatch_is_submitted_at_once_where_it_compiles_then(dev, monkeypatch):
    """lavapipe compiles a pipeline when its first dispatch runs, on its queue's thread: that dispatch is
    submitted at once (the compile overlaps the host's next work), later ones are recorded into one batch; a
    driver that compiles at pipeline creation (a GPU) batches them all. Values as ever."""
    n = 256
    X, one = upload(dev, np.zeros(n, np.float32)), upload(dev, np.ones(n, np.float32))
    Y = dev.create_buffer(4 * n)
    pc = struct.pack("<I", n)
    for compiles_at_dispatch in (True, False):
        monkeypatch.setattr(dev, "_compiles_at_dispatch", compiles_at_dispatch)
        pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
        dev.sync()
        dev.launch(pipe, [X, one, Y], pc, groups_for(n))
        assert (dev._cmd is None and len(dev._inflight) == 1) == compiles_at_dispatch
        dev.launch(pipe, [Y, one, X], pc, groups_for(n))
        assert dev._cmd is not None   # a later dispatch stays in the batch being recorded
        dev.sync()
        pipe.release()
    np.testing.assert_array_equal(X.view(np.float32), np.full(n, 4, np.float32))


def test_spec_constants_change_behaviour(dev):
    n = 300
    a, b = np.linspace(-1, 1, n, dtype=np.float32), np.linspace(2, 3, n, dtype=np.float32)
    A, B, C = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n)
    code, pc = spec_module(), struct.pack("<I", n)
    default = dev.create_pipeline(code, name="spec", num_buffers=3, push_constant_size=4)
    dev.launch(default, [A, B, C], pc, groups_for(n))
    dev.sync()
    np.testing.assert_allclose(C.view(np.float32), a + b, rtol=1e-6)
    special = dev.create_pipeline(code, name="spec", num_buffers=3, push_constant_size=4,
                                  spec_constants={0: 3.0, 1: -2, 2: True})
    dev.launch(special, [A, B, C], pc, groups_for(n))
    dev.sync()
    np.testing.assert_allclose(C.view(np.float32), -(a + 3.0 * b - 2.0), rtol=1e-6)
    special.release()
    default.release()


def test_info_fields(dev):
    info = dev.info
    assert info["backend"] == "vulkan"
    for key in ("name", "driver", "device_type", "api_version"):
        assert isinstance(info[key], str) and info[key]
    lim = info["limits"]
    assert len(lim["max_workgroup_count"]) == 3 and len(lim["max_workgroup_size"]) == 3
    for key in ("max_workgroup_invocations", "max_push_constants_size",
                "max_storage_buffer_range", "subgroup_size"):
        assert lim[key] > 0
    assert set(info["features"]) >= {"float64", "int64", "atomic_float32_add"}
    assert all(isinstance(v, bool) for v in info["features"].values())


def test_groups_over_limit_raise(dev):
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    bufs = [dev.create_buffer(64) for _ in range(3)]
    too_many = dev.info["limits"]["max_workgroup_count"][0] + 1
    with pytest.raises(DeviceError, match="maxComputeWorkGroupCount"):
        dev.launch(pipe, bufs, struct.pack("<I", 16), (too_many, 1, 1))
    with pytest.raises(DeviceError, match="binds 3 buffers"):
        dev.launch(pipe, bufs[:2], struct.pack("<I", 16), (1, 1, 1))


def test_select_by_name_and_bogus_selector():
    """A case-insensitive substring of the default device's name selects it (whatever the device)."""
    d = make_device()
    name = d.info["name"]
    d.close()
    part = name.split()[0].swapcase()   # "LLVMPIPE" on lavapipe, "nvidia" on an NVIDIA GPU
    d = make_device(selector=part)
    try:
        assert d.info["name"] == name
    finally:
        d.close()
    with pytest.raises(DeviceError, match=re.escape(name)):   # the message lists the devices
        make_device(selector="no-such-gpu-xyz")
    with pytest.raises(DeviceError):
        make_device(selector=99)


def test_pipeline_failure_names_kernel_and_device_stays_usable(dev):
    """A refusal of the driver (lavapipe's real one, elsewhere an injected VK_ERROR_UNKNOWN: driver_refusal.py)."""
    good = add_module()
    with driver_refuses(dev) as poison, pytest.raises(PipelineCreationError) as info:
        dev.create_pipeline(poison(good), name="my_poisoned_kernel", num_buffers=3, push_constant_size=4)
    text = str(info.value)
    assert "my_poisoned_kernel" in text and "vulkan" in text
    assert re.search(poison.reason, text)
    assert info.value.kernel == "my_poisoned_kernel" and info.value.backend == "vulkan"
    # the same device still runs a good kernel
    n = 100
    a = np.arange(n, dtype=np.float32)
    A, B, C = upload(dev, a), upload(dev, a), dev.create_buffer(4 * n)
    pipe = dev.create_pipeline(good, name="add", num_buffers=3, push_constant_size=4)
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    dev.sync()
    np.testing.assert_array_equal(C.view(np.float32), 2 * a)


def test_not_spirv_is_refused_before_the_driver(dev):
    with pytest.raises(PipelineCreationError, match="not a SPIR-V module"):
        dev.create_pipeline(b"\x00" * 21, name="junk", num_buffers=0, push_constant_size=0)


def test_release_while_recorded_is_deferred(dev):
    n = 128
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    A, B, C = (upload(dev, np.ones(n, np.float32)) for _ in range(3))
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    A.release()           # still used by the recorded launch: freed after the sync
    pipe.release()
    dev.sync()
    np.testing.assert_array_equal(C.view(np.float32), np.full(n, 2, np.float32))


def test_close_then_new_device_works():
    for _ in range(3):
        d = make_device(validation=True)
        buf = d.create_buffer(64)
        buf.view(np.float32)[:] = 1
        pipe = d.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
        d.launch(pipe, [buf, buf, d.create_buffer(64)], struct.pack("<I", 16), (1, 1, 1))
        d.close()           # closes with recorded launches, live buffers and pipelines
        d.close()           # idempotent
        assert d.validation_messages() == []
        with pytest.raises(DeviceError):
            d.create_buffer(4)


@pytest.mark.parametrize("validation", [False, True])
def test_launch_overhead_benchmark(validation, capsys):
    d = make_device(validation=validation)
    try:
        n = 64
        A, B, C = (d.create_buffer(4 * n) for _ in range(3))
        pipe = d.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
        pc = struct.pack("<I", n)
        d.launch(pipe, [A, B, C], pc, (1, 1, 1))
        d.sync()
        t0 = time.perf_counter()
        for _ in range(1000):
            d.launch(pipe, [A, B, C], pc, (1, 1, 1))
        t1 = time.perf_counter()
        d.sync()
        t2 = time.perf_counter()
        with capsys.disabled():
            print(f"\n[vulkan rhi, validation={validation}] launch: {(t1 - t0) * 1e3:.2f} us/launch "
                  f"(Python), sync of 1000 launches: {(t2 - t1) * 1e3:.1f} ms")
        assert d.validation_messages() == []
    finally:
        d.close()


def test_descriptor_pools_grow_and_sets_are_freed(dev):
    """More distinct buffer tuples than one pool holds: a second pool is added; releasing the
    buffers frees their sets (validation checks pool accounting)."""
    n = 16
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    one = upload(dev, np.ones(n, np.float32))
    outs = [dev.create_buffer(4 * n) for _ in range(300)]
    for i, out in enumerate(outs):
        dev.launch(pipe, [one, one, out], struct.pack("<I", n), (1, 1, 1))
    dev.sync()
    assert len(dev._pools) >= 2
    assert all((o.view(np.float32) == 2).all() for o in outs)
    for out in outs:
        out.release()
    assert not dev._sets


def test_pipeline_cache_persists_across_devices(tmp_path):
    """The VkPipelineCache is saved at close and seeds the next device; garbage data is survived."""
    n = 100
    a = np.arange(n, dtype=np.float32)
    for attempt in range(2):
        d = make_device(validation=True, pipeline_cache_dir=str(tmp_path))
        A, B, C = upload(d, a), upload(d, a), d.create_buffer(4 * n)
        pipe = d.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
        d.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
        d.sync()
        np.testing.assert_array_equal(C.view(np.float32), 2 * a)
        msgs = d.validation_messages()
        d.close()
        assert msgs + d.validation_messages() == []
        files = list(tmp_path.glob("vk-pipelines-*.bin"))
        assert len(files) == 1 and files[0].stat().st_size >= 16   # at least the Vulkan cache header
    files[0].write_bytes(b"\x00" * 64)   # corrupt: the next device still starts
    d = make_device(pipeline_cache_dir=str(tmp_path))
    d.close()



def adds_right(d, n=100):
    """One launch of the add kernel on `d` (A + A) and a sync: the values are right."""
    a = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
    A, C = upload(d, a), d.create_buffer(4 * n)
    d.launch(d.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4), [A, A, C],
             struct.pack("<I", n), groups_for(n))
    d.sync()
    np.testing.assert_array_equal(C.view(np.float32), a + a)


def test_a_cpu_device_opens_with_an_empty_dispatch_that_no_sync_waits_for():
    """lavapipe sets up its shader compiler (LLVM) at a process's first dispatch: a CPU device dispatches an
    empty shader as it opens, in a command buffer of its own that syncs leave alone (a host write right after
    init would wait for it); it is valid SPIR-V, and the close waits for it and frees it."""
    from spvad.rhi.vulkan import warm_up
    from spvad.spirv import tools
    tools.validate(warm_up.EMPTY_SHADER, kernel_name="(driver warm-up)", target_env="vulkan1.0")
    d = make_device(validation=True)
    try:
        # (a GPU's driver compiles at pipeline creation; without Mesa's shader cache it would cost more)
        warmed = d.info["device_type"] == "cpu" and warm_up.wanted()
        assert len(d._frames) == len(d._pipelines) == int(warmed) and not d._inflight and not d._free_frames
        adds_right(d)   # (after the warm-up in the queue)
        msgs = d.validation_messages()
    finally:
        d.close()
    assert msgs + d.validation_messages() == []


def test_no_warm_up_without_mesas_shader_cache(monkeypatch):
    monkeypatch.setenv("MESA_SHADER_CACHE_DISABLE", "true")
    d = make_device(validation=True)
    assert not d._frames and not d._pipelines
    d.close()


def test_a_refused_warm_up_leaves_the_device_usable(monkeypatch):
    from spvad.rhi.vulkan.pipelines import PipelineMixin as ProgramMixin
    real = ProgramMixin.create_pipeline

    def refuse_the_warm_up(self, spirv, *, name, **kwargs):
        if name == "(driver warm-up)":
            raise PipelineCreationError("refused")
        return real(self, spirv, name=name, **kwargs)
    monkeypatch.setattr(ProgramMixin, "create_pipeline", refuse_the_warm_up)
    d = make_device(validation=True)
    try:
        assert not d._inflight and not d._frames
        adds_right(d)
        msgs = d.validation_messages()
    finally:
        d.close()
    assert msgs + d.validation_messages() == []


def test_copy_and_fill_are_ordered_with_launches(dev):
    """launch (C = A + B) -> copy C into D -> fill C -> launch (C = A + D) -> copy, all before one sync:
    each command sees the one before it (synchronization validation checks the barriers)."""
    n = 1000
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 2, n).astype(np.float32), rng.uniform(1, 2, n).astype(np.float32)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    A, B, C, D, E = upload(dev, a), upload(dev, b), *(dev.create_buffer(4 * n) for _ in range(3))
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    dev.copy_buffer(C, D, 4 * n)
    dev.fill_buffer(C, 0, 4 * n, 0)
    dev.copy_buffer(C, E, 4 * n)          # the zeros, not A + B
    dev.launch(pipe, [A, D, C], struct.pack("<I", n), groups_for(n))
    dev.fill_buffer(D, 8, 8, np.float32(-1.5).view(np.uint32).item())   # words 2 and 3 only
    dev.sync()
    np.testing.assert_array_equal(E.view(np.float32), np.zeros(n, np.float32))
    np.testing.assert_array_equal(C.view(np.float32), a + (a + b))
    expect = a + b
    expect[2:4] = -1.5
    np.testing.assert_array_equal(D.view(np.float32), expect)


def test_copy_regions_between_launches(dev):
    """launch (C = A + B) -> copy three regions of C into D -> launch (C = A + D): each sees the one before."""
    n = 256
    rng = np.random.default_rng(8)
    a, b = rng.uniform(1, 2, n).astype(np.float32), rng.uniform(1, 2, n).astype(np.float32)
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    A, B, C, D = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n), upload(dev, np.zeros(n, np.float32))
    regions = np.array([[0, 40, 12], [100, 0, 8], [400, 800, 200]], np.uint64)   # bytes: 3, 2 and 50 floats
    dev.launch(pipe, [A, B, C], struct.pack("<I", n), groups_for(n))
    dev.copy_regions(C, D, regions)
    dev.launch(pipe, [A, D, C], struct.pack("<I", n), groups_for(n))
    dev.sync()
    d = np.zeros(n, np.float32)
    for at, to, size in regions // 4:
        d[to:to + size] = (a + b)[at:at + size]
    np.testing.assert_array_equal(D.view(np.float32), d)
    np.testing.assert_array_equal(C.view(np.float32), a + d)


@pytest.mark.parametrize("regions", [[[2, 0, 4]], [[0, 0, 6]], [[0, 62, 4]], [[60, 0, 8]]],
                         ids=["odd-offset", "odd-size", "past-dst", "past-src"])
def test_bad_copy_regions_are_refused(dev, regions):
    with pytest.raises(DeviceError, match="words|past the end"):
        dev.copy_regions(dev.create_buffer(64), dev.create_buffer(64), np.array(regions, np.uint64))


@pytest.mark.parametrize("call", [lambda d, x: d.copy_buffer(x, x, 6), lambda d, x: d.fill_buffer(x, 2, 4, 0),
                                  lambda d, x: d.copy_buffer(x, d.create_buffer(4), 64),
                                  lambda d, x: d.fill_buffer(x, 64, 4, 0)],
                         ids=["odd-size", "odd-offset", "past-dst", "past-end"])
def test_bad_transfers_are_refused(dev, call):
    with pytest.raises(DeviceError, match="words|past the end"):
        call(dev, dev.create_buffer(64))


def test_transfer_with_released_buffer_is_refused(dev):
    buf = dev.create_buffer(64)
    buf.release()
    with pytest.raises(DeviceError, match="released"):
        dev.fill_buffer(buf, 0, 4, 0)


def test_indirect_dispatch_reads_the_groups_written_before_it(dev):
    """launch_indirect takes its groups from a buffer when it runs: written by the host before the launch,
    by a fill queued before it, or left at zero groups (nothing runs); the push constants bound n = 1000."""
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    A, B, C = upload(dev, a), upload(dev, b), dev.create_buffer(4 * n)
    args = upload(dev, np.array([0, 1, 1, 3, 1, 1], np.uint32))
    pipe = dev.create_pipeline(add_module(), name="add", num_buffers=3, push_constant_size=4)
    pc = struct.pack("<I", n)
    dev.launch_indirect(pipe, [A, B, C], pc, args, 0)        # (0, 1, 1): no group
    dev.sync()
    assert not C.view(np.float32).any()
    dev.launch_indirect(pipe, [A, B, C], pc, args, 12)       # (3, 1, 1): 3 groups of 64
    dev.sync()
    np.testing.assert_array_equal(C.view(np.float32)[:192], a[:192] + 0.5)
    assert not C.view(np.float32)[192:].any()
    dev.fill_buffer(args, 0, 4, 5)                           # a transfer writes the groups: (5, 1, 1)
    dev.launch_indirect(pipe, [B, A, C], pc, args, 0)
    dev.sync()
    np.testing.assert_array_equal(C.view(np.float32)[:320], a[:320] + 0.5)
    with pytest.raises(DeviceError, match="indirect arguments at byte 16"):
        dev.launch_indirect(pipe, [A, B, C], pc, args, 16)   # past the end of the buffer

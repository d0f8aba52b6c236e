"""The hand-written reference SPIR-V of shaders_ref/: assembled and validated, run through the RHI on known
inputs against numpy and a Python model of the adstack semantics (overflow included), and compared with
what the compiler emits for the same kernels: same outputs, same overflow flag words."""
import pathlib
import re
import shutil
import struct
import sys

import numpy as np
import pytest

import spvad as sp
from spvad.ir.interp import eval_num_threads
from spvad.launch.dispatch import PushPacker
from spvad.rhi.metal.program import fold_groups
from spvad.rhi.metal.translate import METAL_FEATURES, translate_spirv
from spvad.spirv import tools
from tests.common_kernels import flip, sin_out, sin_steps

pytestmark = pytest.mark.skipif(shutil.which("spirv-as") is None, reason="needs spirv-tools")
SHADERS = pathlib.Path(__file__).resolve().parents[2] / "shaders_ref"
NUM = 100   # threads: not a multiple of any workgroup size, more than one group
S, STEPS = 0.3, 5


# the kernels the reference shaders are the gradients of: tests/common_kernels.py (sin_out, sin_steps, flip)


# ---- the oracle: the reference shaders' adstack semantics on Python values (their pushes branch; spvad's
# clamp onto the last entry since, which changes values only after an overflow, never the flag words) -------
class Stack:
    """count always moves; entries are written only while count < cap; loads read min(count, cap) - 1;
    an adjoint is accumulated only while count <= cap. Records the depth an overflow needed."""

    def __init__(self, cap):
        self.cap, self.count, self.needed = cap, 0, 0
        self.primal, self.adjoint = [None] * cap, [None] * cap

    def push(self, v):
        if self.count < self.cap:
            self.primal[self.count], self.adjoint[self.count] = v, np.float32(0)
        else:
            self.needed = max(self.needed, self.count + 1)
        self.count += 1

    def top(self):
        return min(self.count, self.cap) - 1

    def load_top(self):
        return self.primal[self.top()]

    def load_top_adj(self):
        return self.adjoint[self.top()]

    def acc_adjoint(self, d):
        if self.count <= self.cap:
            self.adjoint[self.top()] = np.float32(self.adjoint[self.top()] + d)

    def pop(self):
        self.count -= 1


def model(kind, x, g, n, cap):
    """(x.grad increments, flag words) that adstack_f32 / adstack_bool compute, per the semantics above."""
    out, flags, s = np.zeros_like(x), np.zeros(2, np.uint32), np.float32(S)
    for i, (v, vbar) in enumerate(zip(x, g)):
        st = Stack(cap)
        if kind == "f32":
            for _ in range(n):
                st.push(v)
                v = np.float32(v + s * np.sin(v))
            for _ in range(n):
                st.acc_adjoint(np.float32(vbar * (np.float32(1) + s * np.cos(st.load_top()))))
                vbar = st.load_top_adj()
                st.pop()
        else:
            up = bool(v > 0)
            for _ in range(n):
                st.push(up)
                up = not up
            for _ in range(n):
                vbar = np.float32(vbar * (np.float32(0.5) if st.load_top() else np.float32(2.0)))
                st.pop()
        out[i] = vbar
        if st.needed:
            flags[0] |= 1
            flags[1] = max(flags[1], st.needed)
    return out, flags


# ---- devices and runs ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rt():
    try:
        sp.init()   # the compiler's runtime (its caches and device features)
    except sp.DeviceError as exc:
        if sys.platform != "darwin":
            raise
        pytest.skip(f"the runtime has no device here: {exc}")
    yield sp
    sp.reset()


@pytest.fixture(scope="module", params=["vulkan", pytest.param("metal", marks=pytest.mark.skipif(
    sys.platform != "darwin", reason="needs macOS with Metal and pyobjc-framework-Metal"))])
def device(request):
    try:
        if request.param == "vulkan":
            from spvad.rhi.vulkan.device import VulkanDevice
            device = VulkanDevice(validation=True)   # validation layer with synchronization validation
        else:
            from spvad.rhi.metal.device import MetalDevice
            device = MetalDevice()
    except sp.DeviceError as exc:
        if sys.platform != "darwin":   # on Linux the Vulkan device is required
            raise
        pytest.skip(f"no {request.param} device: {exc}")   # e.g. a Mac without MoltenVK
    yield device
    device.close()


@pytest.fixture
def dev(device):
    yield device
    assert device.validation_messages() == []


def assemble(name):
    spirv = tools.assemble((SHADERS / f"{name}.spvasm").read_text())
    tools.validate(spirv, kernel_name=name)
    return spirv


def upload(dev, array):
    buf = dev.create_buffer(array.nbytes)
    buf.view(array.dtype)[:] = array.ravel()
    return buf


def dispatch(dev, spirv, name, buffers, push, n, local, spec=None):
    pipe = dev.create_pipeline(spirv, name=name, num_buffers=len(buffers), push_constant_size=len(push),
                               spec_constants=spec)
    dev.launch(pipe, buffers, push, fold_groups(-(-n // local), dev.info["limits"]["max_workgroup_count"][0]))


def run_reference(dev, name, arrays, push, cap=None):
    """Run shaders_ref/<name> with `arrays` bound to bindings 0.. in order; returns them read back."""
    bufs = [upload(dev, a) for a in arrays]
    dispatch(dev, assemble(name), name, bufs, push, NUM, 64, {0: cap} if cap else None)
    dev.sync()
    return [b.view(a.dtype).copy() for a, b in zip(arrays, bufs)]


def run_compiled(dev, kernel, args, data, target=None):
    """Run kernel.grad(*args) as compiled by spvad through the RHI on `dev`, on numpy inputs
    data[(array index, field)]; returns (data read back, flag words of the first task with adstacks)."""
    specs, arrays, scalars = kernel._bind(args)
    ck = kernel._compiled(specs, "reverse", features=target)
    shapes = [a.shape for a in arrays]
    bufs = {key: upload(dev, a) for key, a in data.items()}
    flag_bufs = []
    for ct in ck.tasks:
        low, n = ct.lowered, eval_num_threads(ct.task, scalars, shapes)
        buffers = [bufs[key] for key in low.bindings]
        if low.flag_binding is not None:
            flag_bufs.append((upload(dev, np.zeros(1 + len(low.adstacks), np.uint32)), low))
            buffers.append(flag_bufs[-1][0])
        push = PushPacker(low, shapes)(scalars)
        dispatch(dev, low.spirv, kernel.name, buffers, push, n, low.local_size,
                 ct.spec_constants(scalars, shapes, n))
    dev.sync()
    flags = [(b.view(np.uint32).copy(), low) for b, low in flag_bufs]
    return {key: b.view(data[key].dtype).copy() for key, b in bufs.items()}, flags


def inputs(seed):
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random(NUM) < 0.5, -1, 1)
    x = (signs * rng.uniform(0.2, 1.5, NUM)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, NUM).astype(np.float32)
    xg0 = rng.uniform(-1, 1, NUM).astype(np.float32)   # x.grad is accumulated into, never overwritten
    return x, g, xg0


def targets(dev):
    """Feature sets to compile for: the device's own, and Metal's (CAS float atomics) where it differs."""
    return [METAL_FEATURES] if dev.info["backend"] == "metal" else [None, METAL_FEATURES]


# ---- the reference shaders alone -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["grad_sin", "adstack_f32", "adstack_bool"])
def test_reference_assembles_validates_and_translates(name):
    text = (SHADERS / f"{name}.spvasm").read_text()
    assert text.startswith(f"; shaders_ref/{name}.spvasm")
    spirv = assemble(name)
    dis = tools.disassemble(spirv)
    arrays = re.findall(r"(%\w+) = OpTypeArray", dis)
    assert all(f"OpDecorate {a} ArrayStride" not in dis for a in arrays)   # Function arrays: no stride
    n = 3 if name == "grad_sin" else 4
    prog = translate_spirv(spirv, name, n, 4 if name == "grad_sin" else 8)
    assert [i for *_, i in prog.buffer_args] == list(range(n + 1)) and "atomicAdd(" not in prog.source


def test_grad_sin_reference(dev):
    x, g, xg0 = inputs(1)
    xv, yg, xg = run_reference(dev, "grad_sin", [x, g, xg0], struct.pack("<i", NUM))
    np.testing.assert_allclose(xg, xg0 + np.cos(x) * g, rtol=1e-5, atol=1e-6)
    assert not yg.any() and np.array_equal(xv, x)   # y.grad consumed, x untouched


@pytest.mark.parametrize("kind", ["f32", "bool"])
@pytest.mark.parametrize("cap", [STEPS, STEPS + 3, 3, 1])
def test_adstack_reference_follows_the_model(dev, kind, cap):
    x, g, xg0 = inputs(2)
    push = struct.pack("<fii", S, STEPS, NUM) if kind == "f32" else struct.pack("<ii", STEPS, NUM)
    _, yg, xg, flags = run_reference(dev, f"adstack_{kind}", [x, g, xg0, np.zeros(2, np.uint32)], push, cap)
    want, want_flags = model(kind, x, g, STEPS, cap)
    np.testing.assert_allclose(xg, xg0 + want, rtol=1e-5, atol=1e-6)
    assert not yg.any()
    assert flags.tolist() == want_flags.tolist() == ([0, 0] if cap >= STEPS else [1, STEPS])
    if cap >= STEPS:   # no overflow: the exact gradient
        v, d = x.astype(np.float64), np.ones(NUM)
        for k in range(STEPS):
            if kind == "f32":
                d, v = d * (1 + S * np.cos(v)), v + S * np.sin(v)
            else:
                d *= np.where((x > 0) == (k % 2 == 0), 0.5, 2.0)
        np.testing.assert_allclose(xg - xg0, g * d, rtol=1e-4)


# ---- the compiler's output for the same kernels ------------------------------------------------------------
# reference shader -> (kernel function, its scalar arguments, the reference's push-constant format)
CASES = {"grad_sin": (sin_out, (), "<i"), "adstack_f32": (sin_steps, (S, STEPS), "<fii"),
         "adstack_bool": (flip, (STEPS,), "<ii")}


def compare(rt, dev, name, cap):
    """Run the reference and the compiler's gradient kernel (for each target) on the same inputs; check the
    same outputs (after an overflow only y.grad: x.grad is then defined but differs, as each kernel reads
    clamped entries its own way); yield (reference results, compiled flag words) for the flag checks."""
    fn, scalars, push_format = CASES[name]
    kernel = sp.kernel(fn, ad_stack_size=cap if cap and cap < STEPS else None)
    x, g, xg0 = inputs(3)
    args = (sp.from_numpy(x, needs_grad=True), sp.ndarray(sp.f32, (NUM,), needs_grad=True)) + scalars
    push = struct.pack(push_format, *scalars, NUM)
    arrays = [x, g, xg0] + ([np.zeros(2, np.uint32)] if name != "grad_sin" else [])
    ref = run_reference(dev, name, arrays, push, cap)
    data = {(0, "primal"): x, (0, "grad"): xg0, (1, "primal"): np.zeros(NUM, np.float32), (1, "grad"): g}
    for target in targets(dev):
        out, flags = run_compiled(dev, kernel, args, data, target)
        if not (cap and cap < STEPS):
            np.testing.assert_allclose(out[(0, "grad")], ref[2], rtol=2e-5, atol=1e-6)
        np.testing.assert_array_equal(out[(1, "grad")], ref[1])   # consumed: zeros
        yield ref, flags


@pytest.mark.parametrize("name", ["grad_sin", "adstack_f32", "adstack_bool"])
def test_compiler_matches_reference_without_overflow(rt, dev, name):
    for ref, flags in compare(rt, dev, name, STEPS if name != "grad_sin" else None):
        assert all(not words.any() for words, _ in flags)


@pytest.mark.parametrize("name,dtype", [("adstack_f32", sp.f32), ("adstack_bool", sp.u1)])
def test_compiler_overflow_flags_match_reference(rt, dev, name, dtype):
    """With ad_stack_size=2 < 5 steps both set the stack's flag bit and record needed depth 5."""
    for ref, flags in compare(rt, dev, name, 2):
        assert ref[3].tolist() == [1, STEPS]
        (words, low), = flags
        k = next(i for i, st in enumerate(low.adstacks) if st.dtype == dtype and st.capacity == 2)
        assert words[0] >> k & 1 and words[1 + k] == ref[3][1]
        assert max(words[1:]) == STEPS   # what the runtime reports: "pass ad_stack_size>=5"


@pytest.mark.parametrize("name", ["adstack_f32", "adstack_bool"])
def test_public_api_reports_the_reference_depth(rt, dev, name):
    """End to end through the runtime: without overflow k.grad gives the reference's gradient; with
    ad_stack_size=2 the next sync raises AdStackOverflowError asking for the depth that the reference
    shader's flag word records."""
    fn, scalars, push_format = CASES[name]
    x, g, xg0 = inputs(4)
    push = struct.pack(push_format, *scalars, NUM)
    for cap in (STEPS, 2):
        *_, xg_ref, flags = run_reference(dev, name, [x, g, xg0, np.zeros(2, np.uint32)], push, cap)
        xs = sp.from_numpy(x, needs_grad=True)
        y = sp.ndarray(sp.f32, (NUM,), needs_grad=True)
        xs.grad.from_numpy(xg0)
        y.grad.from_numpy(g)
        sp.kernel(fn, ad_stack_size=None if cap == STEPS else cap).grad(xs, y, *scalars)
        if cap == STEPS:
            np.testing.assert_allclose(xs.grad.to_numpy(), xg_ref, rtol=2e-5, atol=1e-6)
        else:
            with pytest.raises(sp.AdStackOverflowError, match=rf"ad_stack_size>={flags[1]}\b"):
                sp.sync()

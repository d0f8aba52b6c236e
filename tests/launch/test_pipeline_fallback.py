"""A driver that refuses a pipeline whose adstacks live in Function scope (NVIDIA: "failed to validate local
memory", for ~16 KiB of per-thread arrays; no Vulkan limit reports it) does not fail a valid program: the
launch retries once with every stack in the storage buffer and remembers that for the specialisation.
Injected here on lavapipe by a create_pipeline that refuses Function-home stacks."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.errors import PipelineCreationError
from spvad.launch.device_task import task_on_device
from tests import common_kernels

integrate = sp.kernel(common_kernels.integrate)
N = 8


def integrate_ref(x, w, steps):
    """float64 values and d y / d x, d y / d w of the integrator."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    v, dx, dw = x.copy(), np.ones_like(x), np.zeros_like(x)
    for _ in range(steps):
        dv = 1 + 0.01 * np.cos(v) * w
        dx, dw = dv * dx, dv * dw + 0.01 * np.sin(v)
        v = v + 0.01 * np.sin(v) * w
    return v, dx, dw


class Refusals(list):
    """The kernel names of the refused pipelines; `policy["everything"]` refuses every module."""
    policy = None


@pytest.fixture
def refusing(monkeypatch):
    """The device refuses every module with a Function-scope stack array (named `<stack>.primal`) and,
    with `everything` set, every module; returns the list of refusals."""
    monkeypatch.delenv("SPVAD_ADSTACK_HOME", raising=False)
    sp.init()
    device = runtime.get().device
    original, refusals, policy = device.create_pipeline, Refusals(), {"everything": False}

    def create_pipeline(spirv, **kw):
        if policy["everything"] or b".primal\0" in bytes(spirv):
            refusals.append(kw["name"])
            err = PipelineCreationError(f"kernel '{kw['name']}' (backend vulkan): the driver refused the "
                                        "pipeline: vkCreateComputePipelines returned VK_ERROR_UNKNOWN (-13); "
                                        "driver messages:\n  [WARNING] NVIDIA: CreatePipeline: failed to "
                                        "validate local memory")
            err.kernel, err.backend, err.result, err.driver_messages = kw["name"], "vulkan", "VK_ERROR_UNKNOWN", []
            raise err
        return original(spirv, **kw)

    monkeypatch.setattr(device, "create_pipeline", create_pipeline)
    refusals.policy = policy
    yield refusals
    sp.init()


def run_gradient(x, w, steps):
    xs, ws = sp.from_numpy(x, needs_grad=True), sp.from_numpy(w, needs_grad=True)
    y = sp.ndarray(sp.f32, len(x), needs_grad=True)
    integrate(xs, ws, y, steps)
    y.grad.fill(1.0)
    integrate.grad(xs, ws, y, steps)
    return y.to_numpy(), xs.grad.to_numpy(), ws.grad.to_numpy()


def grad_task(x, w, steps):
    dev = (sp.from_numpy(x, needs_grad=True), sp.from_numpy(w, needs_grad=True),
           sp.ndarray(sp.f32, len(x), needs_grad=True), steps)
    return task_on_device(runtime.get(), integrate._compiled(integrate._bind(dev)[0], "reverse").tasks[0])


def test_refused_function_stacks_retry_in_the_buffer(refusing, rng):
    """Gradients right (float64 reference) although every Function-scope variant is refused; the refusal
    happens once per specialisation, later launches go straight to the buffer variant."""
    x, w = rng.uniform(0.3, 1.0, N).astype(np.float32), rng.uniform(0.5, 1.5, N).astype(np.float32)
    for steps in (16, 16, 40, 16):
        got = run_gradient(x, w, steps)
        for g, want in zip(got, integrate_ref(x, w, steps)):
            np.testing.assert_allclose(g, want, rtol=2e-5)
    assert refusing == ["integrate", "integrate"]   # steps 16, then 40: two specialisations, once each
    held = grad_task(x, w, 16)
    assert set(held.homes(held.last_spec)) == {"buffer"}


def test_a_tape_over_refused_launches(refusing, rng):
    x, w = rng.uniform(0.3, 1.0, N).astype(np.float32), rng.uniform(0.5, 1.5, N).astype(np.float32)
    xs, ws = sp.from_numpy(x, needs_grad=True), sp.from_numpy(w, needs_grad=True)
    mid, y = sp.ndarray(sp.f32, N, needs_grad=True), sp.ndarray(sp.f32, N, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    @sp.kernel
    def total(y: sp.Array, loss: sp.Array):
        for i in range(y.shape[0]):
            loss[None] += y[i]

    with sp.Tape(loss):
        integrate(xs, ws, mid, 12)
        integrate(mid, ws, y, 12)
        total(y, loss)
    v1, dx1, dw1 = integrate_ref(x, w, 12)
    v2, dx2, dw2 = integrate_ref(v1, w, 12)
    np.testing.assert_allclose(loss[None], v2.sum(), rtol=1e-5)
    np.testing.assert_allclose(xs.grad.to_numpy(), dx2 * dx1, rtol=2e-5)
    np.testing.assert_allclose(ws.grad.to_numpy(), dw2 + dx2 * dw1, rtol=2e-5)
    assert refusing and set(refusing) == {"integrate"}


def test_a_forced_function_home_is_not_overridden(refusing, rng, monkeypatch):
    monkeypatch.setenv("SPVAD_ADSTACK_HOME", "function")
    x, w = rng.uniform(0.3, 1.0, N).astype(np.float32), rng.uniform(0.5, 1.5, N).astype(np.float32)
    with pytest.raises(PipelineCreationError, match="failed to validate local memory"):
        run_gradient(x, w, 16)
    monkeypatch.setenv("SPVAD_ADSTACK_HOME", "auto")
    run_gradient(x, w, 16)   # the runtime stays usable


def test_refused_in_both_homes_names_both(refusing, rng):
    x, w = rng.uniform(0.3, 1.0, N).astype(np.float32), rng.uniform(0.5, 1.5, N).astype(np.float32)
    xs, ws = sp.from_numpy(x, needs_grad=True), sp.from_numpy(w, needs_grad=True)
    y = sp.ndarray(sp.f32, N, needs_grad=True)
    integrate(xs, ws, y, 16)
    y.grad.fill(1.0)
    refusing.policy["everything"] = True
    with pytest.raises(PipelineCreationError, match=r"(?s)refused the pipeline.*first refused with its "
                                                    r"adstacks in Function scope"):
        integrate.grad(xs, ws, y, 16)
    assert len(refusing) == 2   # the Function variant, then the buffer variant

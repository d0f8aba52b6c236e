"""Gradients that would need array contents existing only in the middle of a launch (a loop reads elements
the same launch wrote and writes them again) are refused with sp.AutodiffRuleError by every reverse-mode
entry point, before anything runs on the device (the depth probe included); forward mode, which runs in
program order, computes them. Loops whose reads come from registers (store-to-load forwarding), from
elements written once, or from elements they overwrite only afterwards keep exact gradients. Everything is
checked against central finite differences of float64 numpy references, on random non-zero inputs."""
import numpy as np
import pytest

import spvad as sp
from spvad.launch.device_task import DeviceTask
from spvad.pipeline import REVERSE

pytestmark = pytest.mark.backends

N, W = 6, 3   # threads; columns of the 2-d output y
H = 1e-6      # finite-difference step (float64 references)


# ---- kernels whose gradient needs mid-launch contents ----------------------------------------------------
# Every kernel and reference takes (x, y, z, idx): x (N,) input, y (N, W) and z (N,) outputs, idx = arange(N).
@sp.kernel
def while_reads_what_it_writes(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = x[i]
        while z[i] < 4.0:                 # the condition reads z[i], which the body rewrites
            z[i] = z[i] * 1.5 + x[i]


def while_reads_what_it_writes_np(x, y, z, idx):
    for i in range(N):
        z[i] = x[i]
        while z[i] < 4.0:
            z[i] = z[i] * 1.5 + x[i]


@sp.kernel
def while_with_adstack(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        z[i] = v
        while z[i] < 4.0:                 # v: an adstack, sized by the depth probe
            v = v * v * 0.5 + x[i] + 0.5
            z[i] = v


def while_with_adstack_np(x, y, z, idx):
    for i in range(N):
        z[i] = x[i]
        while z[i] < 4.0:
            z[i] = z[i] * z[i] * 0.5 + x[i] + 0.5


@sp.kernel
def condition_through_index_array(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        z[i] = v
        while z[idx[i]] < 4.0:            # the same element, addressed through another array
            v = v * 1.5 + x[i]
            z[i] = v


@sp.kernel
def condition_through_local_alias(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        j = i
        v = x[i]
        z[j] = v
        while z[i] < 4.0:                 # the body writes z[j], j == i
            v = v * 1.5 + x[i]
            z[j] = v


@sp.kernel
def condition_through_arithmetic(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        z[i] = v
        while z[(i + 1) - 1] < 4.0:
            v = v * 1.5 + x[i]
            z[i] = v


@sp.kernel
def for_rewrites_its_element(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = x[i]
        for k in range(3):
            z[i] = sp.sin(z[i]) + x[i]


def for_rewrites_its_element_np(x, y, z, idx):
    z[:] = x
    for k in range(3):
        z[:] = np.sin(z) + x


@sp.kernel
def bound_reads_what_it_writes(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = x[i] * 2.0
        for k in range(3):
            for j in range(sp.i32(z[i])):  # the bound reads z[i] each outer iteration, the inner loop writes it
                z[i] = z[i] * 0.9 + x[i] * 0.3


def bound_reads_what_it_writes_np(x, y, z, idx):
    for i in range(N):
        z[i] = x[i] * 2.0
        for k in range(3):
            for j in range(int(np.float32(z[i]))):
                z[i] = z[i] * 0.9 + x[i] * 0.3


@sp.kernel
def inner_loop_rewrites_outer_element(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        for t in range(3):
            y[i, t] = x[i] * float(t + 1)
            for k in range(2):            # y[i, t] changes with t, but not within this loop
                y[i, t] = sp.sin(y[i, t]) + x[i]


def inner_loop_rewrites_outer_element_np(x, y, z, idx):
    for t in range(W):
        y[:, t] = x * (t + 1)
        for k in range(2):
            y[:, t] = np.sin(y[:, t]) + x


@sp.kernel
def written_in_some_iterations(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(4):
            if k % 2 == 0:                # twice: the reads in between see two values
                z[i] = v * 0.5 + float(k)
            v = v + z[i] * x[i]
        y[i, 0] = v


def written_in_some_iterations_np(x, y, z, idx):
    v = x.copy()
    for k in range(4):
        if k % 2 == 0:
            z[:] = v * 0.5 + k
        v = v + z * x
    y[:, 0] = v


REFUSED = {
    "while_reads_what_it_writes": (while_reads_what_it_writes, while_reads_what_it_writes_np),
    "while_with_adstack": (while_with_adstack, while_with_adstack_np),
    "condition_through_index_array": (condition_through_index_array, while_reads_what_it_writes_np),
    "condition_through_local_alias": (condition_through_local_alias, while_reads_what_it_writes_np),
    "condition_through_arithmetic": (condition_through_arithmetic, while_reads_what_it_writes_np),
    "for_rewrites_its_element": (for_rewrites_its_element, for_rewrites_its_element_np),
    "bound_reads_what_it_writes": (bound_reads_what_it_writes, bound_reads_what_it_writes_np),
    "inner_loop_rewrites_outer_element": (inner_loop_rewrites_outer_element, inner_loop_rewrites_outer_element_np),
    "written_in_some_iterations": (written_in_some_iterations, written_in_some_iterations_np),
}


# ---- kernels whose loops read what they wrote, exactly ------------------------------------------------
@sp.kernel
def kept_in_a_local(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = x[i]
        v = z[i]                          # forwarded from the store: a register
        while v < 4.0:
            v = v * v * 0.5 + x[i] + 0.5
        z[i] = v


@sp.kernel
def stored_then_read_back(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        while v < 4.0:
            z[i] = v * v * 0.5 + x[i] + 0.5
            v = z[i]                      # forwarded within the iteration


@sp.kernel
def written_once_then_read(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(4):
            if k == 0:
                y[i, 0] = sp.sin(x[i]) * 2.0   # written in the first iteration only
            v = v * 0.5 + y[i, 0] * x[i]
        z[i] = v


def written_once_then_read_np(x, y, z, idx):
    y[:, 0] = np.sin(x) * 2.0
    v = x.copy()
    for k in range(4):
        v = v * 0.5 + y[:, 0] * x
    z[:] = v


@sp.kernel
def recurrence(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = x[i]
    for _ in range(1):
        for t in range(x.shape[0] - 1):   # each element written once, before it is read
            z[t + 1] = sp.sin(z[t]) + x[t + 1]


def recurrence_np(x, y, z, idx):
    z[:] = x
    for t in range(N - 1):
        z[t + 1] = np.sin(z[t]) + x[t + 1]


@sp.kernel
def in_place_rows(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        for t in range(y.shape[1]):       # each element read, then overwritten by the same iteration
            v = y[i, t]
            y[i, t] = sp.sin(v) + x[i]


def in_place_rows_np(x, y, z, idx):
    y[:] = np.sin(y) + x[:, None]


@sp.kernel
def other_column_in_a_loop(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        for k in range(3):                # writes y[i, 0], reads y[i, 1]: never the same element
            y[i, 0] = sp.sin(y[i, 1]) * x[i] + float(k)


def other_column_in_a_loop_np(x, y, z, idx):
    y[:, 0] = np.sin(y[:, 1]) * x + 2.0


@sp.kernel
def between_two_loops(x: sp.Array, y: sp.Array, z: sp.Array, idx: sp.Array):
    for i in range(x.shape[0]):
        z[i] = sp.exp(x[i])
    for i in range(x.shape[0]):
        y[i, 0] = sp.sin(z[i])   # reads the z the first loop wrote, which the third loop overwrites: the
    for i in range(x.shape[0]):   # gradient recomputes it (autodiff/launch_states.py)
        z[i] = x[i] * 2.0


def between_two_loops_np(x, y, z, idx):
    z[:] = np.exp(x)
    y[:, 0] = np.sin(z)
    z[:] = x * 2.0


EXACT = {
    "between_two_loops": (between_two_loops, between_two_loops_np),
    "kept_in_a_local": (kept_in_a_local, while_with_adstack_np),
    "stored_then_read_back": (stored_then_read_back, while_with_adstack_np),
    "written_once_then_read": (written_once_then_read, written_once_then_read_np),
    "recurrence": (recurrence, recurrence_np),
    "in_place_rows": (in_place_rows, in_place_rows_np),
    "other_column_in_a_loop": (other_column_in_a_loop, other_column_in_a_loop_np),
}
OVERWRITES_ITS_INPUT = {"in_place_rows"}   # a direct k.grad needs the contents the launch found


# ---- helpers -------------------------------------------------------------------------------------------
@sp.kernel
def total(y: sp.Array, z: sp.Array, loss: sp.Array):
    for i in range(z.shape[0]):
        s = z[i]
        for t in range(y.shape[1]):
            s = s + y[i, t]
        loss[None] += s


def inputs(seed):
    """x > 0 (every `while` ends), y0 with random signs, z0; float32 values."""
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random((N, W)) < 0.5, -1.0, 1.0)
    return (rng.uniform(0.3, 1.2, N).astype(np.float32), (sign * rng.uniform(0.1, 1.0, (N, W))).astype(np.float32),
            rng.uniform(0.1, 1.0, N).astype(np.float32))


def run_np(ref, x, y0, z0):
    y, z = y0.astype(np.float64), z0.astype(np.float64)
    ref(x.astype(np.float64), y, z, np.arange(N))
    return y, z


def loss_np(ref, x, y0, z0):
    y, z = run_np(ref, x, y0, z0)
    return y.sum() + z.sum()


def finite_differences(ref, x, y0, z0):
    """d loss / d (x, y0, z0), central differences of the float64 reference."""
    args = [a.astype(np.float64) for a in (x, y0, z0)]
    out = []
    for k, a in enumerate(args):
        g = np.zeros(a.shape)
        for j in np.ndindex(a.shape):
            hi, lo = [b.copy() for b in args], [b.copy() for b in args]
            hi[k][j] += H
            lo[k][j] -= H
            g[j] = (loss_np(ref, *hi) - loss_np(ref, *lo)) / (2 * H)
        out.append(g)
    return out


def arrays(x, y0, z0, **companions):
    return (sp.from_numpy(x, **companions), sp.from_numpy(y0, **companions), sp.from_numpy(z0, **companions),
            sp.from_numpy(np.arange(N, dtype=np.int32)))


def mid_launch_message(kernel, array):
    """The error names the kernel and the array, says why and what to do."""
    return (rf"kernel {kernel.name}: its gradient reads '{array}' as it was in the middle of the launch.*"
            r"neither k.grad .* nor sp.Tape .*Keep the value in a local variable")


def array_of(name):
    return "y" if name == "inner_loop_rewrites_outer_element" else "z"


def has_depth_probe(kernel, *args):
    """Whether the gradient of `kernel` measures adstack depths on the device (compiling is no launch)."""
    specs, _, _ = kernel._bind(args)
    return any(t.depth_probe is not None for t in kernel._compiled(specs, REVERSE).tasks)


def probe_must_not_run(monkeypatch):
    def refuse(*args):
        raise AssertionError("the depth probe ran on a kernel whose gradient is refused")
    monkeypatch.setattr(DeviceTask, "measure_depths", refuse)


# ---- refused: direct k.grad and sp.Tape, before the device runs anything ------------------------------
@pytest.mark.parametrize("name", REFUSED)
def test_direct_grad_is_refused(name, monkeypatch):
    kernel, ref = REFUSED[name]
    x0, y0, z0 = inputs(1)
    x, y, z, idx = arrays(x0, y0, z0, needs_grad=True)
    kernel(x, y, z, idx)
    want_y, want_z = run_np(ref, x0, y0, z0)
    np.testing.assert_allclose(y.to_numpy(), want_y, rtol=1e-5)   # the forward is right
    np.testing.assert_allclose(z.to_numpy(), want_z, rtol=1e-5)
    y.grad.fill(1.0)
    z.grad.fill(1.0)
    probe_must_not_run(monkeypatch)
    with pytest.raises(sp.AutodiffRuleError, match=mid_launch_message(kernel, array_of(name))):
        kernel.grad(x, y, z, idx)
    assert not x.grad.to_numpy().any()   # nothing ran: no gradient added, the outputs' .grad not consumed
    assert (y.grad.to_numpy() == 1).all() and (z.grad.to_numpy() == 1).all()


def test_refused_before_a_depth_probe_that_would_never_end(monkeypatch):
    """With z all zeros (no forward before the gradient), replaying `while z[i] < 4` without its writes
    never ends: the depth probe must not start."""
    x0, y0, z0 = inputs(2)
    x, y, z, idx = arrays(x0, y0, np.zeros(N, np.float32), needs_grad=True)
    assert has_depth_probe(while_with_adstack, x, y, z, idx)
    z.grad.fill(1.0)
    probe_must_not_run(monkeypatch)
    with pytest.raises(sp.AutodiffRuleError, match=mid_launch_message(while_with_adstack, "z")):
        while_with_adstack.grad(x, y, z, idx)


@pytest.mark.parametrize("name", REFUSED)
def test_tape_refuses_with_the_same_error(name, monkeypatch):
    kernel, _ = REFUSED[name]
    x, y, z, idx = arrays(*inputs(3), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    probe_must_not_run(monkeypatch)
    with pytest.raises(sp.AutodiffRuleError, match=mid_launch_message(kernel, array_of(name))):
        with sp.Tape(loss):
            kernel(x, y, z, idx)
            total(y, z, loss)


# ---- forward mode runs in program order: exact for the same kernels ----------------------------------
@pytest.mark.parametrize("name", REFUSED)
def test_forward_mode_is_exact(name):
    kernel, ref = REFUSED[name]
    x0, y0, z0 = inputs(5)
    seed = np.random.default_rng(6).uniform(-1.0, 1.0, N)
    step = [H * seed, 0 * y0, 0 * z0]
    hi = run_np(ref, *[a.astype(np.float64) + s for a, s in zip((x0, y0, z0), step)])
    lo = run_np(ref, *[a.astype(np.float64) - s for a, s in zip((x0, y0, z0), step)])
    want = [(h - l) / (2 * H) for h, l in zip(hi, lo)]

    x, y, z, idx = arrays(x0, y0, z0, needs_dual=True)
    x.dual.from_numpy(seed.astype(np.float32))
    kernel.fwd(x, y, z, idx)
    np.testing.assert_allclose(y.dual.to_numpy(), want[0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(z.dual.to_numpy(), want[1], rtol=1e-3, atol=1e-4)

    x, y, z, idx = arrays(x0, y0, z0, needs_dual=True)
    with sp.FwdMode(loss=z, param=x, seed=seed):
        kernel(x, y, z, idx)
    np.testing.assert_allclose(y.dual.to_numpy(), want[0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(z.dual.to_numpy(), want[1], rtol=1e-3, atol=1e-4)


# ---- exact: direct k.grad and sp.Tape agree with finite differences -------------------------------------
@pytest.mark.parametrize("name", EXACT)
def test_direct_grad_is_exact(name):
    kernel, ref = EXACT[name]
    x0, y0, z0 = inputs(7)
    want = finite_differences(ref, x0, y0, z0)
    x, y, z, idx = arrays(x0, y0, z0, needs_grad=True)
    kernel(x, y, z, idx)
    if name in OVERWRITES_ITS_INPUT:   # a direct k.grad recomputes from the arrays as they are
        y.from_numpy(y0)
    y.grad.fill(1.0)
    z.grad.fill(1.0)
    kernel.grad(x, y, z, idx)
    for got, fd in zip((x.grad, y.grad, z.grad), want):
        np.testing.assert_allclose(got.to_numpy(), fd, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", EXACT)
def test_tape_gradient_is_exact(name):
    kernel, ref = EXACT[name]
    x0, y0, z0 = inputs(8)
    want = finite_differences(ref, x0, y0, z0)
    x, y, z, idx = arrays(x0, y0, z0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        kernel(x, y, z, idx)
        total(y, z, loss)
    np.testing.assert_allclose(loss.to_numpy(), loss_np(ref, x0, y0, z0), rtol=1e-5)
    for got, fd in zip((x.grad, y.grad, z.grad), want):
        np.testing.assert_allclose(got.to_numpy(), fd, rtol=1e-3, atol=1e-4)

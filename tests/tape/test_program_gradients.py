"""Program-level gradients under `sp.Tape`: buffers reused across launches (double buffering, in-place
updates, scratch arrays), host writes inside the Tape (fill, from_numpy, setitem) and intermediates without
needs_grad. Each program is re-implemented in float64 numpy; the Tape's gradients must match the central
finite differences of that re-implementation, on random inputs."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N = 8
DT = 0.3


def rand(rng, n=N, lo=0.2, hi=1.2):
    return (np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, n)).astype(np.float32)


@sp.kernel
def step(a: sp.Array, b: sp.Array, w: sp.Array, dt: sp.f32):
    for i in range(a.shape[0]):
        b[i] = a[i] + dt * sp.sin(a[i]) * w[i]   # nonlinear in a: its gradient reads a


@sp.kernel
def in_place(x: sp.Array, w: sp.Array, dt: sp.f32):
    for i in range(x.shape[0]):
        x[i] = x[i] + dt * sp.tanh(x[i] * w[i])


@sp.kernel
def forces(x: sp.Array, f: sp.Array):
    for i in range(x.shape[0] - 1):
        d = sp.sin(x[i + 1] - x[i])
        f[i] += d
        f[i + 1] += -d


@sp.kernel
def update(x: sp.Array, v: sp.Array, f: sp.Array, dt: sp.f32):
    for i in range(x.shape[0]):
        v[i] = v[i] + dt * sp.tanh(f[i])
        x[i] = x[i] + dt * v[i]            # reads the v it just stored


@sp.kernel
def square_sum(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] * x[i]


@sp.kernel
def mix(x: sp.Array, y: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[i] = sp.cos(x[i]) * y[i]


def step_np(a, w, dt=DT):
    return a + dt * np.sin(a) * w


def fd(loss_of, inputs, name, eps=1e-6):
    """Central differences of the float64 program `loss_of(dict of inputs)` w.r.t. inputs[name]."""
    base = {k: v.astype(np.float64) for k, v in inputs.items()}
    g = np.zeros(base[name].shape)
    for j in range(g.size):
        plus, minus = dict(base), dict(base)
        plus[name], minus[name] = base[name].copy(), base[name].copy()
        plus[name].flat[j] += eps
        minus[name].flat[j] -= eps
        g.flat[j] = (loss_of(plus) - loss_of(minus)) / (2 * eps)
    return g


def check(got, loss_of, inputs, name):
    want = fd(loss_of, inputs, name)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(want).max()))


# ---- double buffering and in-place updates --------------------------------------------------------------
@pytest.mark.parametrize("steps", [2, 3, 8, 17, 64])
def test_double_buffering(steps, rng):
    """step(a, b), step(b, a), ...: each launch overwrites what the launch before the previous one read."""
    inputs = {"x": rand(rng), "w": rand(rng)}
    a = sp.from_numpy(inputs["x"], needs_grad=True)
    b = sp.ndarray(sp.f32, (N,), needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        for s in range(steps):
            step(a, b, w, DT) if s % 2 == 0 else step(b, a, w, DT)
        square_sum(b if steps % 2 else a, loss)

    def loss_of(p):
        x = p["x"]
        for _ in range(steps):
            x = step_np(x, p["w"])
        return np.sum(x * x)

    np.testing.assert_allclose(loss[None], loss_of(inputs), rtol=1e-5)
    check(a.grad.to_numpy(), loss_of, inputs, "x")   # a's grad: the adjoint of its first contents
    check(w.grad.to_numpy(), loss_of, inputs, "w")
    # every launch but the last two overwrote contents a gradient reads: one copy each
    assert tape.checkpoint_bytes == (steps - 1) * 4 * N
    final = np.array(inputs["x"], np.float64)
    for _ in range(steps):
        final = step_np(final, inputs["w"])
    # arrays left as run; the steps converge to sin's zeros (0, +-pi), where float32 and float64 agree only
    # to a few float32 ulps of pi (2.4e-7) in absolute terms, whatever the device's sin
    np.testing.assert_allclose((b if steps % 2 else a).to_numpy(), final, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 4, 9])
def test_in_place_updates(steps, rng):
    inputs = {"x": rand(rng), "w": rand(rng)}
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for _ in range(steps):
            in_place(x, w, DT)
        square_sum(x, loss)

    def loss_of(p):
        x = p["x"]
        for _ in range(steps):
            x = x + DT * np.tanh(x * p["w"])
        return np.sum(x * x)

    check(x.grad.to_numpy(), loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


def test_one_array_per_step_keeps_nothing(rng):
    """The same program written with an array per step needs no copy, and gives the same gradient."""
    x0, w0 = rand(rng), rand(rng)
    xs = [sp.from_numpy(x0, needs_grad=True)] + [sp.ndarray(sp.f32, (N,), needs_grad=True) for _ in range(6)]
    w = sp.from_numpy(w0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss) as tape:
        for s in range(6):
            step(xs[s], xs[s + 1], w, DT)
        square_sum(xs[6], loss)
    assert tape.checkpoint_bytes == 0
    check(xs[0].grad.to_numpy(), lambda p: _six_steps(p), {"x": x0, "w": w0}, "x")


def _six_steps(p):
    x = p["x"]
    for _ in range(6):
        x = step_np(x, p["w"])
    return np.sum(x * x)


# ---- host writes inside a Tape ----------------------------------------------------------------------------
@pytest.mark.parametrize("steps", [1, 3, 6])
def test_force_buffer_cleared_with_fill_every_step(steps, rng):
    """f.fill(0.0); forces(x, f); update(x, v, f): the fill overwrites the f the previous update read, and
    its gradient clears f.grad (the old forces no longer reach the loss)."""
    inputs = {"x": rand(rng), "v": rand(rng)}
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    v = sp.from_numpy(inputs["v"], needs_grad=True)
    f = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for _ in range(steps):
            f.fill(0.0)
            forces(x, f)
            update(x, v, f, DT)
        square_sum(x, loss)

    def loss_of(p):
        x, v = p["x"], p["v"]
        for _ in range(steps):
            d = np.sin(x[1:] - x[:-1])
            f = np.zeros_like(x)
            f[:-1] += d
            f[1:] -= d
            v = v + DT * np.tanh(f)
            x = x + DT * v
        return np.sum(x * x)

    check(x.grad.to_numpy(), loss_of, inputs, "x")
    check(v.grad.to_numpy(), loss_of, inputs, "v")


@pytest.mark.parametrize("write", ["from_numpy", "fill", "setitem"])
def test_host_write_between_launches(write, rng):
    """step(x, y); <host write to x>; step(x, u); loss = |y|^2 + |u|^2: the first gradient sees the old x,
    and only the old values of x (all, or the one element set) reach x.grad."""
    inputs = {"x": rand(rng), "w": rand(rng)}
    z0 = rand(rng)
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    y, u = (sp.ndarray(sp.f32, (N,), needs_grad=True) for _ in range(2))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def overwrite(x):   # numpy: the same host write
        x = x.copy()
        if write == "from_numpy":
            x[:] = z0
        elif write == "fill":
            x[:] = 0.75
        else:
            x[3] = 0.25
        return x

    with sp.Tape(loss) as tape:
        step(x, y, w, DT)
        if write == "from_numpy":
            x.from_numpy(z0)
        elif write == "fill":
            x.fill(0.75)
        else:
            x[3] = 0.25
        step(x, u, w, DT)
        square_sum(y, loss)
        square_sum(u, loss)

    def loss_of(p):
        y = step_np(p["x"], p["w"])
        u = step_np(overwrite(p["x"]), p["w"])
        return np.sum(y * y) + np.sum(u * u)

    assert tape.checkpoint_bytes == 4 * N
    check(x.grad.to_numpy(), loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")
    np.testing.assert_allclose(x.to_numpy(), overwrite(inputs["x"]), rtol=1e-6)


def test_scratch_buffer_reused_across_kernels(rng):
    """One scratch array holds two different intermediates in turn."""
    inputs = {"x": rand(rng), "y": rand(rng), "w": rand(rng)}
    x, y, w = (sp.from_numpy(inputs[k], needs_grad=True) for k in "xyw")
    scratch, out1, out2 = (sp.ndarray(sp.f32, (N,), needs_grad=True) for _ in range(3))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        step(x, scratch, w, DT)
        mix(scratch, y, out1)
        step(y, scratch, w, DT)      # overwrites what mix's gradient reads
        mix(scratch, out1, out2)
        square_sum(out2, loss)

    def loss_of(p):
        s1 = step_np(p["x"], p["w"])
        o1 = np.cos(s1) * p["y"]
        s2 = step_np(p["y"], p["w"])
        o2 = np.cos(s2) * o1
        return np.sum(o2 * o2)

    for name, arr in (("x", x), ("y", y), ("w", w)):
        check(arr.grad.to_numpy(), loss_of, inputs, name)


# ---- broken chains ----------------------------------------------------------------------------------------
def test_intermediate_without_needs_grad_gets_a_temporary_grad(rng):
    inputs = {"x": rand(rng), "w": rand(rng)}
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    tmp = sp.ndarray(sp.f32, (N,))   # no needs_grad: the gradient must still flow through it
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        step(x, tmp, w, DT)
        step(tmp, y, w, DT)
        square_sum(y, loss)
    assert tmp.grad is None   # the companion lived as long as the Tape
    check(x.grad.to_numpy(), lambda p: np.sum(step_np(step_np(p["x"], p["w"]), p["w"]) ** 2), inputs, "x")
    check(w.grad.to_numpy(), lambda p: np.sum(step_np(step_np(p["x"], p["w"]), p["w"]) ** 2), inputs, "w")


def test_k_grad_names_an_output_without_grad(rng):
    x = sp.from_numpy(rand(rng), needs_grad=True)
    w = sp.from_numpy(rand(rng))
    out = sp.ndarray(sp.f32, (N,))
    step(x, out, w, DT)
    with pytest.raises(sp.ArgumentError, match="step.*output 'b' has no .grad"):
        step.grad(x, out, w, DT)
    assert np.all(x.grad.to_numpy() == 0)   # nothing ran
    # an output fed only by inputs without .grad: nothing to differentiate at all
    with pytest.raises(sp.ArgumentError, match="step.*nothing to differentiate.*needs_grad=True"):
        step.grad(sp.from_numpy(rand(rng)), out, w, DT)


captured_tmp = sp.ndarray(sp.f32, (N,))


@sp.kernel
def into_global(x: sp.Array):
    for i in range(x.shape[0]):
        captured_tmp[i] = sp.sin(x[i])


@sp.kernel
def global_square_sum(loss: sp.Array):
    for i in range(captured_tmp.shape[0]):
        loss[None] += captured_tmp[i] * captured_tmp[i]


def test_global_intermediate_without_grad_gets_a_temporary_grad(rng):
    """A module-level array without .grad is treated as an argument is: the Tape gives it a temporary one."""
    global captured_tmp
    captured_tmp = sp.ndarray(sp.f32, (N,))   # one of this test's runtime: the launch binds it by name
    x0 = rand(rng)
    x = sp.from_numpy(x0, needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        into_global(x)
        global_square_sum(loss)
    assert captured_tmp.grad is None
    xd = x0.astype(np.float64)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * np.sin(xd) * np.cos(xd), rtol=1e-5, atol=1e-6)


# ---- what cannot be kept: errors that say why ---------------------------------------------------------------
def test_checkpoint_budget(rng):
    x0, w0 = rand(rng), rand(rng)

    def run(budget):
        a = sp.from_numpy(x0, needs_grad=True)
        b = sp.ndarray(sp.f32, (N,), needs_grad=True)
        w = sp.from_numpy(w0, needs_grad=True)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        with sp.Tape(loss, checkpoint_budget=budget) as tape:
            for s in range(5):
                step(a, b, w, DT) if s % 2 == 0 else step(b, a, w, DT)
            square_sum(b, loss)
        return tape, a

    tape, a = run(None)   # exactly the 4 copies this program needs
    assert tape.checkpoint_bytes == 4 * 4 * N
    # past a budget the Tape recomputes (tests/tape/test_recompute.py) from a and b as it found them: 2 * 4 * N
    # bytes (not the loss, which the Tape zeroes: a replay zeroes it again)
    with pytest.raises(sp.AutodiffRuleError) as info:
        run(2 * 4 * N - 4)
    msg = str(info.value)
    assert f"checkpoint_budget={2 * 4 * N - 4} bytes" in msg and f"at least {2 * 4 * N} bytes" in msg
    tape, a2 = run(3 * 4 * N)   # the runtime is still usable, and the gradients agree
    assert tape.recomputed_launches > 0 and tape.checkpoint_bytes <= 3 * 4 * N
    np.testing.assert_allclose(a2.grad.to_numpy(), a.grad.to_numpy(), rtol=1e-6)


@sp.kernel
def two_loops(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.exp(x[i])
    for i in range(x.shape[0]):
        x[i] = sp.sin(y[i])        # reads the y the first loop wrote...
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.0          # ...which the third loop overwrites in the same launch


def test_contents_between_the_loops_of_a_launch(rng):
    """y exists between the first and third loop only: the gradient recomputes it (launch_states.py)."""
    x0 = rand(rng)
    x = sp.from_numpy(x0, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        two_loops(x, y)
        square_sum(y, loss)
    e = np.exp(x0.astype(np.float64))
    np.testing.assert_allclose(loss[None], np.sum(4 * np.sin(e) ** 2), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), 8 * np.sin(e) * np.cos(e) * e, rtol=1e-4, atol=1e-6)


def test_tape_after_an_error_releases_its_copies(rng):
    a = sp.from_numpy(rand(rng), needs_grad=True)
    w = sp.from_numpy(rand(rng))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(RuntimeError):
        with sp.Tape(loss) as tape:
            in_place(a, w, DT)
            in_place(a, w, DT)
            raise RuntimeError("user code failed")
    assert tape.checkpoints.kept == {}


def test_forward_mode_through_an_intermediate_without_dual(rng):
    """FwdMode gives an unmarked intermediate a temporary .dual; k.fwd alone names the output instead."""
    x0, w0 = rand(rng), rand(rng)
    x = sp.from_numpy(x0, needs_dual=True)
    w = sp.from_numpy(w0)
    tmp = sp.ndarray(sp.f32, (N,))
    y = sp.ndarray(sp.f32, (N,), needs_dual=True)
    seed = rng.uniform(-1, 1, N)
    with sp.FwdMode(loss=y, param=x, seed=seed):
        step(x, tmp, w, DT)
        step(tmp, y, w, DT)
    assert tmp.dual is None
    x64, w64 = x0.astype(np.float64), w0.astype(np.float64)
    d1 = 1 + DT * np.cos(x64) * w64
    d2 = 1 + DT * np.cos(step_np(x64, w64)) * w64
    np.testing.assert_allclose(y.dual.to_numpy(), seed * d1 * d2, rtol=1e-5)
    with pytest.raises(sp.ArgumentError, match="step.*output 'b' has no .dual"):
        step.fwd(x, tmp, w, DT)


# ---- in-place updates meet the other features -------------------------------------------------------------
@sp.kernel
def settle(x: sp.Array, w: sp.Array):
    """In place, with a loop whose trip count depends on the data (its adstack depth is measured on the
    device from the contents the gradient binds)."""
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while v * v > 0.05 and k < 6:
            v = v * 0.8 + 0.01 * sp.sin(v * w[i])
            k += 1
        x[i] = v + 0.1 * w[i]


def settle_np(x, w):
    x = x.copy()
    for i in range(len(x)):
        v, k = x[i], 0
        while v * v > 0.05 and k < 6:
            v = v * 0.8 + 0.01 * np.sin(v * w[i])
            k += 1
        x[i] = v + 0.1 * w[i]
    return x


def test_in_place_with_a_data_dependent_loop(rng):
    inputs = {"x": rand(rng, lo=0.3, hi=1.0), "w": rand(rng)}
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for _ in range(3):
            settle(x, w)
        square_sum(x, loss)

    def loss_of(p):
        x = p["x"]
        for _ in range(3):
            x = settle_np(x, p["w"])
        return np.sum(x * x)

    check(x.grad.to_numpy(), loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


state = None   # a global ndarray, made in the test (a module-level one would outlive sp.reset())


@sp.kernel
def advance_global(w: sp.Array):
    for i in range(state.shape[0]):
        state[i] = state[i] + DT * sp.sin(state[i]) * w[i]


@sp.kernel
def aliased_update(a: sp.Array, b: sp.Array):
    for i in range(a.shape[0]):
        b[i] = sp.cos(a[i]) + a[i]


def test_global_state_updated_in_place_and_aliased_arguments(rng):
    """A captured global array advanced in place, and one array bound to two parameters (read through one,
    written through the other): both need the contents before the launch."""
    global state
    inputs = {"x": rand(rng), "w": rand(rng)}
    state = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        for _ in range(3):
            advance_global(w)
            aliased_update(state, state)
        square_sum(state, loss)

    def loss_of(p):
        x = p["x"]
        for _ in range(3):
            x = step_np(x, p["w"])
            x = np.cos(x) + x
        return np.sum(x * x)

    check(state.grad.to_numpy(), loss_of, inputs, "x")
    check(w.grad.to_numpy(), loss_of, inputs, "w")


@sp.kernel
def spin(p: sp.Array, q: sp.Array):
    for i in range(p.shape[0]):
        q[i] = sp.vec2(sp.cos(p[i][0]) * p[i][1], p[i][0] * p[i][1])


@sp.kernel
def vec_norms(p: sp.Array, loss: sp.Array):
    for i in range(p.shape[0]):
        loss[None] += sp.dot(p[i], p[i])


def test_vector_setitem_clears_one_element(rng):
    """q[3] = (v0, v1) on an ndarray of vec2 replaces both components of element 3."""
    inputs = {"p": rand(rng, 2 * N).reshape(N, 2)}
    p = sp.from_numpy(inputs["p"], dtype=sp.vec2, needs_grad=True)
    q = sp.ndarray(sp.vec2, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        spin(p, q)
        q[3] = (0.5, -0.25)
        spin(q, p)
        vec_norms(p, loss)

    def spin_np(p):
        return np.stack([np.cos(p[:, 0]) * p[:, 1], p[:, 0] * p[:, 1]], axis=1)

    def loss_of(v):
        q = spin_np(v["p"])
        q[3] = (0.5, -0.25)
        return np.sum(spin_np(q) ** 2)

    check(p.grad.to_numpy(), loss_of, inputs, "p")


def test_same_tape_again_with_a_temporary_grad(rng):
    """A training loop re-runs one Tape: the unmarked intermediate gets a new temporary .grad each time, and
    a gradient launch repeated with the same arguments (here square_sum's, the last of one backward pass
    and the first of the next) must bind the new .grad, not replay the old dispatch."""
    inputs = {"x": rand(rng), "w": rand(rng)}
    x = sp.from_numpy(inputs["x"], needs_grad=True)
    w = sp.from_numpy(inputs["w"], needs_grad=True)
    tmp = sp.ndarray(sp.f32, (N,))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def loss_of(p):
        return 2 * np.sum(step_np(p["x"], p["w"]) ** 2)

    for _ in range(3):
        loss.fill(0.0)
        with sp.Tape(loss):
            step(x, tmp, w, DT)
            square_sum(tmp, loss)
            square_sum(tmp, loss)
        check(x.grad.to_numpy(), loss_of, inputs, "x")
        check(w.grad.to_numpy(), loss_of, inputs, "w")

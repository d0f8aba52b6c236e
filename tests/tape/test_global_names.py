"""Kernels that read ndarrays through global names (module-level or closure, Taichi-field style) bind what
the names refer to at each launch, as Python would: a notebook cell run again, `allocate_fields()` called
again with other sizes. Forward launches, k.grad, k.fwd, Tape and FwdMode, against float64 references."""
import sys
import weakref

import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

x = None        # module-level ndarrays (Taichi fields), bound by each test in its own runtime
out = None
weights = None
loss = None


def rand(rng, shape, lo=0.2, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


def allocate_fields(n, rng, dtype=sp.f32):
    """What a Taichi program does at its start, and a notebook again with other sizes."""
    global x, out, weights, loss
    x = sp.from_numpy(rand(rng, n).astype(np.float64 if dtype == sp.f64 else np.float32), needs_grad=True)
    weights = sp.from_numpy(rand(rng, n), needs_grad=True)
    out = sp.ndarray(dtype, (n,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)


@sp.kernel
def double():
    for i in range(x.shape[0]):
        out[i] = 2 * x[i]


@sp.func
def weighted(i):
    return weights[i] * sp.sin(x[i])   # globals read inside a func


@sp.kernel
def forward():
    for i in range(x.shape[0]):
        out[i] = weighted(i)


@sp.kernel
def squared_loss():
    for i in range(out.shape[0]):
        loss[None] += out[i] * out[i]


def compiles_of(monkeypatch):
    """The specialisations compiled from now on (a list the test can read)."""
    seen = []
    kmod = sys.modules["spvad.kernel"]
    real = kmod.compile_kernel
    monkeypatch.setattr(kmod, "compile_kernel", lambda *a: seen.append(a[1]) or real(*a))
    return seen


def test_a_rebound_global_is_read_by_the_next_launch(rng, monkeypatch):
    allocate_fields(6, rng)
    double()
    np.testing.assert_allclose(out.to_numpy(), 2 * x.to_numpy())
    compiles = compiles_of(monkeypatch)
    for _ in range(3):   # a notebook cell run again: new arrays of the same type, no compile
        allocate_fields(6, rng)
        double()
        np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy())
        double()   # the launch fast path, with the names unchanged
        np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy())
    assert compiles == []
    allocate_fields(11, rng)   # other sizes: the shapes come from the new arrays
    double()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy())
    assert out.shape == (11,) and compiles == []


def test_a_global_rebound_to_another_dtype_or_ndim_specialises_again(rng, monkeypatch):
    if sp.device_info()["backend"] != "interp" and not sp.device_info()["features"].get("float64"):
        pytest.skip("no float64 on this device")
    allocate_fields(5, rng)
    double()
    compiles = compiles_of(monkeypatch)
    allocate_fields(7, rng, sp.f64)
    double()
    assert out.to_numpy().dtype == np.float64 and len(compiles) == 1
    np.testing.assert_array_equal(out.to_numpy(), 2.0 * x.to_numpy())   # float64 all the way
    allocate_fields(5, rng)   # back to f32: that specialisation is still there
    double()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy())
    assert len(compiles) == 1


def test_tape_loss_and_gradients_come_from_the_rebound_arrays(rng):
    """The issue's case: under a Tape, after re-binding, the loss and gradients of the new arrays."""
    for n in (4, 9, 4):
        allocate_fields(n, rng)
        with sp.Tape(loss):
            forward()
            squared_loss()
        xd, wd = x.to_numpy().astype(np.float64), weights.to_numpy().astype(np.float64)
        u = wd * np.sin(xd)
        np.testing.assert_allclose(loss[None], np.sum(u * u), rtol=1e-5)
        np.testing.assert_allclose(x.grad.to_numpy(), 2 * u * wd * np.cos(xd), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(weights.grad.to_numpy(), 2 * u * np.sin(xd), rtol=1e-5, atol=1e-6)


def test_one_tape_over_launches_before_and_after_rebinding(rng):
    """Each recorded launch's gradient binds the arrays its launch bound, not those the names hold later."""
    global x, weights, out
    allocate_fields(5, rng)
    first = (x, weights)
    total = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(total):
        forward()
        accumulate(out, total)
        x = sp.from_numpy(rand(rng, 5), needs_grad=True)   # re-bound inside the block
        weights = sp.from_numpy(rand(rng, 5), needs_grad=True)
        forward()   # writes the same `out`: the Tape keeps what the first gradient reads
        accumulate(out, total)
    for xs, ws in (first, (x, weights)):
        xd, wd = xs.to_numpy().astype(np.float64), ws.to_numpy().astype(np.float64)
        np.testing.assert_allclose(xs.grad.to_numpy(), wd * np.cos(xd), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ws.grad.to_numpy(), np.sin(xd), rtol=1e-5, atol=1e-6)


@sp.kernel
def accumulate(u: sp.Array, total: sp.Array):
    for i in range(u.shape[0]):
        total[None] += u[i]


def test_k_grad_and_forward_mode_after_rebinding(rng):
    for n in (3, 8):
        allocate_fields(n, rng)
        forward()
        out.grad.from_numpy(rand(rng, n))
        seed = out.grad.to_numpy().astype(np.float64)
        forward.grad()
        xd, wd = x.to_numpy().astype(np.float64), weights.to_numpy().astype(np.float64)
        np.testing.assert_allclose(x.grad.to_numpy(), seed * wd * np.cos(xd), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(weights.grad.to_numpy(), seed * np.sin(xd), rtol=1e-5, atol=1e-6)


@sp.kernel
def scaled(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = dual_in[i] * sp.cos(dual_in[i])


dual_in = None


def test_fwd_mode_and_k_fwd_read_the_rebound_array(rng):
    global dual_in
    for n in (4, 6):
        dual_in = sp.from_numpy(rand(rng, n), needs_dual=True)
        y = sp.ndarray(sp.f32, (n,), needs_dual=True)
        seed = rand(rng, n)
        with sp.FwdMode(loss=y, param=dual_in, seed=seed):
            scaled(y)
        v = dual_in.to_numpy().astype(np.float64)
        np.testing.assert_allclose(y.dual.to_numpy(), seed * (np.cos(v) - v * np.sin(v)), rtol=1e-5, atol=1e-6)
        dual_in.dual.from_numpy(seed)   # (FwdMode cleared its seed on exit)
        scaled.fwd(y)   # k.fwd with the duals as they are: the same derivative
        np.testing.assert_allclose(y.dual.to_numpy(), seed * (np.cos(v) - v * np.sin(v)), rtol=1e-5, atol=1e-6)


def test_closure_names_rebound_with_nonlocal(rng):
    def make():
        field = sp.from_numpy(rand(rng, 4))
        result = sp.ndarray(sp.f32, (4,))

        @sp.kernel
        def cube():
            for i in range(field.shape[0]):
                result[i] = field[i] * field[i] * field[i]

        def rebind(values):
            nonlocal field
            field = sp.from_numpy(values)
        return cube, rebind, lambda: field, result

    cube, rebind, field, result = make()
    for _ in range(3):
        cube()
        np.testing.assert_allclose(result.to_numpy(), field().to_numpy().astype(np.float64) ** 3, rtol=1e-6)
        rebind(rand(rng, 4))


first_name = second_name = None


@sp.kernel
def difference(d: sp.Array):
    for i in range(d.shape[0]):
        d[i] = first_name[i] - 2.0 * second_name[i]


def test_two_names_of_one_array_part_later(rng):
    global first_name, second_name
    first_name = second_name = sp.from_numpy(rand(rng, 5))
    d = sp.ndarray(sp.f32, (5,))
    difference(d)
    np.testing.assert_allclose(d.to_numpy(), -first_name.to_numpy(), rtol=1e-6)
    second_name = sp.from_numpy(rand(rng, 5))
    difference(d)
    np.testing.assert_allclose(d.to_numpy(), first_name.to_numpy() - 2.0 * second_name.to_numpy(), rtol=1e-6)


def test_a_rebound_name_lets_the_old_array_go(rng):
    allocate_fields(4, rng)
    double()
    old = weakref.ref(x)
    allocate_fields(4, rng)
    double()
    assert old() is None   # neither the compiled kernel nor its replay keeps it


def test_a_name_rebound_to_something_else(rng):
    global x
    allocate_fields(4, rng)
    double()
    x = 3.0   # no longer an ndarray: compiling again says which name changed
    with pytest.raises(sp.CompileError, match="'x' referred to an ndarray .* now refers to a float"):
        double()
    del x
    with pytest.raises(sp.CompileError, match="'x' referred to an ndarray .* no longer defined"):
        double()
    allocate_fields(4, rng)   # and back
    double()
    np.testing.assert_allclose(out.to_numpy(), 2.0 * x.to_numpy())

"""Custom gradients: `@sp.grad_replaced` functions launch kernels; `sp.Tape` runs the `@sp.grad_for`
function instead of the generated gradients of those launches. The hand-written gradients here are
deliberately 2x (or 3x) the true ones, so a match proves the supplied gradient ran and the generated
one did not."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

N = 10


def rand(rng, shape, lo=0.2, hi=1.2):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


@sp.kernel
def square(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]


@sp.kernel
def square_grad_scaled(x: sp.Array, y: sp.Array, factor: sp.f32):
    """factor * the true gradient of `square`: x.grad += factor * 2 x * y.grad."""
    for i in range(x.shape[0]):
        x.grad[i] += factor * 2.0 * x[i] * y.grad[i]


@sp.kernel
def sine(x: sp.Array, t: sp.Array):
    for i in range(x.shape[0]):
        t[i] = sp.sin(x[i])


@sp.kernel
def cube_of(t: sp.Array, y: sp.Array):
    for i in range(t.shape[0]):
        y[i] = t[i] * t[i] * t[i]


@sp.kernel
def sin_cube_grad_scaled(x: sp.Array, y: sp.Array, factor: sp.f32):
    """factor * d/dx sin(x)^3 = factor * 3 sin^2 cos."""
    for i in range(x.shape[0]):
        s = sp.sin(x[i])
        x.grad[i] += factor * 3.0 * s * s * sp.cos(x[i]) * y.grad[i]


@sp.kernel
def affine(x: sp.Array, u: sp.Array):
    for i in range(x.shape[0]):
        u[i] = 3.0 * x[i] + sp.exp(x[i] * 0.5)


@sp.kernel
def weighted_sum(v: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(v.shape[0]):
        loss[None] += sp.sin(v[i]) * w[i]


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i]


@sp.grad_replaced
def square_replaced(x, y):
    square(x, y)


@sp.grad_for(square_replaced)
def square_replaced_grad(x, y):
    square_grad_scaled(x, y, 2.0)


@sp.grad_replaced
def sin_cube(x, t, y):
    """Launches two kernels; neither's generated gradient may run."""
    sine(x, t)
    cube_of(t, y)


@sp.grad_for(sin_cube)
def sin_cube_grad(x, t, y):
    sin_cube_grad_scaled(x, y, 2.0)


def arrays(rng, *names, n=N):
    x0 = rand(rng, n)
    out = {"x": sp.from_numpy(x0, needs_grad=True)}
    for name in names:
        out[name] = sp.ndarray(sp.f32, (n,), needs_grad=True)
    out["loss"] = sp.ndarray(sp.f32, (), needs_grad=True)
    return x0.astype(np.float64), out


def test_supplied_gradient_replaces_the_generated_one(rng):
    x0, a = arrays(rng, "y")
    with sp.Tape(loss=a["loss"]):
        square_replaced(a["x"], a["y"])
        total(a["y"], a["loss"])
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 2 * (2 * x0), rtol=1e-6)   # 2x the true 2x
    np.testing.assert_allclose(a["y"].to_numpy(), x0 * x0, rtol=1e-6)             # the forward ran


def test_without_replacement_the_true_gradient(rng):
    """Control: the same program with the plain kernel gives the true gradient."""
    x0, a = arrays(rng, "y")
    with sp.Tape(loss=a["loss"]):
        square(a["x"], a["y"])
        total(a["y"], a["loss"])
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 2 * x0, rtol=1e-6)


def test_replaced_function_launching_several_kernels(rng):
    x0, a = arrays(rng, "t", "y")
    with sp.Tape(loss=a["loss"]):
        sin_cube(a["x"], a["t"], a["y"])
        total(a["y"], a["loss"])
    true = 3 * np.sin(x0) ** 2 * np.cos(x0)
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 2 * true, rtol=1e-5, atol=1e-6)
    # the intermediate's gradient was zeroed by the Tape and never written by a generated gradient
    np.testing.assert_array_equal(a["t"].grad.to_numpy(), 0.0)


def test_replaced_function_between_ordinary_kernels(rng):
    """x -> affine -> u -> square_replaced -> v -> weighted_sum -> loss. The ordinary kernels' gradients
    still run, in reverse order around the supplied one: weighted_sum's gives v.grad before the custom
    gradient reads it, and affine's turns the u.grad it leaves into x.grad."""
    x0, a = arrays(rng, "u", "v")
    w0 = rand(rng, N, 0.5, 1.5)
    w = sp.from_numpy(w0)
    seen = {}

    @sp.grad_replaced
    def middle(u, v):
        square(u, v)

    @sp.grad_for(middle)
    def middle_grad(u, v):
        seen["v.grad"] = v.grad.to_numpy()
        seen["u.grad"] = u.grad.to_numpy()
        square_grad_scaled(u, v, 2.0)

    with sp.Tape(loss=a["loss"]):
        affine(a["x"], a["u"])
        middle(a["u"], a["v"])
        weighted_sum(a["v"], w, a["loss"])

    u = 3 * x0 + np.exp(0.5 * x0)
    v = u * u
    dv = np.cos(v) * w0                      # weighted_sum's gradient, ran first
    du = 2 * (2 * u) * dv                    # the supplied (doubled) gradient, ran second
    dx = (3 + 0.5 * np.exp(0.5 * x0)) * du   # affine's gradient, ran last
    np.testing.assert_allclose(seen["v.grad"], dv, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(seen["u.grad"], 0.0)   # affine's gradient had not run yet
    # affine's gradient consumed u.grad (a store `u[i] = e` passes u.grad to e and zeroes it)
    np.testing.assert_array_equal(a["u"].grad.to_numpy(), 0.0)
    np.testing.assert_allclose(a["x"].grad.to_numpy(), dx, rtol=1e-4, atol=1e-4)


def test_nested_replaced_functions_use_the_outer_gradient_only(rng):
    """A replaced function called inside another: the outer one's gradient covers it (no double count)."""
    x0, a = arrays(rng, "y")

    @sp.grad_replaced
    def outer(x, y):
        square_replaced(x, y)

    @sp.grad_for(outer)
    def outer_grad(x, y):
        square_grad_scaled(x, y, 3.0)

    with sp.Tape(loss=a["loss"]):
        outer(a["x"], a["y"])
        total(a["y"], a["loss"])
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 3 * (2 * x0), rtol=1e-6)


def test_keyword_arguments_reach_the_gradient(rng):
    x0, a = arrays(rng, "y")

    @sp.grad_replaced
    def scaled_square(x, y, factor=1.0):
        square(x, y)

    @sp.grad_for(scaled_square)
    def scaled_square_grad(x, y, factor=1.0):
        square_grad_scaled(x, y, factor)

    with sp.Tape(loss=a["loss"]):
        scaled_square(a["x"], y=a["y"], factor=4.0)
        total(a["y"], a["loss"])
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 4 * (2 * x0), rtol=1e-6)


def test_outside_a_tape_the_function_just_runs(rng):
    x0, a = arrays(rng, "y")
    square_replaced(a["x"], a["y"])
    np.testing.assert_allclose(a["y"].to_numpy(), x0 * x0, rtol=1e-6)
    np.testing.assert_array_equal(a["x"].grad.to_numpy(), 0.0)


def test_grad_for_needs_a_replaced_function():
    def plain(x):
        pass
    with pytest.raises(sp.SpvadError, match="grad_replaced"):
        sp.grad_for(plain)


def test_missing_gradient_raises_at_tape_exit(rng):
    x0, a = arrays(rng, "y")

    @sp.grad_replaced
    def orphan(x, y):
        square(x, y)

    with pytest.raises(sp.SpvadError, match="orphan has no @sp.grad_for"):
        with sp.Tape(loss=a["loss"]):
            orphan(a["x"], a["y"])
            total(a["y"], a["loss"])


def test_supplied_gradient_sees_the_contents_its_call_left(rng):
    """square_replaced(x, y), then x is overwritten in place: the supplied gradient reads x, so the Tape
    puts back the x of the call for it, and restores the final x afterwards."""
    x0, a = arrays(rng, "y")
    seen = {}

    @sp.grad_for(square_replaced)
    def spy_grad(x, y):
        seen["x"] = x.to_numpy()
        square_grad_scaled(x, y, 1.0)

    try:
        with sp.Tape(loss=a["loss"]) as tape:
            square_replaced(a["x"], a["y"])
            total(a["y"], a["loss"])
            a["x"].fill(5.0)   # overwrites what the supplied gradient reads
    finally:
        sp.grad_for(square_replaced)(square_replaced_grad)
    np.testing.assert_allclose(seen["x"], x0, rtol=1e-6)
    np.testing.assert_allclose(a["x"].grad.to_numpy(), 2 * x0, rtol=1e-6)   # of x's first contents
    assert tape.checkpoint_bytes == 4 * N
    np.testing.assert_array_equal(a["x"].to_numpy(), 5.0)

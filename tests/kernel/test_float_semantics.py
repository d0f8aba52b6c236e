"""fast_math=False: float operations are computed exactly as written (SPIR-V NoContraction on every float
arithmetic result), so error-free transformations work and the device agrees with the interpreter bit for
bit; fast_math=True (the default) lets the driver reassociate and contract, as lavapipe does."""
import re

import numpy as np
import pytest

import spvad as sp
from oracle import assert_same, launch_and_interpret
from spvad import runtime
from spvad.errors import ArgumentError
from spvad.spirv import tools

F32 = np.float32


def two_sum(a: sp.Array, b: sp.Array, e: sp.Array):
    for i in range(a.shape[0]):
        s = a[i] + b[i]
        e[i] = (s - a[i]) - b[i]   # with |a| >= |b|: exactly s - (a + b), when computed as written


def kahan(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        total = 0.0
        c = 0.0
        for k in range(x.shape[1]):
            y = x[i, k] - c
            t = total + y
            c = (t - total) - y
            total = t
        out[i] = total


def mul_add(a: sp.Array, b: sp.Array, c: sp.Array, out: sp.Array):
    for i in range(a.shape[0]):
        out[i] = a[i] * b[i] + c[i]


def cubic_flow(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    """Only + - *: a gradient the device and the interpreter compute alike, bit for bit."""
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v + 0.05 * (w[i] * v - v * v * v)
        y[i] = v


EXACT = {f.__name__: sp.kernel(fast_math=False)(f) for f in (two_sum, kahan, mul_add, cubic_flow)}
FAST = {f.__name__: sp.kernel(fast_math=True)(f) for f in (two_sum, mul_add)}


def on_lavapipe():
    info = sp.device_info()
    return info["backend"] == "vulkan" and "llvmpipe" in info["name"].lower()


def f32_steps(fn, *arrays):
    """numpy float32, one rounding per operation: what `fn` means as written."""
    with np.errstate(all="ignore"):
        return fn(*(np.asarray(a, F32) for a in arrays))


def test_two_sum_error_term_is_exact(rng):
    """TwoSum's error term e = (s - a) - b with s = a + b: s - e == a + b exactly in float64; the device
    agrees with the interpreter bit for bit. With fast_math=True lavapipe folds e to 0 (measured)."""
    a = np.concatenate([[1.0], rng.uniform(1.0, 2.0, 31) * np.where(rng.random(31) < 0.5, -1, 1)]).astype(F32)
    b = np.concatenate([[1e-8], rng.uniform(-1.0, 1.0, 31) * 10.0 ** rng.integers(-9, 0, 31)]).astype(F32)
    arrays = [sp.from_numpy(a), sp.from_numpy(b), sp.ndarray(sp.f32, 32)]
    (_, _, e), (_, _, e_ref) = launch_and_interpret(EXACT["two_sum"], *arrays)
    assert_same(e, e_ref, what="device vs interpreter")
    s = a + b   # numpy float32: one rounding
    np.testing.assert_array_equal(s.astype(np.float64) - e.astype(np.float64), a.astype(np.float64) + b)
    assert e[0] == np.float32(-1e-8) and np.count_nonzero(e) > 16   # the error terms are really there
    FAST["two_sum"](*arrays)
    if on_lavapipe():   # the driver reassociates unless told not to: what fast_math=True allows
        assert np.all(arrays[2].to_numpy() == 0)


def test_kahan_summation_of_a_long_f32_series(rng):
    """A compensated sum of 2,048 f32 terms is within 1 ulp of the float64 sum where the naive f32 sum is
    off by hundreds; the device and the interpreter agree bit for bit."""
    x = np.empty((3, 2048), F32)
    x[:, 0] = [1.0, -2.0, 3.0]
    x[:, 1:] = rng.uniform(1e-8, 5e-8, (3, 2047)) * np.where(rng.random((3, 2047)) < 0.8, 1, -1)
    out = sp.ndarray(sp.f32, 3)
    (_, got), (_, ref) = launch_and_interpret(EXACT["kahan"], sp.from_numpy(x), out)
    assert_same(got, ref, what="Kahan sum, device vs interpreter")
    exact = x.astype(np.float64).sum(axis=1)
    ulp = np.spacing(np.abs(exact).astype(F32)).astype(np.float64)
    assert np.all(np.abs(got - exact) <= ulp), (got, exact)
    naive = f32_steps(lambda v: np.cumsum(v, axis=1, dtype=F32)[:, -1], x)
    assert np.all(np.abs(naive - exact) > 100 * ulp)   # the series needs the compensation


def test_products_are_not_fused_into_fma(rng):
    """a*b + c rounds the product first: a = b = 1 + 2**-12, c = -(1 + 2**-11) gives 0, not the fused
    2**-24; random rows agree with numpy's two roundings bit for bit."""
    u = 1 + 2.0 ** -12
    a = np.concatenate([[u], rng.uniform(-2, 2, 63)]).astype(F32)
    b = np.concatenate([[u], rng.uniform(-2, 2, 63)]).astype(F32)
    c = np.concatenate([[-(1 + 2.0 ** -11)], rng.uniform(-2, 2, 63)]).astype(F32)
    want = f32_steps(lambda p, q, r: p * q + r, a, b, c)
    assert want[0] == 0.0 and np.float64(a[0]) * b[0] + c[0] == 2.0 ** -24   # the fused result differs
    (_, _, _, got), (_, _, _, ref) = launch_and_interpret(EXACT["mul_add"], *map(sp.from_numpy, (a, b, c)),
                                                          sp.ndarray(sp.f32, 64))
    assert_same(got, want, what="device vs numpy float32")
    assert_same(ref, want, what="interpreter vs numpy float32")


def cubic_reference(x, w, n):
    """float64 values and d y / d x, d y / d w (forward recursion of the derivatives)."""
    v, dx, dw = x.astype(np.float64), np.ones(len(x)), np.zeros(len(x))
    w = w.astype(np.float64)
    for _ in range(n):
        dv = 1 + 0.05 * (w - 3 * v * v)
        dx, dw = dv * dx, dv * dw + 0.05 * v
        v = v + 0.05 * (w * v - v ** 3)
    return v, dx, dw


def cubic_gradients(x, w, n):
    xs, ws = sp.from_numpy(x, needs_grad=True), sp.from_numpy(w, needs_grad=True)
    y = sp.ndarray(sp.f32, len(x), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    @sp.kernel(fast_math=False)
    def total(y: sp.Array, loss: sp.Array):
        for i in range(y.shape[0]):
            loss[None] += y[i]

    with sp.Tape(loss):
        EXACT["cubic_flow"](xs, ws, y, n)
        total(y, loss)
    return y.to_numpy(), xs.grad.to_numpy(), ws.grad.to_numpy()


def test_gradients_are_right_and_bit_identical_on_both_backends(rng):
    """Tape over a dynamic loop (adstacks) under fast_math=False: gradients against float64, and the
    Vulkan device and the interpreter backend agree bit for bit."""
    x, w, n = rng.uniform(0.2, 0.9, 16).astype(F32), rng.uniform(0.5, 1.5, 16).astype(F32), 24
    vulkan = cubic_gradients(x, w, n)
    sp.init(backend="interp", fast_math=False)
    try:
        interp = cubic_gradients(x, w, n)
    finally:
        sp.init()
    for got, oracle, what in zip(vulkan, interp, ("y", "x.grad", "w.grad")):
        np.testing.assert_array_equal(got, oracle, err_msg=what)
    for got, want in zip(vulkan, cubic_reference(x, w, n)):
        np.testing.assert_allclose(got, want, rtol=2e-5)


@sp.func
def bump(p, r):
    return p * p * r - p * r * r


def inner(x: sp.Array, g: sp.Array):
    for i in range(x.shape[0]):
        g[i] = sp.grad(bump, argnums=0)(x[i], 0.75) + x[i] * x[i]


@pytest.mark.backends
def test_forward_mode_and_in_kernel_derivatives_under_exact_math(rng):
    """k.fwd and the gradient of a kernel taking sp.grad inside, compiled with fast_math=False."""
    k = sp.kernel(fast_math=False)(inner)
    xv = rng.uniform(-1, 1, 8).astype(F32)
    x = sp.from_numpy(xv, needs_grad=True, needs_dual=True)
    g = sp.ndarray(sp.f32, 8, needs_grad=True, needs_dual=True)
    x.dual.fill(1.0)
    k.fwd(x, g)
    xd, r = xv.astype(np.float64), 0.75
    tol = dict(rtol=1e-6, atol=1e-6)   # a few f32 roundings of values of size 1 (some cancel to near 0)
    np.testing.assert_allclose(g.to_numpy(), 2 * xd * r - r * r + xd * xd, **tol)
    np.testing.assert_allclose(g.dual.to_numpy(), 2 * r + 2 * xd, **tol)   # d/dx of the above
    g.grad.from_numpy(rng.uniform(0.5, 1.5, 8).astype(F32))
    seed = g.grad.to_numpy().astype(np.float64)
    k.grad(x, g)
    np.testing.assert_allclose(x.grad.to_numpy(), seed * (2 * r + 2 * xd), **tol)


def float_results(disassembly):
    """(ids of float arithmetic results, ids decorated NoContraction) in a disassembled module."""
    ops = set(re.findall(r"(%\w+) = Op(?:FNegate|FAdd|FSub|FMul|FDiv|FRem|FMod|VectorTimesScalar|Dot) ",
                         disassembly))
    return ops, set(re.findall(r"OpDecorate (%\w+) NoContraction", disassembly))


@pytest.mark.parametrize("grad", [False, True], ids=["primal", "gradient"])
def test_every_float_operation_is_decorated(grad):
    """fast_math=False decorates every float arithmetic result (primal, gradient, in-kernel derivative);
    fast_math=True decorates none."""
    x = sp.from_numpy(np.linspace(-1, 1, 8, dtype=F32), needs_grad=True)
    g = sp.ndarray(sp.f32, 8, needs_grad=True)
    exact = sp.kernel(fast_math=False)(inner).disassemble(x, g, grad=grad)
    ops, decorated = float_results(exact)
    assert len(ops) > 5 and ops <= decorated
    ops, decorated = float_results(sp.kernel(inner).disassemble(x, g, grad=grad))
    assert len(ops) > 5 and not decorated


def test_the_kernel_option_wins_over_init_and_keys_the_caches():
    """sp.init(fast_math=False) applies to kernels without the option; a kernel's own option wins; a
    kernel compiled under one setting (disk cache included) is never reused under the other."""
    x = sp.from_numpy(np.ones(4, F32))
    out = sp.ndarray(sp.f32, 4)
    default, exact, fast = sp.kernel(mul_add), sp.kernel(fast_math=False)(mul_add), sp.kernel(fast_math=True)(mul_add)
    decorated = {name: "NoContraction" in tools.disassemble(k.spirv(x, x, x, out))
                 for name, k in (("default", default), ("exact", exact), ("fast", fast))}
    assert decorated == {"default": False, "exact": True, "fast": False}
    sp.init(fast_math=False)
    try:
        assert runtime.get().fast_math is False
        x = sp.from_numpy(np.ones(4, F32))
        out = sp.ndarray(sp.f32, 4)
        decorated = {name: "NoContraction" in tools.disassemble(k.spirv(x, x, x, out))
                     for name, k in (("default", default), ("exact", exact), ("fast", fast))}
        assert decorated == {"default": True, "exact": True, "fast": False}
    finally:
        sp.init()


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_fast_math_must_be_a_bool(bad):
    if bad is not None:
        with pytest.raises(ArgumentError, match=r"@sp.kernel\(fast_math=...\) must be True or False"):
            sp.kernel(fast_math=bad)(mul_add)
    with pytest.raises(ArgumentError, match=r"sp.init\(fast_math=...\) must be True or False"):
        sp.init(fast_math=bad)
    assert runtime.current() is None or runtime.current().fast_math is True   # nothing changed

"""sp.random / sp.randn: distributions, determinism per seed and launch, distinct draws per thread, call site
and loop iteration, the interpreter's identical bits, and gradients that see the forward launch's numbers."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime

N_MOMENTS = 1 << 20


@pytest.fixture
def seeded():
    """sp.init(random_seed=s) for the test (called as seeded(s)); the default runtime is back afterwards."""
    yield lambda seed, **kw: sp.init(random_seed=seed, **kw)
    sp.init()


# ---- distributions ------------------------------------------------------------------------------------
def draw_uniform(y):
    dtype = y.dtype   # a compile-time constant of the kernel

    @sp.kernel
    def draw(y: sp.Array):
        for i in range(y.shape[0]):
            y[i] = sp.random(dtype)
    draw(y)


def draw_normal(y):
    dtype = y.dtype

    @sp.kernel
    def draw(y: sp.Array):
        for i in range(y.shape[0]):
            y[i] = sp.randn(dtype=dtype)
    draw(y)


@pytest.mark.parametrize("dtype", [sp.f32, sp.f64])
def test_uniform_moments(dtype):
    y = sp.ndarray(dtype, (N_MOMENTS,))
    draw_uniform(y)
    v = y.to_numpy().astype(np.float64)
    assert v.min() >= 0.0 and v.max() < 1.0   # [0, 1) strictly
    assert abs(v.mean() - 0.5) < 2e-3 and abs(v.var() - 1 / 12) < 5e-4
    counts = np.bincount((v * 16).astype(int), minlength=16)   # sd of a bin's count: ~250
    assert np.all(np.abs(counts - N_MOMENTS / 16) < 1500)
    assert len(np.unique(v)) > 0.95 * N_MOMENTS


@pytest.mark.parametrize("dtype", [sp.f32, sp.f64])
def test_normal_moments(dtype):
    z = sp.ndarray(dtype, (N_MOMENTS,))
    draw_normal(z)
    v = z.to_numpy().astype(np.float64)
    assert np.all(np.isfinite(v))
    assert abs(v.mean()) < 5e-3 and abs(v.var() - 1.0) < 1e-2
    assert abs(np.mean(np.abs(v) < 1.0) - 0.682689) < 3e-3     # the mass within one and two sigma
    assert abs(np.mean(np.abs(v) < 2.0) - 0.954500) < 2e-3
    assert abs(np.mean(v ** 3)) < 2e-2 and abs(np.mean(v ** 4) - 3.0) < 5e-2   # skewness, kurtosis


@pytest.mark.parametrize("dtype", [sp.u32, sp.i32])
def test_integer_draws_cover_every_bit(dtype):
    y = sp.ndarray(dtype, (1 << 16,))
    draw_uniform(y)
    bits = y.to_numpy().view(np.uint32)
    ones = np.array([np.mean((bits >> b) & 1) for b in range(32)])
    assert np.all(np.abs(ones - 0.5) < 0.02), ones   # each bit, the high ones included, is set half the time
    if dtype == sp.i32:
        assert (y.to_numpy() < 0).mean() > 0.45


# ---- determinism and distinct draws -------------------------------------------------------------------
@sp.kernel
def draw_mixed(u: sp.Array, z: sp.Array, w: sp.Array, s: sp.Array):
    for i in range(u.shape[0]):
        u[i] = sp.random()
        z[i] = sp.randn()
        w[i] = sp.random(sp.u32)
    s[None] = sp.random()   # a serial task draws too


def mixed_draws(n=64):
    out = [sp.ndarray(sp.f32, (n,)), sp.ndarray(sp.f32, (n,)), sp.ndarray(sp.u32, (n,)), sp.ndarray(sp.f32, ())]
    draw_mixed(*out)
    return [a.to_numpy() for a in out]


def test_same_seed_same_numbers_other_seed_other_numbers(seeded):
    seeded(5)
    first = [mixed_draws(), mixed_draws()]
    seeded(5)
    again = [mixed_draws(), mixed_draws()]
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    seeded(6)
    other = mixed_draws()
    assert all(np.mean(x != y) > 0.9 for x, y in zip(first[0][:3], other[:3]))


def test_default_seed_is_zero(seeded):
    seeded(0)
    explicit = mixed_draws()
    sp.init()
    for x, y in zip(explicit, mixed_draws()):
        np.testing.assert_array_equal(x, y)


def test_every_launch_draws_new_numbers():
    """Also when a launch repeats the previous one's objects (the fast replay path) or only its scalars."""
    @sp.kernel
    def scaled(y: sp.Array, c: sp.f32):
        for i in range(y.shape[0]):
            y[i] = c * sp.random()

    y = sp.ndarray(sp.f32, (256,))
    seen = []
    for c in (1.0, 1.0, 1.0, 2.0, 2.0):
        scaled(y, c)
        seen.append(y.to_numpy() / c)
    for a in range(len(seen)):
        for b in range(a):
            assert np.mean(seen[a] != seen[b]) > 0.99, (a, b)


def test_threads_call_sites_and_iterations_differ():
    @sp.func
    def noise():
        return sp.random()

    @sp.kernel
    def many(y: sp.Array, pair: sp.Array, m: sp.i32):
        for i in range(y.shape[0]):
            pair[i, 0] = noise()        # two call paths of one @sp.func
            pair[i, 1] = noise()
            pair[i, 2] = sp.random() - sp.random()   # two sites in one statement
            for j in range(m):          # a dynamic loop: one draw per iteration
                y[i, j] = sp.random()
            k = 0
            while k < 3:
                pair[i, 3 + k] = noise()
                k += 1
            for j in sp.static(range(2)):
                pair[i, 6 + j] = sp.random()

    n, m = 128, 8
    y, pair = sp.ndarray(sp.f32, (n, m)), sp.ndarray(sp.f32, (n, 8))
    many(y, pair, m)
    v, p = y.to_numpy(), pair.to_numpy()
    assert len(np.unique(v)) == n * m                      # threads and iterations
    assert np.all(p[:, 0] != p[:, 1]) and np.all(p[:, 2] != 0.0)
    draws = np.concatenate([p[:, :2], p[:, 3:], v], axis=1)
    assert len(np.unique(draws)) == draws.size


def test_interpreter_gives_the_same_numbers(seeded):
    @sp.kernel
    def every_kind(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, e: sp.Array, f: sp.Array, m: sp.i32):
        for i in range(a.shape[0]):
            a[i] = sp.random()
            b[i] = sp.random(sp.f64)
            c[i] = sp.random(sp.i32)
            for j in range(m):
                d[i, j] = sp.randn()
                e[i, j] = sp.randn(sp.f64)
        f[None] = sp.random()

    def run():
        n, m = 32, 3
        arrays = [sp.ndarray(sp.f32, (n,)), sp.ndarray(sp.f64, (n,)), sp.ndarray(sp.i32, (n,)),
                  sp.ndarray(sp.f32, (n, m)), sp.ndarray(sp.f64, (n, m)), sp.ndarray(sp.f32, ())]
        every_kind(*arrays, m)
        every_kind(*arrays, m)   # the second launch's numbers
        return [a.to_numpy() for a in arrays]

    seeded(99)
    device = run()
    seeded(99, backend="interp")
    oracle = run()
    for k in (0, 1, 2, 5):   # integer arithmetic and exact conversions: the same bits
        np.testing.assert_array_equal(device[k], oracle[k])
    # Box-Muller's log, sqrt and cos: the driver's and numpy's float functions may differ in the last bits
    # (and the SPIR-V lowering evaluates f64 log/cos in f32: GLSL.std.450 has none for f64)
    np.testing.assert_allclose(device[3], oracle[3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(device[4], oracle[4], rtol=1e-5, atol=1e-6)


# ---- gradients see the numbers of the launch they differentiate ---------------------------------------
@sp.kernel
def times_random(x: sp.Array, y: sp.Array, r: sp.Array):
    for i in range(x.shape[0]):
        u = sp.random()
        r[i] = u
        y[i] = x[i] * u


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i]


def ramp(n, **companions):
    return sp.from_numpy(np.linspace(0.5, 1.5, n).astype(np.float32), **(companions or {"needs_grad": True}))


@pytest.mark.backends
def test_grad_uses_the_latest_forward_launch():
    n = 64
    x, y, r = ramp(n), sp.ndarray(sp.f32, (n,), needs_grad=True), sp.ndarray(sp.f32, (n,))
    times_random(x, y, r)
    first = r.to_numpy()
    times_random(x, y, r)   # the fast replay path: new numbers
    latest = r.to_numpy()
    assert np.all(first != latest)
    y.grad.fill(1.0)
    times_random.grad(x, y, r)
    np.testing.assert_array_equal(x.grad.to_numpy(), latest)
    x.grad.fill(0.0)
    y.grad.fill(1.0)   # the gradient of a store consumed it
    times_random.grad(x, y, r)   # the gradient's own fast path: still the latest forward's numbers
    np.testing.assert_array_equal(x.grad.to_numpy(), latest)


def test_grad_before_any_forward_launch_is_an_error(seeded):
    seeded(1)

    @sp.kernel
    def fresh_kernel(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = x[i] * sp.random()

    x, y = ramp(4), sp.ndarray(sp.f32, (4,), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match="has not been launched"):
        fresh_kernel.grad(x, y)


@pytest.mark.backends
def test_tape_gives_each_launch_its_own_numbers():
    n, launches = 32, 4
    x, loss = ramp(n), sp.ndarray(sp.f32, (), needs_grad=True)
    ys = [sp.ndarray(sp.f32, (n,), needs_grad=True) for _ in range(launches)]
    rs = [sp.ndarray(sp.f32, (n,)) for _ in range(launches)]
    with sp.Tape(loss=loss):
        for y, r in zip(ys, rs):
            times_random(x, y, r)
            total(y, loss)
    numbers = np.stack([r.to_numpy() for r in rs])
    assert len(np.unique(numbers)) == numbers.size
    np.testing.assert_allclose(x.grad.to_numpy(), numbers.astype(np.float64).sum(axis=0), rtol=1e-6)


@pytest.mark.backends
def test_tape_with_one_output_array_reused():
    """The same objects each launch (the fast path) and the product of the draws: a wrong key anywhere
    changes the gradient."""
    n, steps = 16, 3
    x, y, loss = ramp(n), sp.ndarray(sp.f32, (n,), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    r = sp.ndarray(sp.f32, (n,))
    kept = []
    with sp.Tape(loss=loss):
        for _ in range(steps):
            times_random(x, y, r)
            kept.append(r.to_numpy())
            total(y, loss)
    np.testing.assert_allclose(x.grad.to_numpy(), np.sum(kept, axis=0, dtype=np.float64), rtol=1e-6)


@sp.kernel
def random_walk(x: sp.Array, y: sp.Array, r: sp.Array, m: sp.i32):
    for i in range(x.shape[0]):
        p = x[i]
        for j in range(m):   # a dynamic loop: the reverse sweep recomputes (or keeps) each iteration's draw
            u = sp.random()
            r[i, j] = u
            p = p * (1.0 + u) + 0.1 * sp.sin(p)
        y[i] = p


@pytest.mark.backends
def test_dynamic_loop_gradient_sees_the_forward_draws():
    n, m = 16, 6
    x, y, r = ramp(n), sp.ndarray(sp.f32, (n,), needs_grad=True), sp.ndarray(sp.f32, (n, m))
    random_walk(x, y, r, m)
    u = r.to_numpy().astype(np.float64)
    y.grad.fill(1.0)
    random_walk.grad(x, y, r, m)
    p, dp = x.to_numpy().astype(np.float64), np.ones(n)
    for j in range(m):   # float64 reference with the numbers the forward drew
        dp = dp * (1.0 + u[:, j] + 0.1 * np.cos(p))
        p = p * (1.0 + u[:, j]) + 0.1 * np.sin(p)
    np.testing.assert_allclose(y.to_numpy(), p, rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), dp, rtol=1e-5)


@sp.kernel
def random_trip_count(x: sp.Array, y: sp.Array, trips: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        k = 0
        while sp.random() < 0.8:   # as many iterations as the draws say: the depth probe must see them too
            p = p * 1.1
            k += 1
        trips[i] = k
        y[i] = p


@pytest.mark.backends
def test_random_trip_count_gradient():
    n = 64
    x, y, trips = ramp(n), sp.ndarray(sp.f32, (n,), needs_grad=True), sp.ndarray(sp.i32, (n,))
    random_trip_count(x, y, trips)
    k = trips.to_numpy()
    assert k.max() > 3 and len(np.unique(k)) > 3
    y.grad.fill(1.0)
    random_trip_count.grad(x, y, trips)
    np.testing.assert_allclose(x.grad.to_numpy(), np.float32(1.1) ** k.astype(np.float64), rtol=1e-5)


@pytest.mark.backends
def test_forward_mode_draws_fresh_numbers_and_its_own_tangent():
    n = 32
    x, y, r = ramp(n, needs_dual=True), sp.ndarray(sp.f32, (n,), needs_dual=True), sp.ndarray(sp.f32, (n,))
    times_random(x, y, r)
    before = r.to_numpy()
    x.dual.fill(1.0)
    times_random.fwd(x, y, r)
    once = r.to_numpy()
    assert np.all(once != before)
    np.testing.assert_array_equal(y.dual.to_numpy(), once)
    with sp.FwdMode(loss=y, param=x, seed=np.ones(n)):
        times_random(x, y, r)
    twice = r.to_numpy()
    assert np.all(twice != once)
    np.testing.assert_array_equal(y.dual.to_numpy(), twice)
    np.testing.assert_allclose(y.to_numpy(), x.to_numpy() * twice, rtol=1e-6)


def test_validating_tape_sees_the_launch_numbers(seeded):
    seeded(3, debug=True)
    n = 16
    x, y, loss, r = ramp(n), sp.ndarray(sp.f32, (n,), needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True), \
        sp.ndarray(sp.f32, (n,))
    with sp.Tape(loss=loss, validation=True):
        times_random(x, y, r)
        total(y, loss)
    np.testing.assert_array_equal(x.grad.to_numpy(), r.to_numpy())


# ---- errors -------------------------------------------------------------------------------------------
def _draw_bool(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.random(sp.u1)


def _draw_number(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.random(3)


def _normal_int(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.randn(sp.i32)


def _two_args(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.random(sp.f32, sp.f32)


def _wrong_keyword(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.random(type=sp.f32)


@pytest.mark.parametrize("fn, message", [
    (_draw_bool, "not bool"), (_draw_number, "not 3"), (_normal_int, "sp.f32 or sp.f64 numbers, not i32"),
    (_two_args, "one optional argument"), (_wrong_keyword, "one optional argument")])
def test_bad_dtype_is_a_compile_error_naming_the_line(fn, message):
    y = sp.ndarray(sp.f32, (4,))
    with pytest.raises(sp.CompileError, match=message) as err:
        sp.kernel(fn)(y)
    assert err.value.filename.endswith("test_random.py") and "sp.ran" in err.value.source


def test_host_calls_and_bad_seeds_are_refused():
    with pytest.raises(TypeError, match="inside a kernel"):
        sp.random()
    rt = runtime.get()
    for bad in (-1, 2**64, 1.5, "0", True):
        with pytest.raises(sp.ArgumentError, match="random_seed"):
            sp.init(random_seed=bad)
    assert runtime.current() is rt   # a rejected call changes nothing

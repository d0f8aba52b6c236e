"""Values at the edges of each op's domain (halves, signed zeros, infinities, NaN, ties), and at random points,
against numpy, in f32 and f64, on Vulkan and on the interpreter. One table row per op: its kernel, its numpy
reference, its edge points. NaN, infinities and the sign of zero must match exactly, other values within the
row's tolerance (pow and atan2 are computed in f32 on the device, also for f64).

numpy's power on scalars takes sqrt for the exponent 0.5 (np.power(-0.0, 0.5) is -0.0, np.power(-inf, 0.5) NaN);
its ufunc on arrays is C99's pow (+0.0, +inf), and so is spvad: the reference runs on arrays.
"""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

INF, NAN = np.inf, np.nan
DTYPES = {"f32": np.float32, "f64": np.float64}


@sp.kernel
def k_round(a: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = sp.round(a[i])


@sp.kernel
def k_pow(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = a[i] ** b[i]


@sp.kernel
def k_sp_pow(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = sp.pow(a[i], b[i])


@sp.kernel
def k_pow_half(a: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = a[i] ** 0.5   # a constant float exponent is Op.POW too


@sp.kernel
def k_atan2(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = sp.atan2(a[i], b[i])


@sp.kernel
def k_max(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = sp.max(a[i], b[i])


@sp.kernel
def k_min(a: sp.Array, b: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = min(a[i], b[i])


@sp.kernel
def k_vec_max(v: sp.Array, y: sp.Array):
    for i in range(v.shape[0]):
        y[i] = v[i].max()


@sp.kernel
def k_vec_min(v: sp.Array, y: sp.Array):
    for i in range(v.shape[0]):
        y[i] = v[i].min()


def _below_half(dt):
    return float(np.nextafter(dt(0.5), dt(0)))


def round_points(dt):
    h = _below_half(dt)
    return [0.5, 1.5, 2.5, 3.5, 4.5, -0.5, -1.5, -2.5, -3.5, h, -h, 0.0, -0.0, 4194304.5, -4194303.5, 8388609.0,
            INF, -INF, NAN]


POW_POINTS = [(0.0, 0.0), (-0.0, 0.0), (0.0, -0.0), (NAN, 0.0), (NAN, -0.0), (INF, 0.0), (-INF, -0.0),
              (0.0, 2.0), (0.0, 0.5), (0.0, -0.5), (0.0, -2.0), (-0.0, 3.0), (-0.0, -3.0), (-0.0, 0.5), (-0.0, 2.0),
              (-0.0, -2.0), (-0.0, -0.5), (1.0, NAN), (1.0, INF), (1.0, -INF), (1.0, 7.3), (-1.0, INF), (-1.0, -INF),
              (-1.0, 0.5), (-1.0, 3.0), (-1.0, 4.0), (-2.0, 3.0), (-2.0, 2.0), (-2.0, -1.0), (-2.0, -2.0),
              (-2.0, 0.5), (-1.5, 10.0), (-0.5, -3.0), (0.5, INF), (2.0, INF), (0.5, -INF), (2.0, -INF),
              (-0.5, INF), (-2.0, -INF), (0.0, INF), (-0.0, INF), (0.0, -INF), (INF, 0.5), (INF, -0.5),
              (-INF, 0.5), (-INF, -0.5), (-INF, 3.0), (-INF, -3.0), (-INF, 2.0), (-INF, -2.0), (INF, INF),
              (INF, -INF), (-INF, INF), (2.0, NAN), (NAN, 1.0), (NAN, NAN), (3.0, -2.5), (0.25, 0.5)]

ATAN2_POINTS = [(0.0, 0.0), (0.0, -0.0), (-0.0, 0.0), (-0.0, -0.0), (0.0, 1.0), (0.0, -1.0), (-0.0, 1.0),
                (-0.0, -1.0), (1.0, 0.0), (-1.0, 0.0), (1.0, -0.0), (-1.0, -0.0), (INF, INF), (INF, -INF),
                (-INF, INF), (-INF, -INF), (1.0, INF), (1.0, -INF), (-1.0, INF), (-1.0, -INF), (INF, 1.0),
                (-INF, 1.0), (INF, -1.0), (INF, 0.0), (-INF, -0.0), (0.0, INF), (0.0, -INF), (-0.0, INF),
                (-0.0, -INF), (NAN, 0.0), (0.0, NAN), (NAN, INF), (INF, NAN), (NAN, NAN), (0.3, -0.7),
                (-1e-30, -1.0)]

TIE_POINTS = [(2.0, 2.0), (-1.0, -1.0), (0.0, 0.0), (INF, INF), (-INF, -INF), (1.0, 2.0), (2.0, 1.0)]
VEC_POINTS = [(2.0, 2.0, 2.0), (2.0, 1.0, 2.0), (1.0, 2.0, 2.0), (2.0, 2.0, 1.0), (0.1, 0.1, 0.1), (-0.0, -0.0, -0.0),
              (INF, INF, INF), (-INF, -INF, -INF), (3.0, 1.0, 2.0), (1e-3, 7.0, -5.0)]


def random_pow_points(rng):
    """Positive bases with any exponent, negative bases with integer exponents."""
    x = np.concatenate([rng.uniform(0.05, 3.0, 12), -rng.uniform(0.2, 2.0, 8)])
    y = np.concatenate([rng.uniform(-3.0, 3.0, 12), rng.integers(-4, 5, 8).astype(float)])
    return list(zip(x, y))


def random_pairs(rng, n=16):
    return list(zip(*(np.where(rng.random(n) < 0.5, -1.0, 1.0) * rng.uniform(0.1, 3.0, n) for _ in range(2))))


def vec_rows(rng):
    return VEC_POINTS + [tuple(r) for r in rng.uniform(-2.0, 2.0, (6, 3))]


def np_pow(x, y):
    """C99 pow: numpy's power ufunc on arrays (a scalar, or a scalar exponent 0.5, takes sqrt)."""
    return np.power(np.asarray(x, np.float64), np.asarray(y, np.float64))


# name -> (kernel, numpy reference on float64 arrays, points(dtype, rng) as a list of argument tuples, tolerance)
ROWS = {
    "round": (k_round, np.round, lambda dt, rng: [(v,) for v in round_points(dt)] +
              [(v,) for v in rng.uniform(-6.0, 6.0, 12)], 0.0),
    "pow": (k_pow, np_pow, lambda dt, rng: POW_POINTS + random_pow_points(rng), 2e-5),
    "sp_pow": (k_sp_pow, np_pow, lambda dt, rng: POW_POINTS + random_pow_points(rng), 2e-5),
    "pow_half": (k_pow_half, lambda x: np_pow(x, np.full_like(x, 0.5)),
                 lambda dt, rng: [(v,) for v in (0.0, -0.0, INF, -INF, NAN, -2.0, 1.0)] +
                 [(v,) for v in rng.uniform(0.01, 4.0, 8)], 2e-5),
    "atan2": (k_atan2, np.arctan2, lambda dt, rng: ATAN2_POINTS + random_pairs(rng), 2e-5),
    "max": (k_max, np.maximum, lambda dt, rng: TIE_POINTS + random_pairs(rng), 0.0),
    "min": (k_min, np.minimum, lambda dt, rng: TIE_POINTS + random_pairs(rng), 0.0),
    "vec_max": (k_vec_max, lambda v: np.max(v, axis=1), lambda dt, rng: [(r,) for r in vec_rows(rng)], 0.0),
    "vec_min": (k_vec_min, lambda v: np.min(v, axis=1), lambda dt, rng: [(r,) for r in vec_rows(rng)], 0.0),
}


def device_array(a):
    """An ndarray of `a`; a 2-d `a` is an array of vectors (its rows)."""
    return sp.from_numpy(a, dtype=sp.Vector(a.shape[1], sp.f32 if a.dtype == np.float32 else sp.f64)) \
        if a.ndim == 2 else sp.from_numpy(a)


def need_dtype(dtype):
    if dtype == np.float64 and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")


def assert_edge_equal(got, want, rtol, what):
    """NaN where `want` is NaN, the same infinities and signed zeros, finite values within `rtol`."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bad = []
    for k, (g, w) in enumerate(zip(got.ravel(), want.ravel())):
        if np.isnan(w) or not np.isfinite(w) or w == 0:
            ok = np.isnan(g) if np.isnan(w) else (g == w and np.signbit(g) == np.signbit(w))
        else:
            ok = abs(g - w) <= rtol * abs(w)
        if not ok:
            bad.append(f"#{k}: got {g!r}, want {w!r}")
    assert not bad, f"{what}:\n" + "\n".join(bad)


def inputs_of(points, dtype):
    """One array per argument, the points rounded to `dtype`."""
    return [np.array([p[j] for p in points], dtype) for j in range(len(points[0]))]


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", sorted(ROWS))
def test_edge_values(name, dtype, rng):
    need_dtype(dtype)
    kernel, ref, points, rtol = ROWS[name]
    args = inputs_of(points(dtype, rng), dtype)
    y = sp.ndarray(sp.f32 if dtype == np.float32 else sp.f64, (len(args[0]),))
    with np.errstate(all="ignore"):
        want = ref(*(a.astype(np.float64) for a in args)).astype(dtype)
    kernel(*map(device_array, args), y)
    assert_edge_equal(y.to_numpy(), want, rtol, f"{name} ({np.dtype(dtype).name}) at {list(zip(*args))}")


def test_round_is_half_to_even_on_the_host_too():
    """sp.round called on the host is the kernel's rounding: numpy's (Python's) half to even."""
    v = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2], np.float32)
    assert sp.round(v).tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0] and np.signbit(sp.round(-0.5))
    assert sp.round(2.5) == 2.0 == round(2.5)


def test_pow_on_the_host_is_c99():
    """sp.pow called on the host gives the kernel's values, also where numpy's scalar power takes sqrt."""
    assert not np.signbit(sp.pow(-0.0, 0.5)) and sp.pow(-np.inf, 0.5) == np.inf and sp.pow(0.0, 0.0) == 1.0

"""Python float literals are weakly typed (spvad/frontend/weak_floats.py): a local started from a literal takes
the widest float stored into it or combined with it, and an expression of literals and integers computes in the
type of the f64 value it meets. Rows of f64 kernels against float64 numpy (to 1e-14: f32 anywhere would be off
by 1e-8) on Vulkan and the interpreter; the IR the frontend builds; f32 kernels built once, as before."""
import numpy as np
import pytest

import spvad as sp
from spvad.errors import CompileError, SpvadError
from spvad.frontend import ArraySpec, build_kernel, builder
from spvad.ir import nodes as N
from spvad.ir.printer import format_kernel
from adcheck import assert_close, rand

F64_1D, F64_2D, F32_1D = ArraySpec(sp.f64, 1), ArraySpec(sp.f64, 2), ArraySpec(sp.f32, 1)
VEC2_F64, MAT2_F64 = sp.Vector(2, sp.f64), sp.Matrix(2, 2, sp.f64)
N_ROWS, N_COLS = 5, 7
THIRDS = np.array([1.0, 2.0]) / 3.0


@sp.func
def horner(x, n):
    """0.1 (1 + x + ... + x^(n-1)): a local and a literal, so f32 when x is, f64 when x is."""
    acc = 0.0
    for _ in range(n):
        acc = acc * x + 0.1
    return acc


@sp.func
def tenth_or_half(x):
    if x > 0.5:
        return 0.1   # a weak return: the slot is f64 once the other return stores x * 0.5 (f64)
    return x * 0.5


@sp.kernel
def rows(x: sp.Array, x32: sp.Array, v: sp.Array, m: sp.Array, out: sp.Array, vout: sp.Array,
         mout: sp.Array, total: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0                               # the torch bridge's find: summed in f32 before
        for k in range(x.shape[1]):
            acc = acc + x[i, k]
        out[i, 0] = acc
        s = 0.1                                 # a local meeting f64 only where it is used
        out[i, 1] = x[i, 0] * s
        out[i, 2] = sp.sqrt(2.0) * x[i, 0]      # a function of a literal
        out[i, 3] = THIRDS[1] * x[i, 0]         # a float64 numpy constant of the enclosing scope
        out[i, 4] = sp.select(x[i, 0] > 0.0, sp.sqrt(3.0), 0.1) + x[i, 1]
        out[i, 5] = (0.1 if x[i, 0] > 0.0 else 0.3) * x[i, 1]
        out[i, 6] = (sp.sqrt(5.0) if x[i, 0] > 0.0 else 1.0 / 7.0) * x[i, 1]   # a branch with a sqrt: an If
        out[i, 7] = min(x[i, 0], sp.sqrt(2.0) / 8.0) + max(x[i, 1], 0.1)
        t = 1.0
        t = t / 3.0
        out[i, 8] = 1.0 if x[i, 2] == t else 0.0   # compared with an f64: t is f64 (exactly 1/3)
        out[i, 9] = horner(x[i, 0], 4)         # one func, called with f64 here and with f32 in row 14
        out[i, 10] = tenth_or_half(x[i, 0] * 3.0)
        a = 0.0
        b = 0.0
        c = 0.0
        a = x[i, 1]
        b = a                                   # widened in turn: a, then b, then c
        c = b * 3.0
        out[i, 11] = c
        both = 0.0
        both += x32[i]                          # an f32 value into what becomes an f64 local: exact
        both += x[i, 3]
        out[i, 12] = both
        w = sp.Vector([0.0, 0.0])               # vectors and matrices per component
        M = sp.Matrix([[0.0, 0.0], [0.0, 0.0]])
        buf = [0.0, 0.0, 0.0]
        for k in range(3):
            w += v[i, k]
            M += m[i, k] * 0.5
            buf[k] = x[i, k] / 3.0              # runtime-indexed stores
        vout[i] = w
        mout[i] = M
        out[i, 13] = buf[0] + buf[1] + buf[2]
        out[i, 14] = horner(x32[i], 4)          # in f32, as before
        sp.atomic_add(total[None], x[i, 4] * 0.1)
        total[None] += 1.0 / 3.0


def rows_reference(x, x32, v, m):
    x0, x1 = x[:, 0], x[:, 1]
    xs = x32.astype(np.float64)
    half = np.where(x0 * 3.0 > 0.5, 0.1, x0 * 3.0 * 0.5)
    out = np.stack([
        x.sum(axis=1), x0 * 0.1, np.sqrt(2.0) * x0, THIRDS[1] * x0,
        np.where(x0 > 0, np.sqrt(3.0), 0.1) + x1, np.where(x0 > 0, 0.1, 0.3) * x1,
        np.where(x0 > 0, np.sqrt(5.0), 1.0 / 7.0) * x1, np.minimum(x0, np.sqrt(2.0) / 8.0) + np.maximum(x1, 0.1),
        (x[:, 2] == 1.0 / 3.0).astype(np.float64), 0.1 * (1 + x0 + x0**2 + x0**3),
        half, x1 * 3.0, xs + x[:, 3], x[:, :3].sum(axis=1) / 3.0, 0.1 * (1 + xs + xs**2 + xs**3)], axis=1)
    total = (x[:, 4] * 0.1).sum() + len(x) / 3.0
    return out, v[:, :3].sum(axis=1), (m[:, :3] * 0.5).sum(axis=1), total


def needs_float64():
    if not sp.device_info()["features"].get("float64"):
        pytest.skip("the device has no float64")


@pytest.mark.backends
def test_f64_kernels_compute_literals_and_their_locals_in_f64(rng):
    needs_float64()
    x = rand(rng, (N_ROWS, N_COLS), 0.1, 1.0, np.float64) / 3.0
    x[1, 2] = 1.0 / 3.0   # equal to t = 1.0 / 3.0 in f64 only
    x32 = rand(rng, N_ROWS, 0.1, 1.0)
    v, m = rand(rng, (N_ROWS, 3, 2), dtype=np.float64) / 3.0, rand(rng, (N_ROWS, 3, 2, 2), dtype=np.float64) / 7.0
    dv, dm = sp.ndarray(VEC2_F64, (N_ROWS, 3)), sp.ndarray(MAT2_F64, (N_ROWS, 3))
    dv.from_numpy(v)
    dm.from_numpy(m)
    out, total = sp.ndarray(sp.f64, (N_ROWS, 15)), sp.ndarray(sp.f64, ())
    vout, mout = sp.ndarray(VEC2_F64, (N_ROWS,)), sp.ndarray(MAT2_F64, (N_ROWS,))
    rows(sp.from_numpy(x), sp.from_numpy(x32), dv, dm, out, vout, mout, total)
    want, want_v, want_m, want_total = rows_reference(x, x32, v, m)
    got = out.to_numpy()
    assert got[1, 8] == 1.0 and want[1, 8] == 1.0   # rows with both outcomes: not vacuous
    assert 0 < np.count_nonzero(want[:, 10] == 0.1) < N_ROWS
    for col in range(want.shape[1]):
        rtol = 1e-6 if col == 14 else 1e-14   # the f32 call
        assert_close(got[:, col], want[:, col], rtol, f"row {col} of the weak-literal kernel")
    assert_close(vout.to_numpy(), want_v, 1e-14, "vector local")
    assert_close(mout.to_numpy(), want_m, 1e-14, "matrix local")
    assert_close(total.to_numpy(), want_total, 1e-14, "atomic adds")


def build(fn, *specs):
    return build_kernel(fn, list(specs))[0]


def slot_types(kernel, name):
    return [s.dtype for t in kernel.tasks for s in N.walk(t.body) if isinstance(s, N.Alloca) and s.name == name]


def rowsum(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0
        for k in range(x.shape[1]):
            acc = acc + x[i, k]
        out[i] = acc


def scaled(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        s = 0.1
        for k in range(3):
            s = s * 0.5
        out[i] = x[i] * s


def test_a_local_takes_the_type_of_what_is_stored_into_it():
    assert slot_types(build(rowsum, F64_2D, F64_1D), "acc") == [sp.f64]
    assert slot_types(build(rowsum, ArraySpec(sp.f32, 2), F64_1D), "acc") == [sp.f32]   # f32 sum, stored wide
    assert slot_types(build(scaled, F64_1D, F64_1D), "s") == [sp.f64]   # only weak values, meeting an f64


def func_twice(x: sp.Array, y: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[i] = horner(x[i], 3) + horner(y[i], 3)


def test_each_call_of_a_func_computes_in_the_type_of_its_arguments():
    ir = build(func_twice, F64_1D, F32_1D, F64_1D)
    assert sorted(map(repr, slot_types(ir, "acc"))) == ["f32", "f64"]


def forced(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        a = sp.f32(0.0)            # explicit conversions and annotations fix the type
        b: sp.f32 = 0.0
        c = sp.cast(0.0, sp.f32)
        for k in range(x.shape[1]):
            a = a + sp.f32(x[i, k])
            b = b + sp.cast(x[i, k], sp.f32)
            c += sp.f32(x[i, k])
        out[i] = a + b + c


def test_explicit_f32_stays_f32():
    ir = build(forced, F64_2D, F64_1D)
    assert [slot_types(ir, n) for n in "abc"] == [[sp.f32]] * 3


def narrowing(x32: sp.Array, x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        a = x32[i]
        a = x[i]
        out[i] = a


def narrowing_vector(v32: sp.Array, v: sp.Array, out: sp.Array):
    for i in range(v.shape[0]):
        w = v32[i]
        w += v[i]
        out[i] = w


@pytest.mark.parametrize("fn, specs, name, line", [
    (narrowing, (F32_1D, F64_1D, F64_1D), "a", "a = x[i]"),
    (narrowing_vector, (ArraySpec(sp.vec2, 1), ArraySpec(VEC2_F64, 1), ArraySpec(VEC2_F64, 1)), "w[0]",
     "w += v[i]"),
])
def test_an_f64_into_a_local_holding_an_f32_value_is_refused(fn, specs, name, line):
    with pytest.raises(CompileError) as e:
        build(fn, *specs)
    assert f"local '{name}' holds f32" in str(e.value) and "an f64 would round it" in str(e.value)
    assert line in str(e.value)


F32_KERNELS = {
    "rowsum": (rowsum, (ArraySpec(sp.f32, 2), F32_1D)),
    "rows": (rows.fn, (ArraySpec(sp.f32, 2), F32_1D, ArraySpec(sp.vec2, 2), ArraySpec(sp.mat2, 2), ArraySpec(
        sp.f32, 2), ArraySpec(sp.vec2, 1), ArraySpec(sp.mat2, 1), ArraySpec(sp.f32, 0))),
    "func_twice": (func_twice, (F32_1D, F32_1D, F32_1D)),
}


@pytest.mark.parametrize("name", F32_KERNELS)
def test_kernels_without_f64_are_built_once_and_stay_f32(name, monkeypatch):
    fn, specs = F32_KERNELS[name]
    builds = []
    real = builder.KernelBuilder.build
    monkeypatch.setattr(builder.KernelBuilder, "build", lambda b: builds.append(b) or real(b))
    ir = build(fn, *specs)
    assert len(builds) == 1 and "f64" not in format_kernel(ir)


def test_f64_kernels_are_refused_on_a_device_without_float64(rng):
    """Compiled for Metal's features: an f64 kernel is still refused by name, an f32 one with literals still
    compiles (no f64 appears)."""
    needs_float64()
    k = sp.kernel(rowsum)
    x, out = sp.from_numpy(rand(rng, (3, 4), dtype=np.float64)), sp.ndarray(sp.f64, 3)
    with pytest.raises(SpvadError, match="f64 needs a device with float64 support"):
        k.msl(x, out)
    assert "float" in k.msl(sp.from_numpy(rand(rng, (3, 4))), sp.ndarray(sp.f32, 3))

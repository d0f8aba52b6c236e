"""Kernels with more scalar parameters than the push constants hold (128 bytes: spirv/lower_memory.py spills
the last ones to the runtime's scalar table, launch/scalar_table.py): values in every dtype, vectors and
matrices by value, replays with new values, gradients (k.grad, sp.Tape, a Tape's planned backward), forward
mode, and the table's ring starting a new lap while launches wait."""
import importlib.util
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.launch.scalar_table import scalar_table
from spvad.spirv.lower_memory import SCALAR_RING_WORDS

pytestmark = pytest.mark.backends

_DIR = Path(tempfile.mkdtemp(prefix="spvad_many_params_"))
_LOADED = {}
KINDS = ("f32", "i32", "f64", "u32", "u1")


def load(name, source):
    """The module of `source` (kernels need their source on disk), written once per name."""
    if name not in _LOADED:
        path = _DIR / f"{name}.py"
        path.write_text("import spvad as sp\n\n" + textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]


def has_f64():
    return bool(sp.device_info()["features"].get("float64"))


def weight(k):
    return 0.5 + (k % 9) * 0.125   # exact in binary


U32_WEIGHT = 2.0 ** -20


def weighted_kernels(n, f64, copies=1):
    """Kernels weighted_0.. `(x, out[, outd], p0, p1, ...)`: n scalars of the KINDS in turn (no f64 unless
    `f64`); out[i] = x[i] + the weighted sum of the non-f64 ones, outd[i] = x[i] + that of the f64 ones."""
    kinds = [k for k in KINDS if f64 or k != "f64"]
    kinds = [kinds[k % len(kinds)] for k in range(n)]
    params = ", ".join(f"p{k}: sp.{kind}" for k, kind in enumerate(kinds))
    lines = []
    for k, kind in enumerate(kinds):
        if kind == "f64":
            lines.append(f"accd += p{k} * {weight(k)!r}")
        elif kind == "u1":
            lines.append(f"if p{k}:\n    acc += {weight(k)!r}")
        elif kind == "u32":
            lines.append(f"acc += p{k} * {U32_WEIGHT!r}")
        else:
            lines.append(f"acc += p{k} * {weight(k)!r}")
    body = textwrap.indent("\n".join(lines), " " * 8)
    source = ""
    for c in range(copies):
        source += f"""
@sp.kernel
def weighted_{c}(x: sp.Array, out: sp.Array, {"outd: sp.Array, " if f64 else ""}{params}):
    for i in range(x.shape[0]):
        acc = x[i]
        {"accd = sp.f64(x[i])" if f64 else "pass"}
{body}
        out[i] = acc
        {"outd[i] = accd" if f64 else "pass"}
"""
    return load(f"weighted_{n}_{int(f64)}_{copies}", source), kinds


def random_values(rng, kinds):
    values = []
    for kind in kinds:
        if kind == "f32":
            values.append(float(np.float32(rng.uniform(-2.0, 2.0))))
        elif kind == "i32":
            values.append(int(rng.integers(-1000, 1000)))
        elif kind == "u32":
            values.append(int(rng.integers(0, 2**32)))   # past i32's range: read as unsigned
        elif kind == "u1":
            values.append(bool(rng.random() < 0.5))
        else:   # every bit of the low word matters
            values.append(float(rng.uniform(-2.0, 2.0) * (1.0 + 1e-13 * rng.integers(1, 1000))))
    return values


def expected(x, kinds, values):
    """(out, outd, bound on out's f32 rounding) in float64."""
    terms = [(U32_WEIGHT if kind == "u32" else weight(k)) * float(v) for k, (kind, v) in enumerate(zip(kinds, values))
             if kind != "f64"]
    wide = sum(weight(k) * v for k, (kind, v) in enumerate(zip(kinds, values)) if kind == "f64")
    x = x.astype(np.float64)
    return x + sum(terms), x + wide, 1e-6 * (sum(abs(t) for t in terms) + np.abs(x).max()) * len(terms)


def check_weighted(x0, kinds, values, f64, out, outd):
    want, want_d, tol = expected(x0, kinds, values)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=0, atol=tol)
    if f64:
        np.testing.assert_allclose(outd.to_numpy(), want_d, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("n", [40, 100])
def test_many_scalars_of_every_dtype_arrive_and_replays_repack_them(n, rng):
    f64 = has_f64()
    module, kinds = weighted_kernels(n, f64)
    x0 = rng.uniform(-1.0, 1.0, 17).astype(np.float32)
    x, out = sp.from_numpy(x0), sp.ndarray(sp.f32, (17,))
    outd = sp.ndarray(sp.f64, (17,)) if f64 else None
    arrays = [x, out] + ([outd] if f64 else [])
    first, second = random_values(rng, kinds), random_values(rng, kinds)
    module.weighted_0(*arrays, *first)
    check_weighted(x0, kinds, first, f64, out, outd)
    module.weighted_0(*arrays, *second)   # the same ndarrays, new values: a replay packs them again
    check_weighted(x0, kinds, second, f64, out, outd)
    out.fill(0.0)
    module.weighted_0(*arrays, *second)   # the very same objects: the replay as recorded
    check_weighted(x0, kinds, second, f64, out, outd)
    module.weighted_0(*arrays, *first)
    module.weighted_0(*arrays, *second)   # two launches before one sync: each reads its own values
    check_weighted(x0, kinds, second, f64, out, outd)


def test_vectors_and_matrices_by_value(rng):
    names = [f"a{k}" if k % 2 == 0 else f"m{k}" for k in range(8)]
    params = ", ".join(f"{n}: sp.vec3" if n[0] == "a" else f"{n}: sp.mat3" for n in names) + ", s: sp.f32"
    lines = "\n".join(f"        v = m{k + 1} @ a{k}\n        acc += v[0] * {weight(k)} + v[1] * {weight(k + 1)} "
                      f"+ v[2] * {weight(k + 2)}" for k in range(0, 8, 2))
    module = load("vectors_by_value", f"""
@sp.kernel
def by_value(x: sp.Array, out: sp.Array, {params}):
    for i in range(x.shape[0]):
        acc = x[i] * s
{lines}
        out[i] = acc
""")
    x0 = rng.uniform(-1.0, 1.0, 9).astype(np.float32)
    x, out = sp.from_numpy(x0), sp.ndarray(sp.f32, (9,))
    for _ in range(2):
        args = [rng.uniform(-1.0, 1.0, (3,) if n[0] == "a" else (3, 3)).astype(np.float32) for n in names]
        s = float(np.float32(rng.uniform(0.5, 2.0)))
        module.by_value(x, out, *args, s)
        want = x0.astype(np.float64) * s
        for k in range(0, 8, 2):
            v = args[k + 1].astype(np.float64) @ args[k].astype(np.float64)
            want = want + v[0] * weight(k) + v[1] * weight(k + 1) + v[2] * weight(k + 2)
        np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-5, atol=1e-5)


# ---- gradients: out[i] = sum_k c_k * x[i]**k ------------------------------------------------------------
DEGREE = 40


def poly_module():
    cs = ", ".join(f"c{k}: sp.f32" for k in range(DEGREE))
    terms = "\n".join(f"        acc += c{k} * x[i] ** {k}" for k in range(1, DEGREE))
    step_terms = "\n".join(f"        acc += c{k} * x[t, i] ** {k}" for k in range(1, DEGREE))
    return load("poly", f"""
@sp.kernel
def poly(x: sp.Array, out: sp.Array, {cs}):
    for i in range(x.shape[0]):
        acc = c0 + x[i] * 0.0
{terms}
        out[i] = acc


@sp.kernel
def total(out: sp.Array, loss: sp.Array):
    for i in range(out.shape[0]):
        loss[None] += out[i]


@sp.kernel
def poly_step(x: sp.Array, t: sp.i32, {cs}):
    for i in range(x.shape[1]):
        acc = c0 + x[t, i] * 0.0
{step_terms}
        x[t + 1, i] = acc


@sp.kernel
def last_row(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[1]):
        loss[None] += x[x.shape[0] - 1, i]
""")


def p(c, x):
    x = np.asarray(x, np.float64)
    return sum(float(ck) * x ** k for k, ck in enumerate(c))


def dp(c, x):
    x = np.asarray(x, np.float64)
    return sum(k * float(ck) * x ** (k - 1) for k, ck in enumerate(c) if k)


def coefficients(rng, near_identity=False):
    if near_identity:   # p(x) = x + small terms: a second step's powers stay moderate
        c = rng.uniform(-1.0, 1.0, DEGREE) * 0.002
        c[1] += 1.0
    else:
        c = rng.uniform(-1.0, 1.0, DEGREE)
    return [float(v) for v in c.astype(np.float32)]


def test_gradient_by_k_grad_and_by_a_tape(rng):
    m = poly_module()
    x0 = rng.uniform(0.9, 1.05, 33).astype(np.float32)
    x = sp.from_numpy(x0, needs_grad=True)
    out = sp.ndarray(sp.f32, (33,), needs_grad=True)
    for _ in range(2):   # the second: the gradient launch replayed with new scalars
        c = coefficients(rng)
        m.poly(x, out, *c)
        np.testing.assert_allclose(out.to_numpy(), p(c, x0), rtol=1e-4, atol=1e-4)
        x.grad.fill(0.0)
        out.grad.fill(1.0)
        m.poly.grad(x, out, *c)
        np.testing.assert_allclose(x.grad.to_numpy(), dp(c, x0), rtol=1e-4, atol=1e-3)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    first, second = coefficients(rng), coefficients(rng)
    for c in (first, first, first, second, first):   # a Tape following the last one's plan runs its batch
        with sp.Tape(loss):
            m.poly(x, out, *c)
            m.total(out, loss)
        np.testing.assert_allclose(loss.to_numpy(), p(c, x0).sum(), rtol=1e-4)
        np.testing.assert_allclose(x.grad.to_numpy(), dp(c, x0), rtol=1e-4, atol=1e-3)


def test_forward_mode(rng):
    m = poly_module()
    x0 = rng.uniform(0.9, 1.05, 21).astype(np.float32)
    x = sp.from_numpy(x0, needs_dual=True)
    out = sp.ndarray(sp.f32, (21,), needs_dual=True)
    for _ in range(2):
        c = coefficients(rng)
        x.dual.fill(1.0)
        m.poly.fwd(x, out, *c)
        np.testing.assert_allclose(out.dual.to_numpy(), dp(c, x0), rtol=1e-4, atol=1e-3)
        with sp.FwdMode(loss=out, param=x, seed=np.ones(21, np.float32)):
            m.poly(x, out, *c)
        np.testing.assert_allclose(out.dual.to_numpy(), dp(c, x0), rtol=1e-4, atol=1e-3)


def two_step_tape(m, x, loss, ca, cb):
    with sp.Tape(loss):
        m.poly_step(x, 0, *ca)
        m.poly_step(x, 1, *cb)   # the same kernel and arrays, other scalars
        m.last_row(x, loss)


def test_a_tape_over_two_launches_of_one_kernel_with_other_scalars(rng):
    m = poly_module()
    n = 19
    x0 = rng.uniform(0.9, 1.05, n).astype(np.float32)
    x = sp.ndarray(sp.f32, (3, n), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    a, b = coefficients(rng, True), coefficients(rng, True)
    for k, (ca, cb) in enumerate([(a, b), (a, b), (a, b), (a, b), (b, a), (a, b)]):
        if k == 3 and runtime.get().backend != "interp":   # the kept batch's entries go: that pass runs
            start_a_lap_soon()                                # launch by launch, and the next its new batch
            m.poly(sp.ndarray(sp.f32, (2,)), sp.ndarray(sp.f32, (2,)), *coefficients(rng))
        x.from_numpy(np.vstack([x0[None], np.zeros((2, n), np.float32)]))
        two_step_tape(m, x, loss, ca, cb)
        x1 = p(ca, x0)
        np.testing.assert_allclose(x.to_numpy()[2], p(cb, x1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(x.grad.to_numpy()[0], dp(cb, x1) * dp(ca, x0), rtol=1e-4, atol=1e-3)


# ---- the ring's laps --------------------------------------------------------------------------------------
def start_a_lap_soon():
    """Move the scalar table to the last words of its lap: the next entry starts the next one."""
    table = scalar_table(runtime.get())
    table.position = (table.position // SCALAR_RING_WORDS + 1) * SCALAR_RING_WORDS - 3


def test_a_new_lap_waits_for_queued_launches_and_replays_place_their_values_again(rng):
    if runtime.get().backend == "interp":
        pytest.skip("the interpreter pushes every scalar (no push-constant budget)")
    f64 = has_f64()
    module, kinds = weighted_kernels(100, f64, copies=2)
    x0 = rng.uniform(-1.0, 1.0, 5).astype(np.float32)
    x = sp.from_numpy(x0)
    outs = [[sp.ndarray(sp.f32, (5,))] + ([sp.ndarray(sp.f64, (5,))] if f64 else []) for _ in range(2)]
    first, second = random_values(rng, kinds), random_values(rng, kinds)
    module.weighted_0(x, *outs[0], *first)
    start_a_lap_soon()
    module.weighted_1(x, *outs[1], *second)   # a new lap: its entry overwrites the first launch's words
    check_weighted(x0, kinds, first, f64, *(outs[0] + [None] * (not f64)))
    check_weighted(x0, kinds, second, f64, *(outs[1] + [None] * (not f64)))
    outs[0][0].fill(0.0)
    module.weighted_0(x, *outs[0], *first)    # the very objects recorded: its entry is placed again
    check_weighted(x0, kinds, first, f64, *(outs[0] + [None] * (not f64)))

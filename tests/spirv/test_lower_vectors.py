"""Vector views of ndarrays of vec2 / vec4 / mat2 (spirv/lower_vectors.py): which bindings get one and which
accesses move whole elements (the disassembly), then values and gradients against float64 numpy on random
inputs, on Vulkan, the interpreter and debug=True: rows of 2-D arrays, atomics, lone and computed components,
guarded loads, aliased arguments, f64 and i32 elements, and a Tape over several kernels."""
import re

import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from spvad.spirv.lower_vectors import plan_block

BACKENDS = pytest.mark.parametrize("backend", ["vulkan", "interp", "debug"])


@sp.kernel
def affine(x: sp.Array, M: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = M[i] @ x[i] + 0.5 * x[i]


@sp.kernel
def scatter(x: sp.Array, idx: sp.Array, grid: sp.Array):
    for i in range(x.shape[0]):
        grid[idx[i]] += x[i] * x[i][0]


@sp.kernel
def lone_component(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i][1] = x[i][0] * 2.0 + y[i][1]


@sp.kernel
def picked(x: sp.Array, y: sp.Array, k: sp.i32):
    for i in range(x.shape[0]):
        y[i] = x[i, k] * 3.0


@sp.kernel
def scaled(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.0


@sp.kernel
def summed(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        acc = sp.vec2(0.0, 0.0)
        for _ in range(n):
            acc += x[i] * x[i][1]
        y[i] = acc


@sp.kernel
def swapped(a: sp.Array, b: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.vec2(b[i][1], b[i][0])


@sp.kernel
def one_by_one(a: sp.Array, b: sp.Array):
    for i in range(a.shape[0]):
        a[i][0] = b[i][1]
        a[i][1] = b[i][0]


@sp.kernel
def int_rows(a: sp.Array, y: sp.Array):
    for i in range(a.shape[0]):
        y[i] = a[i] * 3 - 7


@sp.kernel
def advance(x: sp.Array, v: sp.Array, R: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        xt, vt = x[t, i], v[t, i]
        x[t + 1, i] = xt + 0.1 * vt
        v[t + 1, i] = R[i] @ vt + 0.2 * sp.sin(xt[0]) * xt


@sp.kernel
def energy(x: sp.Array, loss: sp.Array, t: sp.i32):
    for i in range(x.shape[1]):
        loss[None] += sp.dot(x[t, i], x[t, i])


def vec(rng, dtype, n, width=2, needs_grad=False, np_dtype=np.float32):
    data = rng.uniform(0.2, 1.0, (n, width)) * np.where(rng.random((n, width)) < 0.5, -1, 1)
    return sp.from_numpy(data.astype(np_dtype), dtype=dtype, needs_grad=needs_grad)


def mats(rng, n, needs_grad=False):
    return sp.from_numpy(rng.uniform(-1, 1, (n, 2, 2)).astype(np.float32), dtype=sp.mat2, needs_grad=needs_grad)


def loads_and_stores(text):
    """The result types of the OpLoads and the types stored, of buffer memory only (not push constants,
    builtins or Function variables)."""
    pointers = dict(re.findall(r"(%\S+) = OpAccessChain (%_ptr_StorageBuffer_\S+)", text))
    loads = re.findall(r"= OpLoad (%\S+) (%\S+)", text)
    stores = re.findall(r"OpStore (%\S+) ", text)
    return ([t for t, p in loads if p in pointers], [pointers[p].split("_", 3)[-1] for p in stores if p in pointers])


# ---- the disassembly ----------------------------------------------------------------------------------------
def test_whole_elements_move_as_vectors(rng):
    x, M, y = vec(rng, sp.vec2, 8, needs_grad=True), mats(rng, 8, True), sp.ndarray(sp.vec2, (8,), needs_grad=True)
    text = affine.disassemble(x, M, y)
    assert "%_runtimearr_v2float ArrayStride 8" in text and "%_runtimearr_v4float ArrayStride 16" in text
    loads, stores = loads_and_stores(text)
    assert sorted(loads) == ["%v2float", "%v4float"] and stores == ["v2float"]
    loads, stores = loads_and_stores(affine.disassemble(x, M, y, grad=True))
    assert "%float" not in loads and "float" not in stores   # x.grad += ...: loaded and stored as vec2 each
    assert sorted(loads) == ["%v2float"] * 3 + ["%v4float"] * 2   # x, x.grad, y.grad; M and M.grad
    assert sorted(stores) == ["v2float", "v2float", "v4float"]       # x.grad, y.grad (consumed), M.grad


def test_what_stays_scalar(rng):
    x3, y3 = vec(rng, sp.vec3, 8, 3), sp.ndarray(sp.vec3, (8,))
    text = scaled.disassemble(x3, y3)   # std430 strides vec3 at 16 bytes: no vec3 view
    assert "v3float" not in text and loads_and_stores(text)[0] == ["%float"] * 3
    x, y = vec(rng, sp.vec2, 8), sp.ndarray(sp.f32, (8,))
    assert "_runtimearr_v2float" not in picked.disassemble(x, y, 1)   # a computed component
    y2 = sp.ndarray(sp.vec2, (8,))
    loads, stores = loads_and_stores(lone_component.disassemble(x, y2))
    assert loads == ["%float", "%float"] and stores == ["float"]   # lone components of vector views
    assert "_runtimearr_v2float" in lone_component.disassemble(x, y2)


def test_skip_passes_leaves_them_out(rng, monkeypatch):
    x, M, y = vec(rng, sp.vec2, 8), mats(rng, 8), sp.ndarray(sp.vec2, (8,))
    monkeypatch.setenv("SPVAD_SKIP_PASSES", "vectors")   # what benchmarks/passes.py measures
    loads, stores = loads_and_stores(affine.disassemble(x, M, y))
    assert sorted(loads) == ["%float"] * 6 and stores == ["float"] * 2


def test_atomics_reach_components(rng):
    x, grid = vec(rng, sp.vec2, 8, needs_grad=True), sp.ndarray(sp.vec2, (3,), needs_grad=True)
    idx = sp.from_numpy(rng.integers(0, 3, 8).astype(np.int32))
    text = scatter.disassemble(x, idx, grid)
    assert "_runtimearr_v2float" in text and text.count("OpAtomicFAddEXT") + text.count("OpAtomicCompareExchange") >= 2


def test_plans_stop_where_another_write_may_alias():
    """plan_block on hand-built statements: a store to another binding between two loads of an element
    ends the load group (the bindings may be one ndarray); the loads of two elements are two groups."""
    x = N.ArrayParam("x", sp.f32, 2, 0, element_shape=(2,))
    y = N.ArrayParam("y", sp.f32, 2, 1, element_shape=(2,))
    i, c0, c1 = N.ThreadIndex(), N.Const(0, sp.i32), N.Const(1, sp.i32)
    a, b = N.GlobalLoad(x, (i, c0)), N.GlobalLoad(x, (i, c1))
    keys = {(0, "primal"), (1, "primal")}
    assert plan_block([i, c0, c1, a, b], keys) == {a: ("load", [a, b]), b: ("done",)}
    write = N.GlobalStore(y, (i, c0), a)
    assert plan_block([i, c0, c1, a, write, b], keys) == {}
    s0, s1 = N.GlobalStore(y, (i, c1), a), N.GlobalStore(y, (i, c0), a)
    assert plan_block([i, c0, c1, a, s0, s1], keys) == {s0: ("done",), s1: ("store", [s0, s1])}
    reread = N.GlobalLoad(y, (i, c1))   # reads a component whose store waits: no store group
    assert plan_block([i, c0, c1, a, s0, reread, s1], keys) == {}
    # y[i][0] = a; u = y[i][1]; y[i][1] = a; w = y[i][0]: the stores become one at the second, so a vector
    # load at u would give w the old y[i][0]: u and w stay lone loads
    u, w = N.GlobalLoad(y, (i, c1)), N.GlobalLoad(y, (i, c0))
    assert plan_block([i, c0, c1, a, s1, u, s0, w], keys) == {s1: ("done",), s0: ("store", [s1, s0])}


# ---- values and gradients -----------------------------------------------------------------------------------
@BACKENDS
def test_rows_values_and_gradients(backend, rng):
    n = 37
    x, M = vec(rng, sp.vec2, n, needs_grad=True), mats(rng, n, True)
    y = sp.ndarray(sp.vec2, (n,), needs_grad=True)
    affine(x, M, y)
    x64, M64 = x.to_numpy().astype(np.float64), M.to_numpy().astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), np.einsum("nab,nb->na", M64, x64) + 0.5 * x64, rtol=1e-5, atol=1e-6)
    g = rng.uniform(0.5, 1.5, (n, 2))
    y.grad.from_numpy(g.astype(np.float32))
    x.grad.from_numpy(np.full((n, 2), 0.25, np.float32))   # gradients add to what is there
    affine.grad(x, M, y)
    np.testing.assert_allclose(x.grad.to_numpy(), 0.25 + np.einsum("nab,na->nb", M64, g) + 0.5 * g, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(M.grad.to_numpy(), np.einsum("na,nb->nab", g, x64), rtol=1e-5, atol=1e-6)


@BACKENDS
def test_atomic_components_values_and_gradients(backend, rng):
    n, m = 29, 4
    x, grid = vec(rng, sp.vec2, n, needs_grad=True), sp.ndarray(sp.vec2, (m,), needs_grad=True)
    idx0 = rng.integers(0, m, n)
    scatter(x, sp.from_numpy(idx0.astype(np.int32)), grid)
    x64 = x.to_numpy().astype(np.float64)
    want = np.zeros((m, 2))
    np.add.at(want, idx0, x64 * x64[:, :1])
    np.testing.assert_allclose(grid.to_numpy(), want, rtol=1e-5, atol=1e-6)
    g = rng.uniform(0.5, 1.5, (m, 2))
    grid.grad.from_numpy(g.astype(np.float32))
    scatter.grad(x, sp.from_numpy(idx0.astype(np.int32)), grid)
    gi = g[idx0]   # d/dx of (x0 x0, x1 x0): x0 gets 2 x0 g0 + x1 g1, x1 gets x0 g1
    np.testing.assert_allclose(x.grad.to_numpy(), np.stack([2 * x64[:, 0] * gi[:, 0] + x64[:, 1] * gi[:, 1],
                                                            x64[:, 0] * gi[:, 1]], -1), rtol=1e-5)


@BACKENDS
def test_lone_and_computed_components(backend, rng):
    n = 13
    x, y = vec(rng, sp.vec2, n, needs_grad=True), vec(rng, sp.vec2, n, needs_grad=True)
    y0 = y.to_numpy().astype(np.float64)
    lone_component(x, y)
    want = y0.copy()
    want[:, 1] += 2.0 * x.to_numpy()[:, 0]
    np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-6)
    g = rng.uniform(0.5, 1.5, (n, 2))
    y.grad.from_numpy(g.astype(np.float32))
    lone_component.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), np.stack([2.0 * g[:, 1], np.zeros(n)], -1), rtol=1e-6)
    s = sp.ndarray(sp.f32, (n,))
    for k in (0, 1):
        picked(x, s, k)
        np.testing.assert_allclose(s.to_numpy(), 3.0 * x.to_numpy()[:, k].astype(np.float64), rtol=1e-6)


@BACKENDS
@pytest.mark.parametrize("trips", [0, 3])
def test_guarded_loads_out_of_a_loop(backend, trips, rng):
    """The loads of x[i] leave the loop (ir/licm.py) guarded by its trip condition: one vector load, selected."""
    n = 11
    x, y = vec(rng, sp.vec2, n, needs_grad=True), sp.ndarray(sp.vec2, (n,), needs_grad=True)
    summed(x, y, trips)
    x64 = x.to_numpy().astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), trips * x64 * x64[:, 1:], rtol=1e-5, atol=1e-6)
    g = rng.uniform(0.5, 1.5, (n, 2))
    y.grad.from_numpy(g.astype(np.float32))
    summed.grad(x, y, trips)
    want = trips * np.stack([g[:, 0] * x64[:, 1], g[:, 0] * x64[:, 0] + 2 * g[:, 1] * x64[:, 1]], -1)
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-5, atol=1e-6)


@BACKENDS
def test_aliased_arguments_keep_statement_order(backend, rng):
    n = 9
    a = vec(rng, sp.vec2, n)
    a0 = a.to_numpy()
    swapped(a, a)   # both components read before either is written
    np.testing.assert_array_equal(a.to_numpy(), a0[:, ::-1])
    a.from_numpy(a0)
    one_by_one(a, a)   # a[i][0] = a[i][1], then a[i][1] = the new a[i][0]
    np.testing.assert_array_equal(a.to_numpy(), np.stack([a0[:, 1], a0[:, 1]], -1))


@BACKENDS
def test_f64_and_i32_elements(backend, rng):
    n = 10
    x = vec(rng, sp.Vector(2, sp.f64), n, np_dtype=np.float64, needs_grad=True)
    M = sp.from_numpy(rng.uniform(-1, 1, (n, 2, 2)), dtype=sp.Matrix(2, 2, sp.f64), needs_grad=True)
    y = sp.ndarray(sp.Vector(2, sp.f64), (n,), needs_grad=True)
    affine(x, M, y)   # dvec2 views; a 32-byte f64 mat2 stays scalar
    x64, M64 = x.to_numpy(), M.to_numpy()
    np.testing.assert_allclose(y.to_numpy(), np.einsum("nab,nb->na", M64, x64) + 0.5 * x64, rtol=1e-12)
    g = rng.uniform(0.5, 1.5, (n, 2))
    y.grad.from_numpy(g)
    affine.grad(x, M, y)
    np.testing.assert_allclose(x.grad.to_numpy(), np.einsum("nab,na->nb", M64, g) + 0.5 * g, rtol=1e-12)
    m, at = 4, rng.integers(0, 4, n)   # f64 atomics: compare-exchange loops on a u64vec2 word view
    grid = sp.ndarray(sp.Vector(2, sp.f64), (m,), needs_grad=True)
    scatter(x, sp.from_numpy(at.astype(np.int32)), grid)
    want = np.zeros((m, 2))
    np.add.at(want, at, x64 * x64[:, :1])
    np.testing.assert_allclose(grid.to_numpy(), want, rtol=1e-12)
    a0 = rng.integers(-1000, 1000, (n, 4)).astype(np.int32)
    yi = sp.ndarray(sp.Vector(4, sp.i32), (n,))
    int_rows(sp.from_numpy(a0, dtype=sp.Vector(4, sp.i32)), yi)
    np.testing.assert_array_equal(yi.to_numpy(), a0 * 3 - 7)


def simulate(x0, v0, R, steps):
    x, v = x0.copy(), v0.copy()
    for _ in range(steps):
        x, v = x + 0.1 * v, np.einsum("nab,nb->na", R, v) + 0.2 * np.sin(x[:, :1]) * x
    return (x * x).sum()


@BACKENDS
def test_tape_over_rows_of_several_kernels(backend, rng):
    """A Tape over `steps` launches of advance (rows t -> t + 1 of 2-D vec2 arrays) and the loss: d loss / d x0,
    v0 and R against central differences of the float64 simulation."""
    n, steps = 6, 3
    x0, v0 = rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (n, 2))
    R0 = rng.uniform(-0.8, 0.8, (n, 2, 2))
    x = sp.ndarray(sp.vec2, (steps + 1, n), needs_grad=True)
    v = sp.ndarray(sp.vec2, (steps + 1, n), needs_grad=True)
    R = sp.from_numpy(R0.astype(np.float32), dtype=sp.mat2, needs_grad=True)
    xs, vs = np.zeros((steps + 1, n, 2), np.float32), np.zeros((steps + 1, n, 2), np.float32)
    xs[0], vs[0] = x0, v0
    x.from_numpy(xs)
    v.from_numpy(vs)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        for t in range(steps):
            advance(x, v, R, t)
        energy(x, loss, steps)
    x0, v0, R0 = xs[0].astype(np.float64), vs[0].astype(np.float64), R.to_numpy().astype(np.float64)
    np.testing.assert_allclose(loss[None], simulate(x0, v0, R0, steps), rtol=1e-5)
    eps = 1e-6
    for got, base, put in ((x.grad.to_numpy()[0], x0, lambda d: simulate(x0 + d, v0, R0, steps)),
                           (v.grad.to_numpy()[0], v0, lambda d: simulate(x0, v0 + d, R0, steps)),
                           (R.grad.to_numpy(), R0, lambda d: simulate(x0, v0, R0 + d, steps))):
        want = np.zeros(base.shape)
        for k in np.ndindex(*base.shape):
            d = np.zeros(base.shape)
            d[k] = eps
            want[k] = (put(d) - put(-d)) / (2 * eps)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)

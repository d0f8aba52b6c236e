"""Taichi idioms in kernels (API.md, "Taichi idioms work as in Taichi"): loops over ndarrays, integer vectors
as indices, sp.static(sp.ndrange(...)), 2-D cross products, normalized(eps), Matrix.diag, Python's math
module, module-level lists as constant tables. Each is checked forward, in reverse (k.grad and sp.Tape) and
in forward mode (k.fwd) against float64 numpy, on Vulkan and on the interpreter."""
import math

import numpy as np
import pytest

import spvad as sp
from adcheck import rand
from modes import check_modes

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


# ---- for i, j in x: a parallel loop over an ndarray's shape ------------------------------------------------
@sp.kernel
def loop_over_array(x: sp.Array, w: sp.Array, y: sp.Array):
    for i, j in x:
        y[i, j] = sp.sin(x[i, j]) * w[j] + x[i, j] * x[i, j]


def loop_over_array_ref(x, w, y):
    y[...] = np.sin(x) * w[None, :] + x * x


def test_loop_over_an_array(rng):
    args = [rand(rng, (3, 5)), rand(rng, 5), np.zeros((3, 5), np.float32)]
    check_modes(loop_over_array, loop_over_array_ref, args, outs=[2], wrt=[0, 1], rng=rng)


@sp.kernel
def loop_over_grad(x: sp.Array, v: sp.Array):
    for i in x.grad:              # DiffTaichi's `for i, j in initial.grad:` (the shape of the .grad array)
        x.grad[i] = x.grad[i] * 0.5 + x[i]
    for k in v:                   # an ndarray of vectors: one index per dimension of the ndarray
        v[k] = v[k] * 2.0


def test_loop_over_a_grad_array_and_an_array_of_vectors(rng):
    x0, g0, v0 = rand(rng, 7), rand(rng, 7), rand(rng, (4, 3))
    x = sp.from_numpy(x0, needs_grad=True)
    x.grad.from_numpy(g0)
    v = sp.from_numpy(v0, dtype=sp.vec3)
    loop_over_grad(x, v)
    np.testing.assert_allclose(x.grad.to_numpy(), g0 * 0.5 + x0, rtol=1e-6)
    np.testing.assert_allclose(v.to_numpy(), v0 * 2.0, rtol=1e-6)


def nested_array_loop(x: sp.Array):
    for i in range(x.shape[0]):
        for j in x:
            x[j] = 1.0


def wrong_index_count(x: sp.Array):
    for i in x:
        x[i, 0] = 1.0


@pytest.mark.parametrize("fn,text,fragment", [
    (nested_array_loop, "for j in x:", "must be an outermost loop"),
    (wrong_index_count, "for i in x:", "array 'x' has 2 dimension(s): a loop over it takes one index per"),
])
def test_array_loops_refused_where_taichi_refuses_them(fn, text, fragment):
    x = sp.from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(fn)(x)
    assert fragment in info.value.message and text in info.value.source


# ---- grid[base + offset]: an integer vector as an index; sp.static(sp.ndrange(3, 3)) ----------------------
GRID, INV_DX = 8, 6.0


@sp.kernel
def scatter_to_grid(x: sp.Array, v: sp.Array, grid: sp.Array):
    """diffmpm's p2g in miniature: quadratic B-spline weights onto a 3x3 stencil of grid nodes."""
    for p in range(x.shape[0]):
        xp = sp.vec2(x[p, 0], x[p, 1]) * INV_DX
        base = sp.cast(xp - 0.5, sp.i32)           # an integer 2-vector
        fx = xp - sp.cast(base, sp.f32)
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
        for i, j in sp.static(sp.ndrange(3, 3)):
            offset = sp.Vector([i, j])
            grid[base + offset] += w[i][0] * w[j][1] * v[p]


def scatter_to_grid_ref(x, v, grid):
    for p in range(x.shape[0]):
        xp = x[p] * INV_DX
        base = np.floor(xp - 0.5).astype(int)
        fx = xp - base
        w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
        for i in range(3):
            for j in range(3):
                grid[base[0] + i, base[1] + j] += w[i][0] * w[j][1] * v[p]


def test_integer_vector_index_and_static_ndrange(rng):
    x = rng.uniform(0.2, 0.95, (5, 2)).astype(np.float32)     # stencils stay inside the 8x8 grid
    args = [x, rand(rng, 5), rand(rng, (GRID, GRID))]
    check_modes(scatter_to_grid, scatter_to_grid_ref, args, outs=[2], wrt=[0, 1], rng=rng, rtol=5e-4)


@sp.kernel
def gather_by_vector(grid: sp.Array, cell: sp.Array, out: sp.Array):
    for i, j in out:
        c = sp.Vector([cell[i, 0], cell[i, 1]])
        out[i, j] = grid[c] * grid[c + sp.Vector([0, j])] + grid[sp.Vector([i, j])]


def gather_by_vector_ref(grid, cell, out):
    for i, j in np.ndindex(out.shape):
        c = cell[i]
        out[i, j] = grid[c[0], c[1]] * grid[c[0], c[1] + j] + grid[i, j]


def test_integer_vector_index_reads(rng):
    cell = rng.integers(0, 4, (5, 2)).astype(np.int32)
    args = [rand(rng, (6, 6)), cell, np.zeros((5, 3), np.float32)]
    check_modes(gather_by_vector, gather_by_vector_ref, args, outs=[2], wrt=[0], rng=rng)


def test_static_ndrange_gives_index_tuples():
    @sp.kernel
    def count(out: sp.Array):
        for t in range(1):
            for i, j in sp.static(sp.ndrange(2, (1, 4))):
                out[i, j] += 1.0
            for ij in sp.static(sp.ndrange(2, 2)):
                out[ij] += 10.0                    # a tuple index: out[i, j]
    out = sp.from_numpy(np.zeros((2, 4), np.float32))
    count(out)
    np.testing.assert_array_equal(out.to_numpy(), [[10, 11, 1, 1], [10, 11, 1, 1]])


@sp.kernel
def stencil_by_offsets(u: sp.Array, out: sp.Array):
    for i, j in sp.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        s = 0.0
        for off in sp.static([(-1, 0), (1, 0), (0, -1), (0, 1)]):   # a literal list of offset tuples
            s += u[i + off[0], j + off[1]] * (1.0 + off[0])
        for a, b in sp.static([(-1, 0), (1, 0), (0, -1), (0, 1)]):
            s += 0.5 * u[i + a, j + b] * u[i + a, j + b]
        out[i, j] = s - 4.0 * u[i, j]


def stencil_by_offsets_ref(u, out):
    c = (slice(1, -1), slice(1, -1))
    nb = [(u[:-2, 1:-1], -1), (u[2:, 1:-1], 1), (u[1:-1, :-2], 0), (u[1:-1, 2:], 0)]
    out[c] = sum(v * (1.0 + di) + 0.5 * v * v for v, di in nb) - 4.0 * u[c]


def test_static_loop_over_a_literal_list_of_tuples(rng):
    """Taichi's `for off in ti.static([(-1, 0), (1, 0), ...])`: each tuple an iteration (not a matrix)."""
    args = [rand(rng, (5, 6)), np.zeros((5, 6), np.float32)]
    check_modes(stencil_by_offsets, stencil_by_offsets_ref, args, outs=[1], wrt=[0], rng=rng)


# ---- cross products of 2-vectors, normalized(eps), Matrix.diag ---------------------------------------------
@sp.kernel
def vector_idioms(a: sp.Array, b: sp.Array, s: sp.Array, out: sp.Array):
    for i in range(a.shape[0]):
        u = sp.vec2(a[i, 0], a[i, 1])
        w = sp.vec2(b[i, 0], b[i, 1])
        torque = sp.cross(u, w) + u.cross(w * 2.0)               # 2-D: scalars
        n = u.normalized(1e-2) + sp.normalize(w, 0.5) + sp.Vector.normalized(u - w, 1e-3)
        m = sp.Matrix.diag(2, s[i]) + sp.Matrix.diag(dim=2, val=1) * 0.5
        r = m @ n + u.norm(1e-3) * w
        out[i, 0] = torque * r[0]
        out[i, 1] = r[1] + u.norm_sqr()


def vector_idioms_ref(a, b, s, out):
    for i in range(a.shape[0]):
        u, w = a[i], b[i]
        torque = (u[0] * w[1] - u[1] * w[0]) * 3.0

        def normalized(v, eps):
            return v / (np.linalg.norm(v) + eps)
        n = normalized(u, 1e-2) + normalized(w, 0.5) + normalized(u - w, 1e-3)
        m = np.eye(2) * s[i] + np.eye(2) * 0.5
        r = m @ n + np.sqrt(u @ u + 1e-3) * w
        out[i] = [torque * r[0], r[1] + u @ u]


def test_cross_normalized_and_diag(rng):
    args = [rand(rng, (6, 2)), rand(rng, (6, 2)), rand(rng, 6), np.zeros((6, 2), np.float32)]
    check_modes(vector_idioms, vector_idioms_ref, args, outs=[3], wrt=[0, 1, 2], rng=rng)


def test_host_versions_agree():
    assert sp.cross([1.0, 2.0], [3.0, 4.0]) == -2.0
    np.testing.assert_allclose(sp.normalize(np.array([3.0, 4.0]), 1.0), [0.5, 2 / 3])
    np.testing.assert_array_equal(sp.Matrix.diag(2, 1.5), [[1.5, 0.0], [0.0, 1.5]])
    assert sp.Matrix.diag(dim=3, val=1).dtype == np.int32


# ---- Python's math module ------------------------------------------------------------------------------
DT, DAMPING = 0.03, 0.2


@sp.kernel
def math_module(x: sp.Array, y: sp.Array, out: sp.Array, ints: sp.Array):
    for i in range(x.shape[0]):
        decay = math.exp(-DT * DAMPING)                 # Python numbers: Python computes it
        out[i] = (decay * math.sqrt(x[i]) + math.sin(math.pi * y[i]) * math.e + math.atan2(y[i], x[i])
                  + math.log(x[i], 2) + math.log(x[i]) + math.pow(x[i], 1.5) + math.fabs(y[i]) * math.tau
                  + min(y[i], math.inf) + math.tanh(y[i]) + math.hypot(x[i], y[i]) + math.radians(y[i]))
        ints[i] = math.floor(y[i] * 4.0) * 100 + math.ceil(y[i] * 4.0) * 10 + math.trunc(y[i] * 4.0) \
            + math.floor(2.5)


def math_module_ref(x, y, out, ints):
    out[:] = (math.exp(-DT * DAMPING) * np.sqrt(x) + np.sin(np.pi * y) * np.e + np.arctan2(y, x) + np.log2(x)
              + np.log(x) + x ** 1.5 + np.abs(y) * 2 * np.pi + y + np.tanh(y) + np.hypot(x, y) + np.radians(y))
    ints[:] = np.floor(y * 4) * 100 + np.ceil(y * 4) * 10 + np.trunc(y * 4) + 2


def test_math_module_functions_and_constants(rng):
    x = rng.uniform(0.2, 2.0, 7).astype(np.float32)
    args = [x, rand(rng, 7), np.zeros(7, np.float32), np.zeros(7, np.int32)]
    check_modes(math_module, math_module_ref, args, outs=[2], wrt=[0, 1], rng=rng)
    ints = sp.from_numpy(args[3])
    math_module(sp.from_numpy(x), sp.from_numpy(args[1]), sp.from_numpy(args[2]), ints)
    want = np.zeros(7, np.int32)
    math_module_ref(x.astype(np.float64), args[1].astype(np.float64), np.zeros(7), want)
    np.testing.assert_array_equal(ints.to_numpy(), want)


# ---- module-level lists and tuples: constants, indexed at compile time or at run time ---------------------
WEIGHTS = [0.5, 1.5, -2.0, 0.25]
GOAL = [0.9, 0.75]
POSITIONS = [[0.1, 0.2], [0.3, -0.4], [-0.5, 0.6]]
SIGNS = (1, -1, 1)


@sp.kernel
def constant_tables(x: sp.Array, pick: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        p = sp.vec2(x[i, 0], x[i, 1])
        acc = WEIGHTS[pick[i]] * p[0] + GOAL[0] * p[1] + WEIGHTS[-1]      # a runtime and constant indices
        for k in sp.static(range(len(POSITIONS))):
            r = p - sp.Vector(POSITIONS[k])                               # a row, as a vector
            acc += sp.dot(r, r) * WEIGHTS[k] * SIGNS[k]
        row = POSITIONS[pick[i] % 3]                                      # a row at run time
        acc += sp.dot(sp.Vector(row), p) - sp.dot(sp.vec2(GOAL), p) * SIGNS[pick[i] % 3]
        out[i] = acc


def constant_tables_ref(x, pick, out):
    w, goal, pos, signs = np.array(WEIGHTS), np.array(GOAL), np.array(POSITIONS), np.array(SIGNS)
    for i in range(x.shape[0]):
        p = x[i]
        acc = w[pick[i]] * p[0] + goal[0] * p[1] + w[-1]
        for k in range(3):
            r = p - pos[k]
            acc += (r @ r) * w[k] * signs[k]
        acc += pos[pick[i] % 3] @ p - (goal @ p) * signs[pick[i] % 3]
        out[i] = acc


def test_module_level_lists_are_constant_tables(rng):
    args = [rand(rng, (8, 2)), np.array([0, 1, 2, 3, 3, 2, 1, 0], np.int32), np.zeros(8, np.float32)]
    check_modes(constant_tables, constant_tables_ref, args, outs=[2], wrt=[0], rng=rng)

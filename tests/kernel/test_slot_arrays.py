"""Vector and matrix locals indexed at run time (ir/slot_arrays.py): primal kernels keep groups of at least
ARRAY_MIN_SLOTS slots as one Function-scope array (spirv/lower_slots.py), derivative kernels and small
groups use selects. Both forms must agree everywhere, out-of-range indices included, on both backends, and
against numpy."""
import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from spvad.ir.slot_arrays import ARRAY_MIN_SLOTS
from spvad.pipeline import DUAL, PRIMAL, REVERSE
from tests.kernel.test_local_arrays import sorting_kernel

pytestmark = pytest.mark.backends

BIG = 40      # slots: kept as an array in primal kernels
assert BIG >= ARRAY_MIN_SLOTS > 16


sort_big, sort_small = sorting_kernel(BIG), sorting_kernel(16)


def _kinds(kernel, mode, *args):
    ck = kernel._compiled(kernel._bind(args)[0], mode)
    return {type(s) for t in ck.ir.tasks for s in N.walk(t.body)}


def test_which_form_each_kernel_gets(rng):
    x, out = sp.from_numpy(rng.random((4, BIG)).astype(np.float32)), sp.ndarray(sp.f32, (4, BIG))
    assert {N.SlotSelect, N.SlotStore} <= _kinds(sort_big, PRIMAL, x, out)
    for mode in (REVERSE, DUAL):
        assert not {N.SlotSelect, N.SlotStore} & _kinds(sort_big, mode, x, out)
    small, out16 = sp.from_numpy(rng.random((4, 16)).astype(np.float32)), sp.ndarray(sp.f32, (4, 16))
    assert not {N.SlotSelect, N.SlotStore} & _kinds(sort_small, PRIMAL, small, out16)


def test_sort_values_and_gradients(rng):
    X = rng.random((6, BIG)).astype(np.float32) + 0.5
    x = sp.from_numpy(X, needs_grad=True)
    out = sp.ndarray(sp.f32, (6, BIG), needs_grad=True)
    sort_big(x, out)
    scale = 1.0 + 0.1 * np.arange(BIG)
    np.testing.assert_allclose(out.to_numpy(), np.sort(X, axis=1) * scale, rtol=1e-6)
    out.grad.fill(1.0)
    sort_big.grad(x, out)   # the sort routes each output's weight back to the input it came from
    want = np.take_along_axis(np.broadcast_to(scale, X.shape), np.argsort(np.argsort(X, axis=1), axis=1), 1)
    np.testing.assert_allclose(x.grad.to_numpy(), want, rtol=1e-6)


@sp.kernel
def edges(k: sp.Array, out: sp.Array):
    """Runtime reads and writes of a 32-vector and a 6x6 matrix, in and out of range, mixed with constant
    indices, rows included; the same values in primal (arrays) and forward mode (selects)."""
    for i in range(k.shape[0]):
        v = sp.Vector(32, sp.f32).zero()
        M = sp.Matrix(6, 6, sp.f32).zero()
        for a in range(32):
            v[a] = 1.0 + a
        for a in range(6):
            for b in range(6):
                M[a, b] = 10.0 * a + b
        j = k[i]
        r = v[j] + 100.0 * M[j, 2] + 1e4 * M[3, j] + 1e6 * M[j, j]
        row = M[j]
        r += 1e-2 * (row[0] + row[5])
        v[j] += 0.5
        M[j, 1] = -1.0
        M[j] = M[j] * 2.0
        out[i, 0] = r
        out[i, 1] = v[0] + v[31] + v[5]
        out[i, 2] = M[0, 1] + M[5, 1] + M[2, 3] + M[5, 5]


def edges_np(j):
    v = np.arange(1.0, 33.0)
    M = 10.0 * np.arange(6)[:, None] + np.arange(6)[None, :]
    inv, inm = 0 <= j < 32, 0 <= j < 6
    jv, jm = (j if inv else 0), (j if inm else 0)
    r = v[jv] + 100.0 * M[jm, 2] + 1e4 * M[3, jm] + 1e6 * M[jm, jm] + 1e-2 * (M[jm, 0] + M[jm, 5])
    if inv:
        v[j] += 0.5
    if inm:
        M[j, 1] = -1.0
        M[j] = M[j] * 2.0
    return [r, v[0] + v[31] + v[5], M[0, 1] + M[5, 1] + M[2, 3] + M[5, 5]]


def test_out_of_range_agrees_with_the_select_form():
    K = np.array([0, 3, 5, 6, 31, 32, -1, 1000], np.int32)
    want = np.array([edges_np(int(j)) for j in K], np.float32)
    out = sp.ndarray(sp.f32, (len(K), 3))
    edges(sp.from_numpy(K), out)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-6)
    dual_out = sp.ndarray(sp.f32, (len(K), 3), needs_dual=True)
    edges.fwd(sp.from_numpy(K), dual_out)   # the dual kernel computes the primal too, with selects
    assert not {N.SlotSelect, N.SlotStore} & _kinds(edges, DUAL, sp.from_numpy(K), dual_out)
    np.testing.assert_allclose(dual_out.to_numpy(), want, rtol=1e-6)


@sp.kernel
def loop_hazards(x: sp.Array, out: sp.Array, n: sp.i32):
    """Constant-index reads in a loop that writes the local at a runtime index: the optimiser must neither
    hoist them out of the loop nor forward an earlier value to them."""
    for i in range(x.shape[0]):
        buf = sp.Vector(BIG, sp.f32).zero()
        buf[0] = 1.0
        first = buf[0]
        acc = 0.0
        for k in range(n):
            acc += buf[0] + 2.0 * buf[1] + 0.5 * first
            buf[k % 2] = x[i] * k
        out[i] = acc + buf[0]


def test_loop_hazards(rng):
    X = rng.random(5).astype(np.float32) + 0.5
    out = sp.ndarray(sp.f32, (5,))
    loop_hazards(sp.from_numpy(X), out, 7)
    want = []
    for xv in X.astype(np.float64):
        buf, acc = [1.0, 0.0], 0.0
        for k in range(7):
            acc += buf[0] + 2.0 * buf[1] + 0.5
            buf[k % 2] = xv * k
        want.append(acc + buf[0])
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-6)

"""Derivative kernels touch only what the primal touched: accesses guarded by `if`, a conditional expression,
`and`/`or`, a loop or `while` condition stay guarded in gradient (k.grad, Tape) and forward-mode (FwdMode)
launches, their replays, depth probes, tie tasks and in-kernel derivatives. Index arrays hold -1 sentinels,
so an unguarded access is out of bounds: the interpreter and `debug=True` (the `backends` parameter) report it.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import N, assert_close, case_table, check_case, finite_differences, rand, reference, zeros

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

CASES, case = case_table()
M = 3   # neighbours per element


def neighbours(rng, m=M):
    """An N x m neighbour list: indices of other elements, or -1 (no neighbour) in about a third of slots."""
    nb = rng.integers(0, N, (N, m)).astype(np.int32)
    nb[rng.random((N, m)) < 0.35] = -1
    nb[0, :] = -1   # one element without any
    return nb


def first_neighbour(rng):
    return np.ascontiguousarray(neighbours(rng)[:, 0])


# ---- if: a neighbour list with -1 sentinels, in a loop bounded by a shape ------------------------------
@sp.kernel
def neighbour_sum(x: sp.Array, w: sp.Array, nb: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        s = 0.0
        for m in range(nb.shape[1]):
            j = nb[i, m]
            if j >= 0:
                s += sp.sin(x[j]) * w[i] + x[j] * x[i]
        y[i] = s


def neighbour_sum_ref(x, w, nb, y):
    for i in range(len(y)):
        y[i] = sum(math.sin(x[j]) * w[i] + x[j] * x[i] for j in nb[i] if j >= 0)


case("if", neighbour_sum, neighbour_sum_ref, lambda r: [rand(r, N), rand(r, N), neighbours(r), zeros()], [3], [0, 1])


# ---- a conditional expression, and one inside a dynamic loop ---------------------------------------------
@sp.kernel
def conditional_expression(x: sp.Array, nb: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(y.shape[0]):
        j = nb[i]
        v = sp.sin(x[j]) * x[i] if j >= 0 else x[i] * 0.5
        for k in range(n):
            v = v * 0.9 + (x[j] * v if j >= 0 else 0.25)
        y[i] = v


def conditional_expression_ref(x, nb, y, n):
    for i in range(len(y)):
        j = nb[i]
        v = math.sin(x[j]) * x[i] if j >= 0 else x[i] * 0.5
        for _ in range(n):
            v = v * 0.9 + (x[j] * v if j >= 0 else 0.25)
        y[i] = v


case("conditional_expression", conditional_expression, conditional_expression_ref,
     lambda r: [rand(r, N), first_neighbour(r), zeros(), 3], [2], [0])


# ---- and / or --------------------------------------------------------------------------------------------
@sp.kernel
def and_or(x: sp.Array, nb: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        j = nb[i]
        v = x[i]
        if j >= 0 and x[j] > -0.5:
            v = v * x[j] + 1.0
        if j < 0 or x[j] < 0.0:
            v = v * 2.0
        else:
            v = v + sp.exp(x[j])
        y[i] = v


def and_or_ref(x, nb, y):
    for i in range(len(y)):
        j = nb[i]
        v = x[i]
        if j >= 0 and x[j] > -0.5:
            v = v * x[j] + 1.0
        v = v * 2.0 if j < 0 or x[j] < 0.0 else v + math.exp(x[j])
        y[i] = v


case("and_or", and_or, and_or_ref, lambda r: [rand(r, N), first_neighbour(r), zeros()], [2], [0])


# ---- a loop condition: a loop that may run no iteration reads an element its index points at ------------
@sp.kernel
def loop_guard(x: sp.Array, nb: sp.Array, count: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        v = x[i]
        j = nb[i]
        for k in range(count[i]):
            v = v * 0.5 + x[j] * sp.cos(v)
        y[i] = v


def loop_guard_ref(x, nb, count, y):
    for i in range(len(y)):
        v = x[i]
        for _ in range(count[i]):
            v = v * 0.5 + x[nb[i]] * math.cos(v)
        y[i] = v


def _loop_guard_args(r):
    nb = first_neighbour(r)
    count = np.where(nb >= 0, r.integers(1, 4, N), 0).astype(np.int32)   # no neighbour, no iteration
    return [rand(r, N), nb, count, zeros()]


case("loop_condition", loop_guard, loop_guard_ref, _loop_guard_args, [3], [0])


@sp.kernel
def nested_loops(x: sp.Array, nb: sp.Array, count: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        v = x[i]
        j = nb[i]
        for a in range(2):                 # starts always; the loop inside it may not
            for b in range(count[i]):
                v = v * 0.7 + x[j] * sp.sin(v)
        if j >= 0:
            for k in range(3):             # a constant loop under the guard reads x[j] in every iteration
                v = v * x[j] + 0.1
        y[i] = v


def nested_loops_ref(x, nb, count, y):
    for i in range(len(y)):
        v, j = x[i], nb[i]
        for _ in range(2):
            for _ in range(count[i]):
                v = v * 0.7 + x[j] * math.sin(v)
        if j >= 0:
            for _ in range(3):
                v = v * x[j] + 0.1
        y[i] = v


case("nested_loops", nested_loops, nested_loops_ref, _loop_guard_args, [3], [0])


# ---- a while condition: linked lists ended by -1 (trip counts from data: the depth probe sizes stacks) ----
@sp.kernel
def linked_lists(x: sp.Array, head: sp.Array, nxt: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        v = 0.0
        j = head[i]
        while j >= 0 and x[j] > -2.0:
            v = v * sp.cos(x[j]) + x[j]
            j = nxt[j]
        y[i] = v


def linked_lists_ref(x, head, nxt, y):
    for i in range(len(y)):
        v, j = 0.0, head[i]
        while j >= 0 and x[j] > -2.0:
            v = v * math.cos(x[j]) + x[j]
            j = nxt[j]
        y[i] = v


def _lists(r):
    nxt = np.full(N, -1, np.int32)
    order = r.permutation(N)
    for a, b in zip(order[:-1], order[1:]):   # one chain through all elements, cut in a few places
        nxt[a] = -1 if r.random() < 0.3 else b
    head = np.where(r.random(N) < 0.3, -1, r.integers(0, N, N)).astype(np.int32)
    return [rand(r, N), head, nxt, zeros()]


case("while_condition", linked_lists, linked_lists_ref, _lists, [3], [0])


# ---- the DiffTaichi wave stencil: neighbours outside the grid read as 0 ------------------------------------
G = 5


@sp.kernel
def wave_step(p: sp.Array, q: sp.Array):
    for i, j in sp.ndrange(G, G):
        lap = 0.0
        for d in sp.static(range(4)):
            a = i + (d == 0) - (d == 1)
            b = j + (d == 2) - (d == 3)
            lap += p[a, b] if 0 <= a < G and 0 <= b < G else 0.0
        q[i, j] = p[i, j] * 0.8 + 0.05 * (lap - 4.0 * p[i, j]) + 0.1 * p[i, j] * p[i, j]


def wave_step_ref(p, q):
    for i in range(G):
        for j in range(G):
            lap = sum(p[a, b] for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)) if 0 <= a < G and 0 <= b < G)
            q[i, j] = p[i, j] * 0.8 + 0.05 * (lap - 4.0 * p[i, j]) + 0.1 * p[i, j] * p[i, j]


case("wave", wave_step, wave_step_ref, lambda r: [rand(r, (G, G)), zeros(G, G)], [1], [0])


# ---- guarded writes: a store, an atomic add, an atomic max (its tie tasks) ---------------------------------
@sp.kernel
def scatter(x: sp.Array, nb: sp.Array, y: sp.Array, acc: sp.Array, top: sp.Array):
    for i in range(x.shape[0]):
        j = nb[i]
        if j >= 0:
            y[j] = x[i] * x[i]
            acc[j] += sp.sin(x[i])
            sp.atomic_max(top[j], x[i] * 2.0)


def scatter_ref(x, nb, y, acc, top):
    for i in range(len(x)):
        j = nb[i]
        if j >= 0:
            y[j] = x[i] * x[i]
            acc[j] += math.sin(x[i])
            top[j] = max(top[j], x[i] * 2.0)


def _scatter_args(r):
    nb = r.permutation(N).astype(np.int32)   # distinct targets: the store has one writer per element
    nb[r.random(N) < 0.4] = -1
    nb[0] = -1
    return [rand(r, N), nb, zeros(), zeros(), np.full(N, -5.0, np.float32)]


case("guarded_writes", scatter, scatter_ref, _scatter_args, [2, 3, 4], [0])


# ---- an in-kernel derivative of a func that reads an array behind a guard ----------------------------------
@sp.func
def bonded(p, x, nb, i):
    e = p * p * 0.5
    for m in range(nb.shape[1]):
        j = nb[i, m]
        if j >= 0:
            e += sp.sin(p * x[j])
    return e


@sp.kernel
def forces(x: sp.Array, nb: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = sp.grad(bonded)(x[i], x, nb, i) * x[i]


def forces_ref(x, nb, y):
    for i in range(len(y)):
        y[i] = (x[i] + sum(x[j] * math.cos(x[i] * x[j]) for j in nb[i] if j >= 0)) * x[i]


case("inkernel_grad", forces, forces_ref, lambda r: [rand(r, N), neighbours(r), zeros()], [2], [0])


@sp.func
def strain_energy(F, x, nb, i):   # 9 inputs, one output: reverse mode inside the kernel
    e = sp.trace(F @ F.transpose()) * 0.25
    for m in sp.static(range(M)):
        j = nb[i, m]
        if j >= 0:
            e += sp.sin(F[0, 0] * x[j]) + F[1, 2] * F[2, 1] * x[j]
    return e


@sp.kernel
def stresses(x: sp.Array, nb: sp.Array, y: sp.Array):
    for i in range(y.shape[0]):
        a = x[i]
        F = sp.mat3(a, 0.3, 0.1, -0.2, a * a, 0.4, 0.5, 0.2, 1.0 - a)
        P = sp.grad(strain_energy)(F, x, nb, i)
        y[i] = P[0, 0] + P[1, 2] * a + P[2, 1]


def stresses_ref(x, nb, y):
    for i in range(len(y)):
        a = x[i]
        F = np.array([[a, 0.3, 0.1], [-0.2, a * a, 0.4], [0.5, 0.2, 1.0 - a]])
        P = F * 0.5
        for j in nb[i]:
            if j >= 0:
                P[0, 0] += math.cos(F[0, 0] * x[j]) * x[j]
                P[1, 2] += F[2, 1] * x[j]
                P[2, 1] += F[1, 2] * x[j]
        y[i] = P[0, 0] + P[1, 2] * a + P[2, 1]


case("inkernel_reverse", stresses, stresses_ref, lambda r: [rand(r, N), neighbours(r), zeros()], [2], [0])


# ---- the tests ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient(name, rng):
    """k.grad against central differences of the float64 reference."""
    check_case(CASES[name], rng)


@sp.kernel
def weighted_sum(y: sp.Array, s: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * s[i]


@sp.kernel
def weighted_sum_2d(y: sp.Array, s: sp.Array, loss: sp.Array):
    for i, j in sp.ndrange(y.shape[0], y.shape[1]):
        loss[None] += y[i, j] * s[i, j]


def upload(dev, args):
    for d, a in zip(dev, args):
        if isinstance(a, np.ndarray):
            d.from_numpy(a)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tape_and_forward_mode(name, rng):
    """A whole program under a Tape: the kernel, then loss = sum(seed * output) by another kernel, run twice
    on the same buffers; and FwdMode along a random direction. Both against float64 central differences."""
    kernel, ref, make_args, outs, wrt = CASES[name]
    args = make_args(rng)
    out = outs[0]
    seed = rand(rng, np.shape(args[out]), 0.5, 1.5, np.float64)
    dev = [sp.from_numpy(a, needs_grad=k in wrt or k in outs, needs_dual=k in wrt or k in outs)
           if isinstance(a, np.ndarray) else a for k, a in enumerate(args)]
    s = sp.from_numpy(seed.astype(np.float32))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    total = weighted_sum_2d if seed.ndim == 2 else weighted_sum
    for _ in range(2):
        upload(dev, args)
        loss.fill(0.0)
        with sp.Tape(loss=loss):
            kernel(*dev)
            total(dev[out], s, loss)
    want = reference(ref, args, [out])[0]
    assert loss.to_numpy() == pytest.approx(float(np.sum(seed * want)), rel=1e-4, abs=1e-4)
    for k in wrt:
        fd = finite_differences(ref, args, [out], [seed], k)
        assert np.any(fd != 0), f"test is vacuous: zero gradient w.r.t. argument {k}"
        assert_close(dev[k].grad.to_numpy(), fd, 1e-4, f"Tape gradient w.r.t. argument {k}")

    k = wrt[0]
    direction = rand(rng, np.shape(args[k]), 0.5, 1.5, np.float64)
    upload(dev, args)
    with sp.FwdMode(loss=dev[out], param=dev[k], seed=direction.reshape(-1)):
        kernel(*dev)
    jvp = directional_differences(ref, args, out, k, direction)
    assert np.any(jvp != 0), "test is vacuous: zero directional derivative"
    assert_close(dev[out].dual.to_numpy(), jvp, 1e-4, "forward-mode derivative along a random direction")


def directional_differences(ref, args, out, k, direction, eps=1e-6):
    """d output / d args[k] along `direction` by central differences of the float64 reference."""
    sides = []
    for h in (eps, -eps):
        a = list(args)
        a[k] = args[k].astype(np.float64) + h * direction
        sides.append(reference(ref, a, [out])[0])
    return (sides[0] - sides[1]) / (2 * eps)

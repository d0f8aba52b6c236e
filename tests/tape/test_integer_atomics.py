"""Integer atomics whose old value is used (cell lists, stream compaction, emit counters) inside a Tape: thread
order decides those values, and no float gradient needs them, so the program differentiates through the
float arrays around them. Only a gradient that needs such a value is refused. Against float64 references."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends

CELLS, CAP, H = 8, 16, 1.0   # a 1-D grid of cells of width H, at most CAP particles per cell


@sp.func
def cell_of(p):
    return sp.min(sp.max(sp.i32(sp.floor(p / H)), 0), CELLS - 1)


@sp.kernel
def clear(count: sp.Array):
    for c in range(count.shape[0]):
        count[c] = 0


@sp.kernel
def bin_particles(pos: sp.Array, count: sp.Array, members: sp.Array):
    for i in range(pos.shape[0]):
        c = cell_of(pos[i])
        slot = sp.atomic_add(count[c], 1)   # thread order decides the slot: an integer, no gradient
        if slot < CAP:
            members[c, slot] = i


@sp.func
def density_at(pos, count, members, i):
    """The density at particle i: a Gaussian over the particles of its cell and the two beside it."""
    c = cell_of(pos[i])
    s = 0.0
    for dc in range(-1, 2):
        n = c + dc
        if 0 <= n < CELLS:
            for k in range(sp.min(count[n], CAP)):
                d = pos[i] - pos[members[n, k]]
                s += sp.exp(-d * d)
    return s


@sp.kernel
def density(pos: sp.Array, count: sp.Array, members: sp.Array, rho: sp.Array):
    for i in range(pos.shape[0]):
        rho[i] = density_at(pos, count, members, i)


@sp.kernel
def pressure_loss(rho: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(rho.shape[0]):
        loss[None] += w[i] * rho[i] * rho[i]


def sph_np(pos, w):
    cells = np.clip(np.floor(pos / H).astype(int), 0, CELLS - 1)
    rho = np.zeros(len(pos))
    for i in range(len(pos)):
        near = np.abs(cells - cells[i]) <= 1
        d = pos[i] - pos[near]
        rho[i] = np.sum(np.exp(-d * d))
    return np.sum(w * rho * rho)


def positions(rng, n):
    """Random positions away from the cell borders (the neighbour sets stay put under finite differences)."""
    return (rng.integers(0, CELLS, n) + rng.uniform(0.05, 0.95, n)).astype(np.float32)


def sph_setup(rng, n, w_grad=False):
    """(p0, w0, pos, w, count, members, rho, loss): random particles and the arrays of the SPH program."""
    p0, w0 = positions(rng, n), rng.uniform(0.5, 1.5, n).astype(np.float32)
    pos, w = sp.from_numpy(p0, needs_grad=True), sp.from_numpy(w0, needs_grad=w_grad)
    count, members = sp.ndarray(sp.i32, (CELLS,)), sp.ndarray(sp.i32, (CELLS, CAP))
    rho = sp.ndarray(sp.f32, (n,))   # an intermediate: the Tape gives it a temporary .grad
    return p0, w0, pos, w, count, members, rho, sp.ndarray(sp.f32, (), needs_grad=True)


def sph_tape(pos, w, count, members, rho, loss):
    with sp.Tape(loss):
        clear(count)
        bin_particles(pos, count, members)
        density(pos, count, members, rho)
        pressure_loss(rho, w, loss)


def check_sph(p0, w0, pos, loss):
    pd, wd = p0.astype(np.float64), w0.astype(np.float64)
    np.testing.assert_allclose(loss[None], sph_np(pd, wd), rtol=1e-5)
    fd = [(sph_np(pd + 1e-6 * e, wd) - sph_np(pd - 1e-6 * e, wd)) / 2e-6 for e in np.eye(len(p0))]
    np.testing.assert_allclose(pos.grad.to_numpy(), fd, rtol=1e-3, atol=1e-3)


def test_sph_neighbour_grid_under_a_tape(rng):
    p0, w0, pos, w, count, members, rho, loss = sph_setup(rng, 40, w_grad=True)
    for _ in range(2):   # the grid rebuilt in every Tape (buffers reused)
        sph_tape(pos, w, count, members, rho, loss)
        check_sph(p0, w0, pos, loss)
        pd = p0.astype(np.float64)
        cells = np.clip(np.floor(pd / H).astype(int), 0, CELLS - 1)
        rho_np = [np.sum(np.exp(-(pd[i] - pd[np.abs(cells - cells[i]) <= 1]) ** 2)) for i in range(len(pd))]
        np.testing.assert_allclose(w.grad.to_numpy(), np.square(rho_np), rtol=1e-5)


@sp.kernel
def select_positive(x: sp.Array, n_out: sp.Array, picked: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            slot = sp.atomic_add(n_out[None], 1)   # stream compaction: an emit counter
            picked[slot] = i


@sp.kernel
def gather_squares(x: sp.Array, n_out: sp.Array, picked: sp.Array, loss: sp.Array):
    for k in range(x.shape[0]):
        if k < n_out[None]:
            v = x[picked[k]]
            loss[None] += v * v * v


def test_stream_compaction_under_a_tape(rng):
    x0 = (np.where(rng.random(33) < 0.5, -1.0, 1.0) * rng.uniform(0.2, 1.2, 33)).astype(np.float32)
    x = sp.from_numpy(x0, needs_grad=True)
    n_out, picked = sp.ndarray(sp.i32, ()), sp.ndarray(sp.i32, (33,))
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        n_out.fill(0)
        select_positive(x, n_out, picked)
        gather_squares(x, n_out, picked, loss)
    xd = x0.astype(np.float64)
    assert n_out[None] == np.sum(xd > 0)
    np.testing.assert_allclose(loss[None], np.sum(np.where(xd > 0, xd ** 3, 0.0)), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), np.where(xd > 0, 3 * xd ** 2, 0.0), rtol=1e-5)


@sp.kernel
def compact_values(x: sp.Array, n_out: sp.Array, vals: sp.Array, w: sp.Array):
    for i in range(x.shape[0]):
        slot = sp.atomic_add(n_out[None], 1)
        vals[slot] = x[i] * w[i]   # where this differentiated value goes is thread order's choice
        w[i] = 0.5 * w[i]          # (a float write with no thread-order index stays fine)


@sp.kernel
def scaled_by_slot(x: sp.Array, counter: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        k = sp.atomic_add(counter[None], 1)
        out[i] = x[i] * sp.f32(k)   # the slot scales a differentiated value


def test_a_gradient_that_needs_the_old_value_is_refused(rng):
    def floats():
        return sp.from_numpy(rng.uniform(0.5, 1.0, 8).astype(np.float32), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with pytest.raises(sp.AutodiffRuleError, match="compact_values.*sp.atomic_add on 'n_out'.*thread order"):
        with sp.Tape(loss):
            compact_values(floats(), sp.ndarray(sp.i32, ()), floats(), floats())
    with pytest.raises(sp.AutodiffRuleError, match="scaled_by_slot.*sp.atomic_add on 'counter'.*thread order"):
        with sp.Tape(loss):
            scaled_by_slot(floats(), sp.ndarray(sp.i32, ()), floats())


@sp.kernel
def counted_steps(x: sp.Array, counter: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        ticket = sp.atomic_add(counter[None], 1)
        v = x[i]
        if ticket >= 0:   # always true, but thread order decides it: the branch steers differentiated work
            v = sp.sin(v)
        y[i] = v


def test_control_flow_steered_by_the_old_value_is_refused(rng):
    x = sp.from_numpy(rng.uniform(0.5, 1.0, 8).astype(np.float32), needs_grad=True)
    y = sp.ndarray(sp.f32, (8,), needs_grad=True)
    counted_steps(x, sp.ndarray(sp.i32, ()), y)
    y.grad.fill(1.0)
    with pytest.raises(sp.AutodiffRuleError, match="counted_steps.*atomic_add on 'counter'"):
        counted_steps.grad(x, sp.ndarray(sp.i32, ()), y)


@sp.kernel
def tickets_and_work(x: sp.Array, counter: sp.Array, order: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        order[i] = sp.atomic_add(counter[None], 1)   # bookkeeping beside the differentiated work
        v = x[i]
        k = 0
        while k < n:                                 # a loop with an adstack
            v = v + 0.1 * sp.sin(v)
            k += 1
        y[i] = v


def test_direct_grad_through_a_loop_beside_an_integer_atomic(rng):
    x0 = rng.uniform(-1.0, 1.0, 16).astype(np.float32)
    x, y = sp.from_numpy(x0, needs_grad=True), sp.ndarray(sp.f32, (16,), needs_grad=True)
    counter, order = sp.ndarray(sp.i32, ()), sp.ndarray(sp.i32, (16,))
    tickets_and_work(x, counter, order, y, 5)
    assert sorted(order.to_numpy()) == list(range(16))
    y.grad.fill(1.0)
    tickets_and_work.grad(x, counter, order, y, 5)

    def run(v):
        for _ in range(5):
            v = v + 0.1 * np.sin(v)
        return v
    xd = x0.astype(np.float64)
    np.testing.assert_allclose(y.to_numpy(), run(xd), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), (run(xd + 1e-6) - run(xd - 1e-6)) / 2e-6, rtol=1e-4)


def test_cell_lists_stay_in_bounds_under_debug(debug_on, rng):
    """debug=True checks every access: the gradient replays leave the thread-order slots out, and what they
    do touch is in bounds."""
    p0, w0, pos, w, count, members, rho, loss = sph_setup(rng, 24)
    sph_tape(pos, w, count, members, rho, loss)
    check_sph(p0, w0, pos, loss)


@sp.kernel
def sph_in_one_launch(pos: sp.Array, count: sp.Array, members: sp.Array, rho: sp.Array):
    for c in range(count.shape[0]):
        count[c] = 0
    for i in range(pos.shape[0]):
        c = cell_of(pos[i])
        slot = sp.atomic_add(count[c], 1)
        if slot < CAP:
            members[c, slot] = i
    for i in range(pos.shape[0]):
        rho[i] = density_at(pos, count, members, i)
    for c in range(count.shape[0]):
        count[c] = -1   # the counts exist only between the loops: the gradient recomputes them


def test_a_cell_list_built_and_used_inside_one_launch(rng):
    p0, w0, pos, w, count, members, rho, loss = sph_setup(rng, 30)
    for _ in range(2):
        with sp.Tape(loss):
            sph_in_one_launch(pos, count, members, rho)
            pressure_loss(rho, w, loss)
        check_sph(p0, w0, pos, loss)

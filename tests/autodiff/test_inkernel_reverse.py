"""Reverse mode inside kernels (autodiff/inline_reverse.py): the derivative table in reverse mode against
float64 references, adstacks sized at compile time, at launch, by the depth probe or by ad_stack_size,
overflow raised at sync, derivatives taken again and again in a kernel loop, several outputs in one sweep
(with random numbers), prints, and whole programs differentiated again (Tape, k.grad, FwdMode). The rest of
test_inkernel_derivatives.py also runs with every derivative in reverse mode (its `derivative_mode`)."""
import re

import numpy as np
import pytest

import spvad as sp
from spvad.autodiff import inline_derivatives as D
from tests.autodiff.test_inkernel_derivatives import M, TABLE, close, fd, rand, run_table, table_kernel

pytestmark = pytest.mark.backends


@pytest.fixture
def reverse_everywhere(monkeypatch):
    """Every unit-direction derivative takes reverse mode (the width threshold at 0), compiled afresh;
    returns the list of the derivatives expanded with loops or branches in reverse mode (their widths)."""
    monkeypatch.setattr(D, "REVERSE_WIDTH_PER_OUTPUT", 0)
    monkeypatch.setattr(D, "REVERSE_WIDTH_PER_OUTPUT_WITH_LOOPS", 0)
    monkeypatch.setenv("SPVAD_CACHE", "0")
    seen = []

    class Recorded(D.InlineReverse):
        def run(self):
            seen.append(self.deriv.width)
            return super().run()
    monkeypatch.setattr(D, "InlineReverse", Recorded)
    return seen


def uses_stacks(kernel, *args):
    return "adstack " in kernel.ir(*args)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_derivative_table_in_reverse_mode(name, rng, reverse_everywhere):
    """Value, gradients and hessian (reverse over forward) of every row; loops put their loop-carried
    values on stacks sized at launch from `n`; a while loop's trip count is data: forward mode."""
    kernel = table_kernel(TABLE[name][0])
    args = run_table(name, rng, kernel)
    assert uses_stacks(kernel, *args) == (name in ("loop", "while"))   # the while loop's sized by the probe
    # value_and_grad (4 inputs), grad (1), the hessian's outer jacobian (3 outputs) and its inner gradient
    # (3 inputs), which stays in forward mode where it has loops (their stacks would be differentiated
    # again)
    want = [1, 3, 4] if name in ("loop", "while") else [1, 3, 3, 4]
    if name == "calls_grad":   # and the gradient of `potential` in each of f's inlined copies
        want = [1] + [3] * (len(reverse_everywhere) - 2) + [4]
    assert sorted(reverse_everywhere) == want


def test_while_loops_with_a_fixed_stack_size(rng, reverse_everywhere):
    """ad_stack_size sizes the stacks of a while loop instead of the depth probe."""
    kernel = sp.kernel(table_kernel(TABLE["while"][0]).fn, ad_stack_size=16)
    args = run_table("while", rng, kernel)
    assert uses_stacks(kernel, *args) and sorted(reverse_everywhere) == [1, 3, 4]


# ---- a wide function with a loop: reverse mode by default (16 inputs, 1 output) ----------------------------
@sp.func
def chain_energy(F, n):
    """x_{k+1} = tanh(F x_k), e = sum_k |x_k|^2: the gradient with respect to F's 16 entries."""
    x = sp.vec4(1.0, 0.5, -0.3, 0.2)
    e = 0.0
    for _ in range(n):
        x = sp.tanh(F @ x)
        e += sp.dot(x, x)
    return e


def chain_energy_np(F, n):
    x, e = np.array([1.0, 0.5, -0.3, 0.2]), 0.0
    for _ in range(n):
        x = np.tanh(F @ x)
        e += x @ x
    return e


def chain_gradient_np(F, n):
    """The same gradient by hand (backpropagation in float64)."""
    xs = [np.array([1.0, 0.5, -0.3, 0.2])]
    for _ in range(n):
        xs.append(np.tanh(F @ xs[-1]))
    G, gx = np.zeros((4, 4)), np.zeros(4)
    for k in range(n, 0, -1):
        gx = gx + 2 * xs[k]
        gz = gx * (1 - xs[k] ** 2)
        G += np.outer(gz, xs[k - 1])
        gx = F.T @ gz
    return G


@sp.kernel
def descend(Fs: sp.Array, n: sp.i32, iters: sp.i32, lr: sp.f32, out: sp.Array, e: sp.Array):
    for i in range(Fs.shape[0]):
        F = Fs[i]
        for _ in range(iters):   # the derivative runs again every iteration: its adjoints start at zero
            F = F - lr * sp.grad(chain_energy)(F, n)
        out[i] = F
        e[i] = chain_energy(F, n)


def test_gradient_descent_inside_a_kernel(rng):
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    out, e = sp.ndarray(sp.mat4, (M,)), sp.ndarray(sp.f32, (M,))
    args = (sp.from_numpy(F0, dtype=sp.mat4), 6, 5, 0.05, out, e)
    descend(*args)
    assert uses_stacks(descend, *args)
    np.testing.assert_allclose(chain_gradient_np(F0[0].astype(np.float64), 6),
                               fd(lambda F: chain_energy_np(F, 6), F0[0].astype(np.float64)), rtol=1e-6)
    for i in range(M):
        F = F0[i].astype(np.float64)
        for _ in range(5):
            F = F - 0.05 * chain_gradient_np(F, 6)
        close(out.to_numpy()[i], F, 2e-5)
        assert e.to_numpy()[i] == pytest.approx(chain_energy_np(F, 6), rel=1e-5)


@sp.kernel
def step_energy(Fs: sp.Array, n: sp.i32, lr: sp.f32, e: sp.Array):
    for i in range(Fs.shape[0]):
        F = Fs[i]
        e[i] = chain_energy(F - lr * sp.grad(chain_energy)(F, n), n)


@sp.kernel
def weighted_sum(e: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(e.shape[0]):
        loss[None] += w[i] * e[i]


def test_whole_programs_differentiate_it_again(rng):
    """The primal launch runs the inner gradient in reverse mode; the Tape's backward (k.grad), reverse over
    forward, through a second kernel."""
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs = sp.from_numpy(F0, dtype=sp.mat4, needs_grad=True)
    e = sp.ndarray(sp.f32, (M,), needs_grad=True)
    w = rand(rng, M)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    def after_step(F, n=6, lr=0.05):
        return chain_energy_np(F - lr * chain_gradient_np(F, n), n)
    with sp.Tape(loss=loss):
        step_energy(Fs, 6, 0.05, e)
        weighted_sum(e, sp.from_numpy(w), loss)
    assert uses_stacks(step_energy, Fs, 6, 0.05, e)
    for i in range(M):
        assert e.to_numpy()[i] == pytest.approx(after_step(F0[i].astype(np.float64)), rel=1e-5)
        close(Fs.grad.to_numpy()[i], w[i] * fd(after_step, F0[i].astype(np.float64)), 1e-4)


# ---- stacks: sized at launch, by ad_stack_size, and an overflow raised at sync ------------------------------
def test_stacks_follow_the_launch_and_overflow_is_raised(rng):
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs = sp.from_numpy(F0, dtype=sp.mat4)
    out, e = sp.ndarray(sp.mat4, (M,)), sp.ndarray(sp.f32, (M,))
    for n in (3, 40):   # capacities from n at every launch
        descend(Fs, n, 1, 0.05, out, e)
        close(out.to_numpy(), F0 - 0.05 * np.stack([chain_gradient_np(F.astype(np.float64), n) for F in F0]), 2e-5)
    small = sp.kernel(descend.fn, ad_stack_size=4)
    small(Fs, 4, 1, 0.05, out, e)
    with pytest.raises(sp.AdStackOverflowError, match="ad_stack_size>=5"):
        small(Fs, 5, 1, 0.05, out, e)
        sp.sync()
    small(Fs, 2, 1, 0.05, out, e)   # the runtime goes on
    close(out.to_numpy(), F0 - 0.05 * np.stack([chain_gradient_np(F.astype(np.float64), 2) for F in F0]), 2e-5)


@sp.kernel
def descend_counted(Fs: sp.Array, steps: sp.Array, lr: sp.f32, out: sp.Array, total: sp.Array):
    for i in range(Fs.shape[0]):
        e, g = sp.value_and_grad(chain_energy)(Fs[i], steps[i])   # a trip count read from an array
        out[i] = Fs[i] - lr * g
        total[None] += e   # an atomic whose old value nobody reads: the probe misses no read


def test_trip_counts_from_array_data_are_measured(rng):
    """The depth probe (the kernel with its derivatives in forward mode, counting trips) sizes the stacks
    before each launch: more steps in the next launch get larger stacks."""
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs, out = sp.from_numpy(F0, dtype=sp.mat4), sp.ndarray(sp.mat4, (M,))
    total = sp.ndarray(sp.f32, ())
    for counts in ([1, 3, 2, 5], [9, 2, 17, 4]):
        steps = sp.from_numpy(np.array(counts, np.int32))
        total.fill(0.0)
        descend_counted(Fs, steps, 0.05, out, total)
        for i in range(M):
            close(out.to_numpy()[i], F0[i] - 0.05 * chain_gradient_np(F0[i].astype(np.float64), counts[i]), 2e-5)
        assert float(total.to_numpy()) == pytest.approx(
            sum(chain_energy_np(F.astype(np.float64), n) for F, n in zip(F0, counts)), rel=1e-5)
    ck = descend_counted._compiled(descend_counted._bind((Fs, steps, 0.05, out, total))[0])
    assert ck.tasks[0].depth_probe is not None and ck.tasks[0].stack_sizes.measured


@sp.kernel
def recount(Fs: sp.Array, steps: sp.Array, g: sp.Array):
    for i in range(Fs.shape[0]):
        steps[i] = steps[i] + 2   # the trip count written before it is read: a probe would see the old one
        g[i] = sp.grad(chain_energy)(Fs[i], steps[i])


def test_trip_counts_the_launch_writes_take_forward_mode(rng):
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs, g = sp.from_numpy(F0, dtype=sp.mat4), sp.ndarray(sp.mat4, (M,))
    steps = sp.from_numpy(np.array([1, 3, 2, 5], np.int32))
    recount(Fs, steps, g)
    np.testing.assert_array_equal(steps.to_numpy(), [3, 5, 4, 7])
    for i, n in enumerate([3, 5, 4, 7]):
        close(g.to_numpy()[i], chain_gradient_np(F0[i].astype(np.float64), n), 2e-5)
    assert "adstack " not in recount.ir(Fs, steps, g)


@sp.kernel
def relabel(Fs: sp.Array, src: sp.Array, dst: sp.Array, g: sp.Array):
    for i in range(Fs.shape[0]):
        dst[i] = 6
        g[i] = sp.grad(chain_energy)(Fs[i], src[i])   # src may be dst under another name


def test_an_ndarray_under_two_names_is_not_probed(rng):
    """Bound to two parameters, one written and one read, an ndarray would show the probe its old contents:
    that launch compiles without probe-sized stacks (forward mode there)."""
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs, g = sp.from_numpy(F0, dtype=sp.mat4), sp.ndarray(sp.mat4, (M,))
    counts = sp.from_numpy(np.array([1, 2, 1, 2], np.int32))
    relabel(Fs, counts, sp.ndarray(sp.i32, (M,)), g)   # distinct arrays: probed, reverse mode
    for i, n in enumerate([1, 2, 1, 2]):
        close(g.to_numpy()[i], chain_gradient_np(F0[i].astype(np.float64), n), 2e-5)
    relabel(Fs, counts, counts, g)
    for i in range(M):
        close(g.to_numpy()[i], chain_gradient_np(F0[i].astype(np.float64), 6), 2e-5)


# ---- several outputs in one sweep, through random numbers ----------------------------------------------------
@sp.func
def noisy(p):
    a = 0.0
    for _ in range(4):
        a += sp.random(sp.f32) * (1.0 + p.z)
    return sp.vec2(a * p.x, a * p.y * p.y)


@sp.kernel
def noisy_jacobian(pts: sp.Array, val: sp.Array, J: sp.Array):
    for i in range(pts.shape[0]):
        J[i] = sp.jacobian(noisy)(pts[i])


def test_several_outputs_in_one_sweep_with_random_numbers(rng, reverse_everywhere):
    """f = (A x, A y^2), A = (1 + z) * a sum of 4 random numbers: both rows of J see the A of the primal run."""
    P = rand(rng, (M, 3))
    val, J = sp.ndarray(sp.vec2, (M,)), sp.ndarray(sp.Matrix(2, 3), (M,))
    noisy_jacobian(sp.from_numpy(P, dtype=sp.vec3), val, J)
    assert reverse_everywhere == [3]
    J, P64 = J.to_numpy().astype(np.float64), P.astype(np.float64)
    A = J[:, 0, 0]
    assert np.all((A / (1 + P64[:, 2]) > 0) & (A / (1 + P64[:, 2]) < 4)) and len(set(A.tolist())) == M
    np.testing.assert_allclose(J[:, 1, 1], 2 * A * P64[:, 1], rtol=1e-6)
    np.testing.assert_allclose(J[:, 0, 2], A / (1 + P64[:, 2]) * P64[:, 0], rtol=1e-5)
    np.testing.assert_allclose(J[:, 1, 2], A / (1 + P64[:, 2]) * P64[:, 1] ** 2, rtol=1e-5)
    np.testing.assert_array_equal(J[:, 0, 1], 0.0)


# ---- the function's prints: once, from the primal run ------------------------------------------------------
@sp.func
def loud(p, n):
    acc = 0.0
    for k in range(n):
        acc += sp.sin(p.x * k + p.y)
        if k == n - 1:
            print("last step", k)
    return acc * p.z


@sp.kernel
def loud_grad(pts: sp.Array, n: sp.i32, g: sp.Array):
    for i in range(pts.shape[0]):
        g[i] = sp.grad(loud)(pts[i], n)


def test_prints_once(rng, capsys, reverse_everywhere):
    P = rand(rng, (2, 3))
    g = sp.ndarray(sp.vec3, (2,))
    loud_grad(sp.from_numpy(P, dtype=sp.vec3), 3, g)
    sp.sync()
    assert capsys.readouterr().out.splitlines() == ["last step 2"] * 2
    assert reverse_everywhere == [3]

    def ref(p):
        return sum(np.sin(p[0] * k + p[1]) for k in range(3)) * p[2]
    for i in range(2):
        close(g.to_numpy()[i], fd(ref, P[i].astype(np.float64)))


# ---- reverse over reverse: a function without loops keeps reverse mode in a differentiated kernel ---------
@sp.func
def branchy_energy(F, mu):
    J = sp.determinant(F)
    e = 0.0
    if J > 0.9:
        e = mu * (sp.trace(F.T @ F) - 3.0) - 2.0 * mu * sp.log(J)
    else:
        e = 5.0 * (J - 0.9) * (J - 0.9) + mu * sp.trace(F @ F)
    return e + 0.5 * (J - 1.0) * (J - 1.0)


def branchy_energy_np(F, mu):
    J = np.linalg.det(F)
    if J > 0.9:
        e = mu * (np.trace(F.T @ F) - 3.0) - 2.0 * mu * np.log(J)
    else:
        e = 5.0 * (J - 0.9) ** 2 + mu * np.trace(F @ F)
    return e + 0.5 * (J - 1.0) ** 2


@sp.kernel
def stress_work(Fs: sp.Array, W: sp.Array, mu: sp.f32, work: sp.Array):
    for i in range(Fs.shape[0]):
        P = sp.grad(branchy_energy)(Fs[i], mu)   # 9 inputs, one output: reverse mode
        work[None] += sp.trace(P.T @ W[i])


def test_reverse_over_reverse_with_branches(rng):
    """work = sum_i <dE/dF(F_i), W_i>; d work / dF_i = H_i W_i by k.grad (Tape) and FwdMode, on both branches."""
    F0 = np.eye(3) + 0.25 * rand(rng, (M, 3, 3))
    target = np.array([1.2, 0.7, 1.4, 0.6])   # determinants on both branches, away from the switch
    F0 = (F0 * np.cbrt(target / np.linalg.det(F0))[:, None, None]).astype(np.float32)
    W0 = rand(rng, (M, 3, 3))
    Fs = sp.from_numpy(F0, dtype=sp.mat3, needs_grad=True, needs_dual=True)
    work = sp.ndarray(sp.f32, (), needs_grad=True, needs_dual=True)
    W = sp.from_numpy(W0, dtype=sp.mat3)
    with sp.Tape(loss=work):
        stress_work(Fs, W, 0.7, work)
    assert "adstack " not in stress_work.ir(Fs, W, 0.7, work, grad=True)

    def work_np(F, i):
        return float((fd(lambda G: branchy_energy_np(G, 0.7), F) * W0[i]).sum())
    want = [fd(lambda F: work_np(F, i), F0[i].astype(np.float64), 1e-4) for i in range(M)]
    assert float(work.to_numpy()) == pytest.approx(sum(work_np(F0[i].astype(np.float64), i) for i in range(M)),
                                                   rel=1e-5)
    close(Fs.grad.to_numpy(), np.array(want), 1e-3)
    seed = rand(rng, (M, 3, 3))
    with sp.FwdMode(loss=work, param=Fs, seed=seed.reshape(-1)):
        stress_work(Fs, W, 0.7, work)
    assert float(work.dual.to_numpy()) == pytest.approx(float((np.array(want) * seed).sum()), rel=1e-3)


# ---- activity: what nobody reads costs nothing ---------------------------------------------------------------
@sp.kernel
def value_only(Fs: sp.Array, n: sp.i32, out: sp.Array):
    for i in range(Fs.shape[0]):
        v, g = sp.value_and_grad(chain_energy)(Fs[i], n)   # g unused: no derivative work at all
        out[i] = v


@sp.kernel
def one_entry(Fs: sp.Array, n: sp.i32, out: sp.Array):
    for i in range(Fs.shape[0]):
        g = sp.grad(chain_energy)(Fs[i], n)
        out[i] = g[1, 2]   # one direction of sixteen: forward mode, one tangent


def test_unused_gradients_and_directions_cost_nothing(rng):
    F0 = (0.6 * rand(rng, (M, 4, 4))).astype(np.float32)
    Fs, out = sp.from_numpy(F0, dtype=sp.mat4), sp.ndarray(sp.f32, (M,))
    value_only(Fs, 5, out)
    close(out.to_numpy(), [chain_energy_np(F.astype(np.float64), 5) for F in F0], 1e-5)
    assert "adstack " not in value_only.ir(Fs, 5, out) and "adj" not in value_only.ir(Fs, 5, out)
    one_entry(Fs, 5, out)
    close(out.to_numpy(), [chain_gradient_np(F.astype(np.float64), 5)[1, 2] for F in F0], 2e-5)
    ir = one_entry.ir(Fs, 5, out)
    assert "adstack " not in ir and set(re.findall(r'"tangent(\d+)_', ir)) == {"6"}   # entry (1, 2) of 4x4

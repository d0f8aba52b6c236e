"""Same-address atomics reduced across the subgroup first (spirv/lower_reduce.py): the group operations are in
the SPIR-V exactly where the address is uniform (ir/uniformity.py), and values and gradients match float64
numpy, exactly for integers and min/max, under divergence, inside loops and behind debug bounds checks, on
Vulkan and on the interpreter (which keeps the atomics' meaning)."""
import shutil

import numpy as np
import pytest

import spvad as sp
from tests import common_kernels
from spvad.frontend import ArraySpec, build_kernel
from spvad.pipeline import PRIMAL, run_passes
from spvad.spirv import tools
from spvad.spirv.lower import lower_task

GROUP_OPS = ("OpGroupNonUniformFAdd", "OpGroupNonUniformIAdd", "OpGroupNonUniformFMax", "OpGroupNonUniformSMin",
             "OpGroupNonUniformElect")
N_ELEMS = 10_007   # neither a whole number of subgroups nor of workgroups


def subgroup_device():
    if not sp.device_info()["features"].get("subgroup_reduce"):
        pytest.skip("the device has no subgroup arithmetic in compute shaders")


def rand(rng, n=N_ELEMS, lo=-2.0, hi=2.0, dtype=np.float32):
    return rng.uniform(lo, hi, n).astype(dtype)


# ---- kernels ---------------------------------------------------------------------------------------------
@sp.kernel
def sum_sq(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        loss[None] += x[i] ** 2


@sp.kernel
def sum_positive(x: sp.Array, loss: sp.Array, count: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0:   # divergent: only some invocations of a subgroup add
            loss[None] += x[i]
            count[None] += 1


@sp.kernel
def moments(x: sp.Array, c: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        for k in range(out.shape[0]):   # a uniform address per iteration
            out[k] += c[k] * x[i] ** k


@sp.kernel
def ragged(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        for k in range(i % 7):          # trip counts differ between the invocations of a subgroup
            if x[i] > 0.5 * k - 1.0:
                out[k] += x[i]
            else:
                break


@sp.kernel
def int_histogram(v: sp.Array, total: sp.Array, hist: sp.Array):
    for i in range(v.shape[0]):
        total[None] += v[i]
        hist[v[i] % hist.shape[0]] += 1   # a varying address: stays a plain atomic


@sp.kernel
def extremes(x: sp.Array, v: sp.Array, hi: sp.Array, lo: sp.Array, ilo: sp.Array):
    for i in range(x.shape[0]):
        sp.atomic_max(hi[None], x[i])
        sp.atomic_min(lo[None], x[i])
        sp.atomic_min(ilo[None], v[i])


@sp.kernel
def int_sum(v: sp.Array, total: sp.Array):
    for i in range(v.shape[0]):
        total[None] += v[i] * 3


@sp.kernel
def index_sum(x: sp.Array, total: sp.Array, best: sp.Array):
    for i in range(x.shape[0]):
        total[None] += i   # the element's index: each of a thread's four elements adds its own
        sp.atomic_max(best[None], x[i])


@sp.kernel
def vector_moments(x: sp.Array, acc: sp.Array):
    for i in range(x.shape[0]):
        acc[1] += sp.vec2(x[i], x[i] * x[i])   # one atomic per component of an ndarray of vec2


@sp.kernel
def take_slots(x: sp.Array, count: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        slot = sp.atomic_add(count[None], 1)   # the old value is used: no reduction
        out[slot] = x[i]


@sp.kernel
def at_table_index(x: sp.Array, where: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[where[1]] += x[i]   # a load at a uniform address of an array the kernel never writes


dense = sp.kernel(common_kernels.dense)


@sp.kernel
def features_of(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0
        for k in range(w.shape[0]):
            acc += w[k] * sp.sin(x[i] + float(k))
        y[i] = acc


# ---- where the group operations are ----------------------------------------------------------------------
def group_ops(text):
    return {op for op in GROUP_OPS if op in text}


def test_group_operations_exactly_where_the_address_is_uniform():
    sp.init()
    subgroup_device()
    rng = np.random.default_rng(1)
    x, loss = sp.from_numpy(rand(rng)), sp.ndarray(sp.f32, ())
    assert group_ops(sum_sq.disassemble(x, loss)) == {"OpGroupNonUniformFAdd", "OpGroupNonUniformElect"}
    v, total, hist = sp.from_numpy(rng.integers(0, 50, N_ELEMS).astype(np.int32)), sp.ndarray(sp.i32, ()), \
        sp.ndarray(sp.i32, (5,))
    text = int_histogram.disassemble(v, total, hist)
    assert group_ops(text) == {"OpGroupNonUniformIAdd", "OpGroupNonUniformElect"}
    assert text.count("OpAtomicIAdd") == 2   # the elected invocation's, and the histogram's own
    count, out = sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, (N_ELEMS,))
    assert group_ops(take_slots.disassemble(x, count, out)) == set()
    where = sp.from_numpy(np.array([3, 1], np.int32))
    assert "OpGroupNonUniformFAdd" in at_table_index.disassemble(x, where, out)
    x64, loss64 = sp.from_numpy(rand(rng, dtype=np.float64)), sp.ndarray(sp.f64, ())
    assert "OpGroupNonUniformFAdd %double" in sum_sq.disassemble(x64, loss64)


def test_a_reduction_of_elementwise_values_runs_four_elements_per_thread():
    """Straight-line code reading x[i] (spirv/lower_coarse.py): vec4 loads, the four values combined, then one
    group operation per thread."""
    sp.init()
    subgroup_device()
    x, loss = sp.from_numpy(rand(np.random.default_rng(1))), sp.ndarray(sp.f32, ())
    text = sum_sq.disassemble(x, loss)
    assert "OpLoad %v4float" in text and text.count("OpGroupNonUniformFAdd") == 1
    assert text.count("OpFAdd") == 3   # ((a + b) + (c + d)) of the thread's four squares
    total, best = sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, ())
    assert "OpLoad %v4float" in index_sum.disassemble(x, total, best)


def test_the_weight_gradient_of_a_dense_layer_is_reduced_and_the_input_gradient_is_not():
    sp.init()
    subgroup_device()
    x, W, y = (sp.ndarray(sp.f32, s, needs_grad=True) for s in ((64, 3), (4, 3), (64, 4)))
    text = dense.disassemble(x, W, y, grad=True)
    assert text.count("OpGroupNonUniformFAdd") == 1   # W.grad; x.grad[b, k] is per thread


def test_without_the_feature_atomics_stay_as_they_are_and_every_module_validates():
    ir = run_passes(build_kernel(sum_sq.fn, [ArraySpec(sp.f32, 1), ArraySpec(sp.f32, 0)])[0], PRIMAL)[0]
    (task,) = ir.tasks
    for on in (True, False):
        low = lower_task(ir, task, features={"float64": True, "atomic_float32_add": on, "subgroup_reduce": on})
        tools.validate(low.spirv, kernel_name=task.name)
        assert bool(group_ops(tools.disassemble(low.spirv))) == on


@pytest.mark.skipif(shutil.which("spirv-cross") is None, reason="needs spirv-cross")
def test_a_reduced_atomic_translates_to_metal_shading_language():
    from spvad.rhi.metal.translate import METAL_FEATURES, translate
    ir = run_passes(build_kernel(extremes.fn, [ArraySpec(sp.f32, 1), ArraySpec(sp.i32, 1), ArraySpec(sp.f32, 0),
                                               ArraySpec(sp.f32, 0), ArraySpec(sp.i32, 0)])[0], PRIMAL)[0]
    (task,) = ir.tasks
    source = translate(lower_task(ir, task, features={**METAL_FEATURES, "subgroup_reduce": True})).source
    assert "simd_max" in source and "simd_min" in source and "simd_is_first" in source


# ---- values ----------------------------------------------------------------------------------------------
@pytest.mark.backends
def test_a_sum_into_one_element():
    rng = np.random.default_rng(2)
    xs = rand(rng)
    x, loss = sp.from_numpy(xs), sp.from_numpy(np.array(0.25, np.float32))
    sum_sq(x, loss)
    np.testing.assert_allclose(loss.to_numpy(), 0.25 + np.sum(xs.astype(np.float64) ** 2), rtol=2e-5)


@pytest.mark.backends
@pytest.mark.parametrize("n", [1, 8, 1001, 1002, 1003, 4096])
def test_sums_and_extremes_of_four_elements_per_thread_for_every_remainder(n):
    rng = np.random.default_rng(n)
    xs, vs = rand(rng, n), rng.integers(-10**6, 10**6, n).astype(np.int32)
    x, loss, v, total = sp.from_numpy(xs), sp.ndarray(sp.f32, ()), sp.from_numpy(vs), sp.ndarray(sp.i32, ())
    sum_sq(x, loss)
    int_sum(v, total)
    np.testing.assert_allclose(loss.to_numpy(), np.sum(xs.astype(np.float64) ** 2), rtol=2e-5)
    assert int(total.to_numpy()) == int(3 * vs.astype(np.int64).sum())
    best = sp.from_numpy(np.array(-1e30, np.float32))
    index_sum(x, total, best)
    assert int(total.to_numpy()) == int(3 * vs.astype(np.int64).sum()) + n * (n - 1) // 2
    assert float(best.to_numpy()) == xs.max()
    hi, lo = sp.from_numpy(np.array(-1e30, np.float32)), sp.from_numpy(np.array(1e30, np.float32))
    ilo = sp.from_numpy(np.array(2**31 - 1, np.int32))
    extremes(x, v, hi, lo, ilo)
    assert (float(hi.to_numpy()), float(lo.to_numpy()), int(ilo.to_numpy())) == (xs.max(), xs.min(), vs.min())


@pytest.mark.backends
def test_a_sum_under_divergence_with_an_exact_integer_count():
    rng = np.random.default_rng(3)
    xs = rand(rng)
    x, loss, count = sp.from_numpy(xs), sp.ndarray(sp.f32, ()), sp.ndarray(sp.i32, ())
    for _ in range(2):
        sum_positive(x, loss, count)
    pos = xs[xs > 0].astype(np.float64)
    np.testing.assert_allclose(loss.to_numpy(), 2 * pos.sum(), rtol=2e-5)
    assert int(count.to_numpy()) == 2 * pos.size


@pytest.mark.backends
def test_sums_inside_loops():
    rng = np.random.default_rng(4)
    xs, cs = rand(rng, lo=-1.0, hi=1.0), rand(rng, 5)
    x, c, out = sp.from_numpy(xs), sp.from_numpy(cs), sp.ndarray(sp.f32, (5,))
    moments(x, c, out)
    x64 = xs.astype(np.float64)
    want = cs.astype(np.float64) * np.array([np.sum(x64 ** k) for k in range(5)])
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.backends
def test_sums_in_loops_whose_trip_counts_differ_between_invocations():
    rng = np.random.default_rng(5)
    xs = rand(rng)
    x, out = sp.from_numpy(xs), sp.ndarray(sp.f32, (7,))
    ragged(x, out)
    want = np.zeros(7)
    for i, xi in enumerate(xs.astype(np.float64)):
        for k in range(i % 7):
            if xi > 0.5 * k - 1.0:
                want[k] += xi
            else:
                break
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.backends
def test_float64_sums_and_maxima():
    rng = np.random.default_rng(15)
    xs = rng.uniform(-2.0, 2.0, N_ELEMS)
    x, loss, count = sp.from_numpy(xs), sp.ndarray(sp.f64, ()), sp.ndarray(sp.i32, ())
    sum_positive(x, loss, count)
    np.testing.assert_allclose(loss.to_numpy(), xs[xs > 0].sum(), rtol=1e-12)
    v = sp.from_numpy(rng.integers(-5, 5, N_ELEMS).astype(np.int32))
    hi, lo = sp.from_numpy(np.array(-1e300)), sp.from_numpy(np.array(1e300))
    extremes(x, v, hi, lo, sp.from_numpy(np.array(99, np.int32)))
    assert (float(hi.to_numpy()), float(lo.to_numpy())) == (xs.max(), xs.min())
    x32 = rand(rng)
    loss.fill(0.0)
    sum_sq(sp.from_numpy(x32), loss)   # float32 elements into a float64 sum
    np.testing.assert_allclose(loss.to_numpy(), np.sum(x32.astype(np.float64) ** 2), rtol=1e-6)


@pytest.mark.backends
def test_integer_sums_are_exact_beside_a_varying_address():
    rng = np.random.default_rng(6)
    vs = rng.integers(-1000, 100_000, N_ELEMS).astype(np.int32)
    v, total, hist = sp.from_numpy(vs), sp.ndarray(sp.i32, ()), sp.ndarray(sp.i32, (5,))
    int_histogram(v, total, hist)
    assert int(total.to_numpy()) == int(vs.astype(np.int64).sum())
    np.testing.assert_array_equal(hist.to_numpy(), np.bincount(vs % 5, minlength=5))


@pytest.mark.backends
def test_min_and_max_are_exact():
    rng = np.random.default_rng(7)
    xs, vs = rand(rng, lo=-50.0, hi=50.0), rng.integers(-10**6, 10**6, N_ELEMS).astype(np.int32)
    x, v = sp.from_numpy(xs), sp.from_numpy(vs)
    hi, lo = sp.from_numpy(np.array(-1e30, np.float32)), sp.from_numpy(np.array(1e30, np.float32))
    ilo = sp.from_numpy(np.array(2**31 - 1, np.int32))
    extremes(x, v, hi, lo, ilo)
    assert float(hi.to_numpy()) == xs.max() and float(lo.to_numpy()) == xs.min()
    assert int(ilo.to_numpy()) == vs.min()


@pytest.mark.backends
def test_sums_into_the_components_of_a_vector_element():
    xs = rand(np.random.default_rng(17))
    acc = sp.ndarray(sp.vec2, (3,))
    vector_moments(sp.from_numpy(xs), acc)
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(acc.to_numpy(), [[0, 0], [x64.sum(), (x64 ** 2).sum()], [0, 0]], rtol=1e-4,
                               atol=1e-2)


@pytest.mark.backends
def test_a_used_old_value_still_hands_out_every_slot_once():
    rng = np.random.default_rng(8)
    xs = rand(rng)
    x, count, out = sp.from_numpy(xs), sp.ndarray(sp.i32, ()), sp.ndarray(sp.f32, (N_ELEMS,))
    take_slots(x, count, out)
    assert int(count.to_numpy()) == N_ELEMS
    np.testing.assert_array_equal(np.sort(out.to_numpy()), np.sort(xs))


@pytest.mark.backends
def test_an_index_read_from_an_array():
    rng = np.random.default_rng(9)
    xs = rand(rng)
    x, where, out = sp.from_numpy(xs), sp.from_numpy(np.array([0, 2], np.int32)), sp.ndarray(sp.f32, (3,))
    at_table_index(x, where, out)
    np.testing.assert_allclose(out.to_numpy(), [0.0, 0.0, xs.astype(np.float64).sum()], rtol=1e-4, atol=1e-3)


def test_reduced_atomics_behind_debug_bounds_checks():
    sp.init(debug=True)
    try:
        rng = np.random.default_rng(10)
        xs = rand(rng)
        x, loss, count = sp.from_numpy(xs), sp.ndarray(sp.f32, ()), sp.ndarray(sp.i32, ())
        sum_positive(x, loss, count)
        out = sp.ndarray(sp.f32, (7,))
        ragged(x, out)
        sp.sync()
        pos = xs[xs > 0].astype(np.float64)
        np.testing.assert_allclose(loss.to_numpy(), pos.sum(), rtol=2e-5)
        assert int(count.to_numpy()) == pos.size
        assert out.to_numpy()[1:].sum() != 0.0
    finally:
        sp.init()


# ---- gradients -------------------------------------------------------------------------------------------
@pytest.mark.backends
def test_gradient_of_a_sum_of_squares():
    rng = np.random.default_rng(11)
    xs = rand(rng)
    x, loss = sp.from_numpy(xs, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        sum_sq(x, loss)
    np.testing.assert_allclose(loss.to_numpy(), np.sum(xs.astype(np.float64) ** 2), rtol=2e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), 2.0 * xs.astype(np.float64), rtol=1e-6)


@pytest.mark.backends
def test_dense_layer_weight_gradient_is_the_reverse_of_a_broadcast():
    rng = np.random.default_rng(12)
    B, J, K = 1003, 6, 5
    xs, ws, gys = rand(rng, B * K).reshape(B, K), rand(rng, J * K).reshape(J, K), rand(rng, B * J).reshape(B, J)
    x, W = sp.from_numpy(xs, needs_grad=True), sp.from_numpy(ws, needs_grad=True)
    y = sp.ndarray(sp.f32, (B, J), needs_grad=True)
    dense(x, W, y)
    np.testing.assert_allclose(y.to_numpy(), xs.astype(np.float64) @ ws.astype(np.float64).T, rtol=1e-4, atol=1e-5)
    y.grad.from_numpy(gys)
    dense.grad(x, W, y)
    gy64 = gys.astype(np.float64)
    np.testing.assert_allclose(W.grad.to_numpy(), gy64.T @ xs.astype(np.float64), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.grad.to_numpy(), gy64 @ ws.astype(np.float64), rtol=1e-4, atol=1e-5)


@pytest.mark.backends
def test_gradient_of_weights_read_by_every_thread_inside_a_loop():
    rng = np.random.default_rng(13)
    xs, ws, gys = rand(rng, 2001), rand(rng, 6), rand(rng, 2001)
    x, w = sp.from_numpy(xs, needs_grad=True), sp.from_numpy(ws, needs_grad=True)
    y = sp.ndarray(sp.f32, (2001,), needs_grad=True)
    features_of(x, w, y)
    y.grad.from_numpy(gys)
    features_of.grad(x, w, y)
    x64, gy64 = xs.astype(np.float64), gys.astype(np.float64)
    basis = np.sin(x64[:, None] + np.arange(6.0)[None, :])
    np.testing.assert_allclose(w.grad.to_numpy(), gy64 @ basis, rtol=1e-4, atol=1e-3)
    dx = (np.cos(x64[:, None] + np.arange(6.0)[None, :]) * ws.astype(np.float64)).sum(axis=1) * gy64
    np.testing.assert_allclose(x.grad.to_numpy(), dx, rtol=1e-4, atol=1e-5)


@pytest.mark.backends
def test_forward_mode_of_a_sum():
    rng = np.random.default_rng(16)
    xs, dxs = rand(rng), rand(rng)
    x, loss = sp.from_numpy(xs, needs_dual=True), sp.ndarray(sp.f32, (), needs_dual=True)
    with sp.FwdMode(loss=loss, param=x, seed=dxs):
        sum_sq(x, loss)
    want = np.sum(2.0 * xs.astype(np.float64) * dxs.astype(np.float64))
    np.testing.assert_allclose(loss.dual.to_numpy(), want, rtol=1e-4, atol=1e-3)
    if sp.device_info()["backend"] == "vulkan" and sp.device_info()["features"].get("subgroup_reduce"):
        assert "OpGroupNonUniformFAdd" in tools.disassemble(sum_sq._compiled(
            sum_sq._bind((x, loss))[0], "dual").tasks[0].lowered.spirv)


@pytest.mark.backends
def test_gradient_of_a_max_goes_to_the_winner():
    rng = np.random.default_rng(14)
    xs = rand(rng)
    vs = rng.integers(0, 9, N_ELEMS).astype(np.int32)
    x, v = sp.from_numpy(xs, needs_grad=True), sp.from_numpy(vs)
    hi = sp.ndarray(sp.f32, (), needs_grad=True)
    lo, ilo = sp.ndarray(sp.f32, (), needs_grad=True), sp.ndarray(sp.i32, ())
    with sp.Tape(loss=hi):
        hi.fill(-1e30)
        extremes(x, v, hi, lo, ilo)
    want = np.zeros(N_ELEMS)
    want[np.argmax(xs)] = 1.0
    np.testing.assert_array_equal(x.grad.to_numpy(), want)

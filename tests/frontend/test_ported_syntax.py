"""Taichi and Warp programs as their users wrote them (API.md, "Ported as Taichi and Warp programs are
written"): component writes on array elements (`a[i].x = v`, `a[i].y -= v`, `a[i][0] += v`), an n x 1 matrix
stored into a vector array, lists and tuples of ndarrays indexed by compile-time integers, numpy constants
read as `module.name`, numpy arrays passed for sp.Array parameters, and valid programs once refused (a while
loop's linear accumulation, `...` bodies, conditional sp.static iterables, element writes to a top-level
local vector). Values against float64 numpy, gradients against float64 central differences of the same
reference or closed forms, on Vulkan and on the interpreter."""
import numpy as np
import pytest

import ported_constants as consts
import spvad as sp
from adcheck import assert_close, finite_differences, rand, reference

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

N = 6


def check_vector_kernel(kernel, ref, args, dtypes, outs, wrt, rng, rtol=2e-4):
    """Forward values, kernel.grad and kernel.fwd against `ref` (float64 numpy, in place on storage-shaped
    arrays) for arguments whose ndarrays have the given dtypes (vector and matrix dtypes take the trailing
    axes)."""
    dev = [sp.from_numpy(a, dtype=dt, needs_grad=k in outs or k in wrt) if isinstance(a, np.ndarray) else a
           for k, (a, dt) in enumerate(zip(args, dtypes))]
    kernel(*dev)
    for k, want in zip(outs, reference(ref, args, outs)):
        assert_close(dev[k].to_numpy(), want, rtol, f"forward output {k} of {kernel.name}")
    seeds = [rand(rng, np.shape(args[k]), 0.5, 1.5, np.float64) for k in outs]
    for k, s in zip(outs, seeds):
        dev[k].grad.from_numpy(s)
    kernel.grad(*dev)
    for k in wrt:
        fd = finite_differences(ref, args, outs, seeds, k)
        assert np.any(fd != 0), f"vacuous: zero gradient w.r.t. argument {k}"
        assert_close(dev[k].grad.to_numpy(), fd, rtol, f"gradient w.r.t. argument {k} of {kernel.name}")
    # forward mode (k.fwd): random tangents on `wrt`, the outputs' .dual against central differences
    dev = [sp.from_numpy(a, dtype=dt, needs_dual=k in outs or k in wrt) if isinstance(a, np.ndarray) else a
           for k, (a, dt) in enumerate(zip(args, dtypes))]
    tangents = {k: rand(rng, np.shape(args[k])).astype(np.float64) for k in wrt}
    for k, t in tangents.items():
        dev[k].dual.from_numpy(t.astype(np.float32))
    kernel.fwd(*dev)
    eps = 1e-6
    plus = [a.astype(np.float64) + eps * tangents[k] if k in tangents else a for k, a in enumerate(args)]
    minus = [a.astype(np.float64) - eps * tangents[k] if k in tangents else a for k, a in enumerate(args)]
    for k, hi, lo in zip(outs, reference(ref, plus, outs), reference(ref, minus, outs)):
        assert_close(dev[k].dual.to_numpy(), (hi - lo) / (2 * eps), rtol, f"tangent of output {k} of {kernel.name}")


# ---- 1. component writes on array elements -------------------------------------------------------------------
@sp.kernel
def component_writes(a: sp.Array, m: sp.Array, w: sp.Array):
    for i in range(w.shape[0]):
        a[i].x = w[i] * w[i]
        a[i].y -= sp.sin(w[i])
        a[i][2] += w[i] * a[i].y
        m[i][0, 1] += w[i]
        m[i][1][0] = w[i] * 2.0
        m[i][1].y = w[i] * w[i]       # a component of a matrix element's row


def component_writes_ref(a, m, w):
    a[:, 0] = w * w
    a[:, 1] -= np.sin(w)
    a[:, 2] += w * a[:, 1]
    m[:, 0, 1] += w
    m[:, 1, 0] = w * 2.0
    m[:, 1, 1] = w * w


def test_component_writes_on_vector_and_matrix_elements(rng):
    args = [rand(rng, (N, 3)), rand(rng, (N, 2, 2)), rand(rng, N)]
    check_vector_kernel(component_writes, component_writes_ref, args, [sp.vec3, sp.mat2, None],
                        outs=[0, 1], wrt=[0, 1, 2], rng=rng)


@sp.kernel
def scatter_components(idx: sp.Array, w: sp.Array, acc: sp.Array):
    for i in range(w.shape[0]):           # several threads add into one element: atomic per component
        acc[idx[i]].y += w[i] * w[i]
        acc[idx[i]].x -= w[i]
        acc[idx[i]][2] += 3.0 * w[i]


def scatter_components_ref(idx, w, acc):
    np.add.at(acc[:, 1], idx, w * w)
    np.add.at(acc[:, 0], idx, -w)
    np.add.at(acc[:, 2], idx, 3.0 * w)


def test_augmented_component_writes_in_a_parallel_loop_are_atomic(rng):
    n = 64
    args = [rng.integers(0, 3, n).astype(np.int32), rand(rng, n), rand(rng, (3, 3))]
    check_vector_kernel(scatter_components, scatter_components_ref, args, [None, None, sp.vec3],
                        outs=[2], wrt=[1], rng=rng)


def unknown_component(a: sp.Array):
    for i in range(a.shape[0]):
        a[i].q = 1.0


def test_an_unknown_component_name_is_refused():
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(unknown_component)(sp.ndarray(sp.vec3, (2,)))
    assert "an element has no component 'q' to assign" in info.value.message and "a[i].q = 1.0" in info.value.source


# ---- 2. an n x 1 matrix (a column) stored into a vector array ------------------------------------------------
@sp.kernel
def column_store(A: sp.Array, w: sp.Array, out: sp.Array):
    for i in range(w.shape[0]):
        c = sp.Matrix([[w[i]], [w[i] * w[i]]])          # 2 x 1
        out[i] = A[i] @ c
        out[i] += sp.Matrix([[1.0], [w[i]]]) * 0.5     # += of a column too


def column_store_ref(A, w, out):
    c = np.stack([w, w * w], axis=1)
    out[...] = np.einsum("nij,nj->ni", A, c) + 0.5 * np.stack([np.ones_like(w), w], axis=1)


def test_a_column_matrix_stores_into_a_vector_array(rng):
    args = [rand(rng, (N, 2, 2)), rand(rng, N), np.zeros((N, 2), np.float32)]
    check_vector_kernel(column_store, column_store_ref, args, [sp.mat2, None, sp.vec2], outs=[2], wrt=[0, 1],
                        rng=rng)


def row_into_vector(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] = sp.Matrix([[1.0, 2.0]])


def test_a_row_matrix_is_not_a_column():
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(row_into_vector)(sp.ndarray(sp.vec2, (2,)))
    assert "cannot store a Matrix(1, 2, f32) into an array of 2-vectors" in info.value.message


# ---- 3. lists and tuples of ndarrays indexed by compile-time integers ----------------------------------------
LEVELS = []   # a module-level list of ndarrays (Taichi's multigrid r[level]), filled by each test


@sp.kernel
def combine_levels(out: sp.Array):
    for i, j in out:
        acc = 0.0
        for level in sp.static(range(3)):
            acc += LEVELS[level][i, j] * (level + 1.0)
        out[i, j] = acc * acc
        LEVELS[3][i, j] = sp.sin(acc)          # a write through a list item
        LEVELS[-1][i, j] += acc                # negative indices count from the end, as in Python


@sp.kernel
def weighted_loss(a: sp.Array, w: sp.Array, loss: sp.Array):
    for i, j in a:
        loss[None] += a[i, j] * w[i, j]


def combine_levels_gradient(levels, w_out, w3, w4):
    acc = sum(levels[k] * (k + 1.0) for k in range(3))
    d_acc = 2 * acc * w_out + np.cos(acc) * w3 + w4
    return [(k + 1.0) * d_acc for k in range(3)]


def test_a_module_level_list_of_ndarrays_under_a_tape(rng):
    shape = (3, 4)
    data = [rand(rng, shape) for _ in range(3)]
    w_out, w3, w4, before4 = (rand(rng, shape) for _ in range(4))
    LEVELS[:] = [sp.from_numpy(d, needs_grad=True) for d in data] + [sp.ndarray(sp.f32, shape, needs_grad=True),
                                                                     sp.from_numpy(before4, needs_grad=True)]
    out, loss = sp.ndarray(sp.f32, shape, needs_grad=True), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        combine_levels(out)
        weighted_loss(out, sp.from_numpy(w_out), loss)
        weighted_loss(LEVELS[3], sp.from_numpy(w3), loss)
        weighted_loss(LEVELS[4], sp.from_numpy(w4), loss)
    f64 = [d.astype(np.float64) for d in data]
    acc = sum(f64[k] * (k + 1.0) for k in range(3))
    assert_close(out.to_numpy(), acc * acc, 1e-5, "out")
    assert_close(LEVELS[3].to_numpy(), np.sin(acc), 1e-5, "the write through LEVELS[3]")
    assert_close(LEVELS[4].to_numpy(), before4 + acc, 1e-5, "the += through LEVELS[-1]")
    want_loss = np.sum(acc * acc * w_out) + np.sum(np.sin(acc) * w3) + np.sum((before4 + acc) * w4)
    assert_close(loss.to_numpy(), want_loss, 1e-5, "loss")
    for k, want in enumerate(combine_levels_gradient(f64, w_out, w3, w4)):
        assert_close(LEVELS[k].grad.to_numpy(), want, 1e-4, f"gradient w.r.t. LEVELS[{k}]")
    # the list re-bound to other ndarrays: the next launch binds what it holds then, as a global name
    LEVELS[:] = [sp.from_numpy(2 * d) for d in data] + [sp.ndarray(sp.f32, shape), sp.ndarray(sp.f32, shape)]
    combine_levels(out)
    assert_close(out.to_numpy(), 4 * acc * acc, 1e-5, "out after the list was refilled")


@sp.kernel
def sum_of_tuple(levels: sp.template(), out: sp.Array):
    for i in range(out.shape[0]):
        for level in sp.static(range(len(levels))):
            out[i] += levels[level][i] * levels[level][i]


def test_a_tuple_of_ndarrays_as_a_template_argument(rng):
    data = [rand(rng, N) for _ in range(2)]
    levels = tuple(sp.from_numpy(d, needs_grad=True) for d in data)
    out = sp.from_numpy(np.zeros(N, np.float32), needs_grad=True)
    sum_of_tuple(levels, out)
    assert_close(out.to_numpy(), sum(d.astype(np.float64) ** 2 for d in data), 1e-5, "out")
    seed = rand(rng, N)
    out.grad.from_numpy(seed)
    sum_of_tuple.grad(levels, out)
    for d, a in zip(data, levels):
        assert_close(a.grad.to_numpy(), 2 * d.astype(np.float64) * seed, 1e-5, "gradient through the tuple")


@sp.kernel
def module_attribute_list(out: sp.Array):
    for i in range(out.shape[0]):
        for a in sp.static(consts.ARRAYS):          # a module's list of ndarrays, iterated in sp.static
            out[i] += a[i] * consts.ARRAYS[1][i]


def test_a_list_of_ndarrays_read_as_a_module_attribute(rng):
    data = [rand(rng, N) for _ in range(2)]
    consts.ARRAYS = [sp.from_numpy(d, needs_grad=True) for d in data]
    out = sp.from_numpy(np.zeros(N, np.float32), needs_grad=True)
    try:
        module_attribute_list(out)
        d0, d1 = (d.astype(np.float64) for d in data)
        assert_close(out.to_numpy(), (d0 + d1) * d1, 1e-5, "out")
        seed = rand(rng, N)
        out.grad.from_numpy(seed)
        module_attribute_list.grad(out)
        assert_close(consts.ARRAYS[0].grad.to_numpy(), d1 * seed, 1e-5, "gradient w.r.t. ARRAYS[0]")
        assert_close(consts.ARRAYS[1].grad.to_numpy(), (d0 + 2 * d1) * seed, 1e-5, "gradient w.r.t. ARRAYS[1]")
    finally:
        del consts.ARRAYS


def runtime_list_index(out: sp.Array, k: int):
    for i in range(out.shape[0]):
        out[i] = LEVELS[k][i]


def list_index_out_of_range(out: sp.Array):
    for i in range(out.shape[0]):
        out[i] = LEVELS[5][i]


@pytest.mark.parametrize("fn,extra,fragment", [
    (runtime_list_index, (1,), "a list of ndarrays is indexed by compile-time integers"),
    (list_index_out_of_range, (), "index 5 out of range for a list of 2 items"),
])
def test_list_indices_must_be_compile_time_integers_in_range(fn, extra, fragment):
    LEVELS[:] = [sp.ndarray(sp.f32, (2,)), sp.ndarray(sp.f32, (2,))]
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(fn)(sp.ndarray(sp.f32, (2,)), *extra)
    assert fragment in info.value.message and "LEVELS[" in info.value.source


# ---- 4. numpy constants read as module.name ----------------------------------------------------------------
@sp.kernel
def module_constants(x: sp.Array, v: sp.Array):
    for i in range(x.shape[0]):
        v[i] = consts.M @ v[i] + consts.G * (x[i] * x[i]) + consts.G[1] * consts.WEIGHTS[2]


def module_constants_ref(x, v):
    G, M = consts.G.astype(np.float64), consts.M.astype(np.float64)
    v[...] = v @ M.T + G[None, :] * (x * x)[:, None] + G[1] * consts.WEIGHTS[2]


def test_numpy_constants_read_as_module_attributes(rng):
    args = [rand(rng, N), rand(rng, (N, 3))]
    check_vector_kernel(module_constants, module_constants_ref, args, [None, sp.vec3], outs=[1], wrt=[0, 1],
                        rng=rng)


# ---- 5. a numpy array for an sp.Array parameter: copied in, and back after the launch ------------------------
@sp.kernel
def scale_in_place(a: sp.Array, b: sp.Array, s: float):
    for i in range(a.shape[0]):
        a[i] = a[i] * s + b[i]


def test_numpy_arrays_passed_for_array_parameters_are_copied_back(rng):
    a0, b0 = rand(rng, N), rand(rng, N).astype(np.float64)
    a = a0.copy()
    scale_in_place(a, b0, 3.0)                           # a: float32 in place; b: float64 read
    assert_close(a, a0.astype(np.float64) * 3.0 + b0, 1e-6, "a after the launch")
    dev = sp.from_numpy(a0)                              # mixed with an ndarray, by keyword
    scale_in_place(dev, b=np.asarray(b0, np.float32), s=2.0)
    assert_close(dev.to_numpy(), a0.astype(np.float64) * 2.0 + b0, 1e-6, "ndarray after the launch")
    frozen = a0.copy()
    frozen.flags.writeable = False
    scale_in_place(sp.from_numpy(a0), frozen, 1.0)       # a read-only array only read: fine
    with pytest.raises(sp.ArgumentError, match="wrote into argument 'a', a read-only numpy array"):
        scale_in_place(frozen, b0, 2.0)


# ---- 7. valid programs once refused --------------------------------------------------------------------------
@sp.kernel
def while_accumulation(x: sp.Array, s: sp.Array):
    i = 0
    while i < x.shape[0]:                 # Warp's test_while_loop_grad
        s[0] = s[0] + x[i] * 2.0
        i += 1


@sp.kernel
def square_loss(s: sp.Array, loss: sp.Array):
    loss[None] = s[0] * s[0]


def test_a_linear_accumulation_in_a_while_loop_is_differentiable(rng):
    x0 = rand(rng, N)
    x, s = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(np.array([0.5], np.float32), needs_grad=True)
    while_accumulation(x, s)
    total = 0.5 + 2.0 * x0.astype(np.float64).sum()
    assert_close(s.to_numpy(), [total], 1e-6, "s")
    s.grad.fill(0.75)
    while_accumulation.grad(x, s)
    assert_close(x.grad.to_numpy(), np.full(N, 1.5), 1e-6, "k.grad w.r.t. x")   # d(s)/dx_i = 2
    assert_close(s.grad.to_numpy(), [0.75], 1e-6, "k.grad w.r.t. s's value before")
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss):
        s.fill(0.5)
        while_accumulation(x, s)
        square_loss(s, loss)
    assert_close(x.grad.to_numpy(), np.full(N, 4.0 * total), 1e-5, "Tape gradient w.r.t. x")


lambda_on_a_continuation_line = sp.func(
    lambda v: v * 2.0)


def calls_a_lambda_func(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = lambda_on_a_continuation_line(x[i])


def defines_a_lambda(x: sp.Array):
    for i in range(x.shape[0]):
        f = (1.0,
             lambda v: v)
        x[i] = f[0]


@pytest.mark.parametrize("fn,text", [(calls_a_lambda_func, "lambda v: v * 2.0)"), (defines_a_lambda, "lambda v: v)")])
def test_a_lambda_on_a_continuation_line_is_refused_by_name(fn, text):
    with pytest.raises(sp.CompileError) as info:
        sp.kernel(fn)(sp.ndarray(sp.f32, (2,)))
    assert "lambda" in info.value.message and info.value.filename == __file__
    assert info.value.source.strip() == text
    with open(__file__) as f:
        assert f.readlines()[info.value.lineno - 1].strip() == text


FLAG = True


@sp.kernel
def quiet_bodies(x: sp.Array, y: sp.Array):
    v = sp.Vector([0.0, 0.0])             # a local vector at the top level, written element-wise there
    v[0] = x[0] * 3.0
    v.y = x[0] * x[0]
    y[0] = v[0] + v[1]
    for i in range(x.shape[0]):
        for j in range(2):
            ...
        for j in range(2):
            pass
        if x[i] > 10.0:
            ...
        for k in sp.static(range(3) if FLAG else range(2)):   # a conditional iterable in sp.static
            y[i + 1] += x[i] * (k + 1.0)


def quiet_bodies_ref(x, y):
    y[0] = x[0] * 3.0 + x[0] * x[0]
    y[1:] += x * 6.0


def test_pass_ellipsis_static_conditionals_and_top_level_vector_writes(rng):
    args = [rand(rng, N), rand(rng, N + 1)]
    check_vector_kernel(quiet_bodies, quiet_bodies_ref, args, [None, None], outs=[1], wrt=[0], rng=rng)

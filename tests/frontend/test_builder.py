"""The frontend's IR without a device: it verifies, it simplifies to IR that still verifies, and the
interpreter running it agrees with numpy. Also pins frontend semantics (tasks, promotion, scoping)."""
import numpy as np
import pytest

import spvad as sp
from spvad.errors import CompileError
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import OutOfBoundsError, run_kernel
from spvad.ir.simplify import simplify
from spvad.ir.verify import verify

F32_1D, F32_2D, I32_1D = ArraySpec(sp.f32, 1), ArraySpec(sp.f32, 2), ArraySpec(sp.i32, 1)


def build(fn, *specs):
    kernel, _, _ = build_kernel(fn, list(specs))
    return verify(kernel)


def run(kernel, arrays, scalars=()):
    """Interpret `kernel` on copies of `arrays`; returns the arrays after the run."""
    buffers = {(k, "primal"): np.array(a, copy=True) for k, a in enumerate(arrays)}
    run_kernel(kernel, buffers, list(scalars))
    return [buffers[(k, "primal")] for k in range(len(arrays))]


def build_and_run(fn, specs, arrays, scalars=()):
    """Run the frontend IR and its simplified form; both must verify and agree exactly."""
    raw = run(build(fn, *specs), arrays, scalars)
    simple = build(fn, *specs)
    simplify(simple)
    verify(simple)
    opt = run(simple, arrays, scalars)
    for a, b in zip(raw, opt):
        np.testing.assert_array_equal(a, b)
    return raw


def nonzero(rng, shape, lo=0.1, hi=1.0):
    return (np.where(rng.random(shape) < 0.5, -1.0, 1.0) * rng.uniform(lo, hi, shape)).astype(np.float32)


# ---- kernels (plain functions: the frontend does not need the decorator) -----------------------------------
@sp.func
def smooth_step(v):
    if v < 0.0:
        return 0
    else:
        return v * v * (3 - 2 * v)     # the int return above promotes to f32


def saxpy_clamped(x: sp.Array, y: sp.Array, out: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        v = a * x[i] + y[i]
        out[i] = sp.clamp(v, -0.5, 0.5) + smooth_step(x[i])


def test_saxpy_clamped(rng):
    x, y = nonzero(rng, 50), nonzero(rng, 50)
    _, _, out = build_and_run(saxpy_clamped, (F32_1D, F32_1D, F32_1D, sp.f32),
                              [x, y, np.zeros(50, np.float32)], [1.5])
    xs = x.astype(np.float64)
    expect = np.clip(1.5 * xs + y, -0.5, 0.5) + np.where(xs < 0, 0, xs * xs * (3 - 2 * xs))
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


def matvec_rows(m: sp.Array, v: sp.Array, out: sp.Array):
    n = m.shape[1]
    for i in range(m.shape[0]):
        acc = 0.0
        for j in range(n):
            if m[i, j] > 0 and v[j] > 0:
                acc += m[i, j] * v[j]
            elif m[i, j] < -0.5 or v[j] < -0.5:
                continue
            else:
                acc -= 1.0
        out[i] = acc


def test_matvec_rows(rng):
    m, v = nonzero(rng, (6, 9)), nonzero(rng, 9)
    _, _, out = build_and_run(matvec_rows, (F32_2D, F32_1D, F32_1D), [m, v, np.zeros(6, np.float32)])
    expect = np.zeros(6)
    for i in range(6):
        for j in range(9):
            if m[i, j] > 0 and v[j] > 0:
                expect[i] += float(m[i, j]) * float(v[j])
            elif not (m[i, j] < -0.5 or v[j] < -0.5):
                expect[i] -= 1.0
    np.testing.assert_allclose(out, expect, rtol=1e-5)


def prefix_then_scale(x: sp.Array, s: sp.Array, k: sp.i32):
    s[None] = 0
    for i in range(x.shape[0]):
        s[None] += x[i] // k + x[i] % k
    for i in range(x.shape[0]):
        x[i] = x[i] * s[None]


def test_serial_parallel_tasks_in_order(rng):
    x = rng.integers(-50, 50, 20).astype(np.int32)
    kernel = build(prefix_then_scale, I32_1D, ArraySpec(sp.i32, 0), sp.i32)
    assert [t.kind for t in kernel.tasks] == ["serial", "parallel", "parallel"]
    out_x, out_s = build_and_run(prefix_then_scale, (I32_1D, ArraySpec(sp.i32, 0), sp.i32),
                                 [x, np.array(99, np.int32)], [-3])
    total = sum(int(v) // -3 + int(v) % -3 for v in x)
    assert out_s == total
    np.testing.assert_array_equal(out_x, x.astype(np.int64) * total)


def guarded_read(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(out.shape[0]):
        out[i] = 1.0 if i < n and x[i] > 0 else (x[i] if i < n else 2.0)


def test_short_circuit_and_conditional_expression_do_not_read_out_of_bounds(rng):
    x = nonzero(rng, 5)
    _, out = build_and_run(guarded_read, (F32_1D, F32_1D, sp.i32), [x, np.zeros(8, np.float32)], [5])
    np.testing.assert_array_equal(out, np.concatenate([np.where(x > 0, 1.0, x), [2.0] * 3]))
    # with both sides evaluated eagerly, the interpreter would meet x[5]:
    with pytest.raises(OutOfBoundsError):
        run(build(eager_read, F32_1D, F32_1D, sp.i32), [x, np.zeros(8, np.float32)], [5])


def eager_read(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(out.shape[0]):
        out[i] = sp.select(i < n, x[i], 2.0)


# ---- frontend semantics pinned in the IR --------------------------------------------------------------------
def stored_types(fn, *specs):
    kernel = build(fn, *specs)
    out = []
    for t in kernel.tasks:
        for s in N.walk(t.body):
            if isinstance(s, N.GlobalStore):
                v = s.value
                out.append(v.args[0].dtype if isinstance(v, N.Compute) and v.op is N.Op.CAST else v.dtype)
    return out


def promotions(xi: sp.Array, xf: sp.Array, xd: sp.Array, out: sp.Array):
    for i in range(xi.shape[0]):
        out[i] = xi[i] + xf[i]          # i32 + f32 -> f32
        out[i] = xi[i] / xi[i]          # i32 / i32 -> f32
        out[i] = xf[i] * xd[i]          # f64 beats f32
        out[i] = xf[i] + 1              # weak int literal adapts
        out[i] = xi[i] * 2.5            # float literal makes ints f32
        out[i] = xd[i] * 2.5            # ... and leaves f64 alone
        out[i] = xi[i] // 2             # stays i32
        out[i] = (xi[i] > 0) + (xi[i] > 1)   # bool + bool -> i32, as in Python


def test_promotion_rules_in_the_ir():
    got = stored_types(promotions, I32_1D, F32_1D, ArraySpec(sp.f64, 1), ArraySpec(sp.f64, 1))
    assert got == [sp.f32, sp.f32, sp.f64, sp.f32, sp.f32, sp.f64, sp.i32, sp.i32]


SIZE = 3
FLAG = False


def statics(x: sp.Array):
    for i in range(x.shape[0]):
        for j in sp.static(range(SIZE)):
            x[i] += j
        if sp.static(FLAG):
            x[i] = x[i, i, i]     # never compiled
        x[i] = x[i] * SIZE


def test_static_unrolls_and_folds_at_compile_time():
    kernel = build(statics, F32_1D)
    body = list(N.walk(kernel.tasks[0].body))
    assert not any(isinstance(s, (N.RangeFor, N.If)) for s in body)
    assert sum(isinstance(s, N.AtomicRMW) for s in body) == SIZE
    assert kernel.scalars == []
    (out,) = run(kernel, [np.array([1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(out, (np.array([1.0, 2.0]) + 3) * 3)


# ---- regressions: frontend bugs fixed in this change --------------------------------------------------------
def same_local_in_two_loops(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i] + 1
        y[i] = v
    for i in range(x.shape[0]):
        v = y[i] * 2            # a new local: the first loop's v lived in another dispatch
        x[i] = v


def test_same_local_name_in_two_top_level_loops():
    x = np.array([1, 2, 3], np.float32)
    out_x, out_y = build_and_run(same_local_in_two_loops, (F32_1D, F32_1D), [x, np.zeros(3, np.float32)])
    np.testing.assert_array_equal(out_y, x + 1)
    np.testing.assert_array_equal(out_x, (x + 1) * 2)


def rebinding_after_lazy(x: sp.Array, y: sp.Array):
    a = x.shape[0]
    b = a - 1          # pure: re-evaluated where used, but with the bindings of this line
    a = 100
    for i in range(b):
        y[i] = b * 10 + a


def test_pure_top_level_assignment_keeps_its_bindings():
    _, y = build_and_run(rebinding_after_lazy, (F32_1D, F32_1D), [np.zeros(4, np.float32), np.zeros(4, np.float32)])
    np.testing.assert_array_equal(y, [130, 130, 130, 0])


@sp.func
def mixed_returns(v):
    if v > 1.0:
        return 1
    elif v > 0.0:
        return True
    else:
        return v * 0.5


@sp.func
def int_then_f64(v, w):
    if v > 0:
        return 2
    else:
        return w


def uses_mixed_returns(x: sp.Array, d: sp.Array, y: sp.Array, z: sp.Array):
    for i in range(x.shape[0]):
        y[i] = mixed_returns(x[i])
        z[i] = int_then_f64(x[i], d[i])


def test_func_returns_of_different_types_promote():
    x = np.array([2.0, 0.5, -3.0], np.float32)
    d = np.array([0.1, 0.2, 1e-9], np.float64)
    kernel = build(uses_mixed_returns, F32_1D, ArraySpec(sp.f64, 1), F32_1D, ArraySpec(sp.f64, 1))
    _, _, y, z = run(kernel, [x, d, np.zeros(3, np.float32), np.zeros(3, np.float64)])
    np.testing.assert_array_equal(y, [1.0, 1.0, -1.5])         # not truncated to the first return's i32
    np.testing.assert_array_equal(z, [2.0, 2.0, 1e-9])          # f64 kept in full
    slots = [s for s in N.walk(kernel.tasks[0].body) if isinstance(s, N.Alloca) and s.name == "ret"]
    assert sorted(s.dtype.name for s in slots) == ["f32", "f64"]


def index_after_loop(x: sp.Array):
    for i in range(x.shape[0]):
        k = 5.0
        for k in range(3):
            x[i] += k
        x[i] = k


def index_rebound_after_loop(x: sp.Array):
    for i in range(x.shape[0]):
        for k in range(3):
            x[i] += k
        k = 7.5               # assigning starts a new local
        x[i] = x[i] + k


def test_loop_index_is_scoped_to_its_loop():
    with pytest.raises(CompileError, match="loop index 'k'") as info:
        build(index_after_loop, F32_1D)
    assert info.value.source.strip() == "x[i] = k"
    (out,) = run(build(index_rebound_after_loop, F32_1D), [np.ones(2, np.float32)])
    np.testing.assert_array_equal(out, [1 + 3 + 7.5] * 2)


def parallel_index_after_loop(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = 1.0
    x[i] = 2.0


def test_parallel_loop_index_is_scoped_to_its_loop():
    with pytest.raises(CompileError, match="loop index 'i'"):
        build(parallel_index_after_loop, F32_1D)


def unpacking(x: sp.Array, y: sp.Array):
    n, m = x.shape                  # top level: pure, so re-evaluated in each task
    a, b = n * 2, m + 1
    for i, j in sp.ndrange(n, m):
        r, c = x.shape              # inside a loop
        x[i, j] = a * 1000 + b * 100 + r * 10 + c + len(x.shape)
    for k in sp.static(range(2)):   # a serial statement reading the unpacked names
        y[None] += n * m + k


def test_tuple_unpacking_of_shapes_and_pure_tuples():
    kernel = build(unpacking, F32_2D, ArraySpec(sp.f32, 0))
    assert [t.kind for t in kernel.tasks] == ["parallel", "serial"]   # no task for the assignments
    x, y = run(kernel, [np.zeros((3, 5), np.float32), np.array(0.5, np.float32)])
    np.testing.assert_array_equal(x, np.full((3, 5), 6 * 1000 + 6 * 100 + 35 + 2))
    assert y == 0.5 + 15 + 16


def big_literal(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] + 3000000000


def test_integer_literal_must_fit_its_type():
    with pytest.raises(CompileError, match="3000000000 does not fit in i32") as info:
        build(big_literal, I32_1D)                      # numpy 2 refuses it too; it used to wrap silently
    assert info.value.source.strip() == "x[i] = x[i] + 3000000000"
    (u,) = run(build(big_literal, ArraySpec(sp.u32, 1)), [np.array([1, 2], np.uint32)])
    np.testing.assert_array_equal(u, [3000000001, 3000000002])
    (f,) = run(build(big_literal, F32_1D), [np.array([1, 2], np.float32)])
    np.testing.assert_array_equal(f, np.float32(3e9))

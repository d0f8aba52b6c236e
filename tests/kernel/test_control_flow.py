"""Kernel control flow, functions, indexing, atomics, globals, tasks and launches, end to end on Vulkan.

Each kernel is checked against a numpy/Python reference written independently here AND against the IR
interpreter running the same compiled IR (which raises on any out-of-bounds access it meets).
"""
import sys
import time

import numpy as np
import pytest

import spvad as sp
from spvad.ir import nodes as N
from oracle import assert_same, interpret, launch_and_interpret


def nonzero(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def ints(rng, shape, lo=1, hi=50):
    return (rng.integers(lo, hi, shape) * np.where(rng.random(shape) < 0.5, -1, 1)).astype(np.int32)


# ---- branches ------------------------------------------------------------------------------------------
@sp.kernel
def classify(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        if v < -0.5:
            out[i] = 1
        elif v < 0.0:
            out[i] = 2
        elif v < 0.5:
            out[i] = 3
        else:
            if v > 0.9:
                out[i] = 5
            else:
                out[i] = 4


def test_if_elif_else(rng):
    x = nonzero(rng, 200)
    out = sp.ndarray(sp.i32, 200)
    (_, dev), (_, ref) = launch_and_interpret(classify, sp.from_numpy(x), out)
    expect = np.select([x < -0.5, x < 0, x < 0.5, x > 0.9], [1, 2, 3, 5], 4)
    assert_same(dev, expect)
    assert_same(ref, expect)
    assert len(set(expect.tolist())) == 5


@sp.kernel
def guarded(x: sp.Array, out: sp.Array, n: sp.i32):
    for i in range(out.shape[0]):     # out is longer than x: x[i] must only be read when i < n
        a = 0
        if i < n and x[i] > 0:
            a = 1
        if i >= n or x[i] < 0:
            a += 10
        c = x[i] if i < n else -1.0   # a conditional expression must not evaluate the other side
        out[i] = a * 100 + c


def test_short_circuit_never_reads_out_of_bounds(rng):
    x = nonzero(rng, 10)
    out = sp.ndarray(sp.f32, 14)
    (_, dev), (_, ref) = launch_and_interpret(guarded, sp.from_numpy(x), out, 10)
    xe = np.concatenate([x, np.full(4, np.nan, np.float32)])
    a = np.where(xe > 0, 1, 0) + np.where(~(xe > 0), 10, 0)
    expect = a * 100 + np.where(np.arange(14) < 10, xe, -1.0)
    assert_same(dev, expect, rtol=1e-6)
    assert_same(ref, expect, rtol=1e-6)   # the interpreter raises on any out-of-bounds read


@sp.kernel
def cond_expr(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = (v * 2 if v > 0 else -v) + (1.0 if v > 0.5 or v < -0.5 else 0.0) + (
            3 if not v > 0 else 0)


def test_conditional_expressions_and_not(rng):
    x = nonzero(rng, 100)
    out = sp.ndarray(sp.f32, 100)
    (_, dev), (_, ref) = launch_and_interpret(cond_expr, sp.from_numpy(x), out)
    expect = np.where(x > 0, 2 * x, -x) + (np.abs(x) > 0.5) + np.where(x > 0, 0, 3)
    assert_same(dev, expect, rtol=1e-6)
    assert_same(ref, expect, rtol=1e-6)


# ---- loops ---------------------------------------------------------------------------------------------
@sp.kernel
def range_sums(lo: sp.Array, hi: sp.Array, out: sp.Array, base: sp.i32):
    for i in range(lo.shape[0]):
        a, b = lo[i], hi[i]
        s0 = 0
        for k in range(a, b):
            s0 += k
        s1 = 0
        for k in range(a, b, 3):
            s1 += k * k
        s2 = 0
        for k in range(b, a, -1):
            s2 += k
        s3 = 0
        for k in range(b + base, a, -2):
            s3 = s3 * 3 + k
        s4 = 0
        for k in range(b):
            s4 += 1
        out[i, 0] = s0
        out[i, 1] = s1
        out[i, 2] = s2
        out[i, 3] = s3
        out[i, 4] = s4


def test_range_dynamic_bounds_and_steps(rng):
    n = 40
    lo = rng.integers(-10, 10, n).astype(np.int32)
    hi = (lo + rng.integers(-3, 12, n)).astype(np.int32)   # some ranges empty
    out = sp.ndarray(sp.i32, (n, 5))
    (_, _, dev, ), (_, _, ref) = launch_and_interpret(range_sums, sp.from_numpy(lo), sp.from_numpy(hi), out, 2)
    expect = np.zeros((n, 5), np.int64)
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        s3 = 0
        for k in range(b + 2, a, -2):
            s3 = s3 * 3 + k
        expect[i] = [sum(range(a, b)), sum(k * k for k in range(a, b, 3)), sum(range(b, a, -1)),
                     s3, len(range(b))]
    assert_same(dev, expect.astype(np.int32))
    assert_same(ref, expect.astype(np.int32))


@sp.kernel
def collatz(x: sp.Array, steps: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        n = 0
        while v != 1:
            if v % 2 == 0:
                v = v // 2
            else:
                v = 3 * v + 1
            n += 1
        steps[i] = n


def test_while(rng):
    x = rng.integers(1, 300, 64).astype(np.int32)
    steps = sp.ndarray(sp.i32, 64)
    (_, dev), (_, ref) = launch_and_interpret(collatz, sp.from_numpy(x), steps)

    def count(v):
        n = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            n += 1
        return n
    expect = np.array([count(v) for v in x.tolist()], np.int32)
    assert_same(dev, expect)
    assert_same(ref, expect)


@sp.kernel
def break_continue(x: sp.Array, out: sp.Array, m: sp.i32):
    for i in range(x.shape[0]):
        total = 0.0
        for j in range(m):
            if j % 3 == 1:
                continue
            inner = 0.0
            for k in range(m):
                if k > j:
                    break
                if (k + i) % 2 == 0:
                    continue
                inner += x[i] * k
            total += inner
            if total > 40.0:
                break
        t = 0
        while True:
            t += 1
            if t * t > i:
                break
        out[i] = total + t * 1000


def test_break_continue_nested(rng):
    x = nonzero(rng, 50, 0.5, 3.0)
    out = sp.ndarray(sp.f32, 50)
    (_, dev), (_, ref) = launch_and_interpret(break_continue, sp.from_numpy(x), out, 9)
    expect = []
    for i, xv in enumerate(x.astype(np.float32)):
        total = np.float32(0)
        for j in range(9):
            if j % 3 == 1:
                continue
            inner = np.float32(0)
            for k in range(9):
                if k > j:
                    break
                if (k + i) % 2 == 0:
                    continue
                inner += xv * np.float32(k)
            total += inner
            if total > 40.0:
                break
        t = 0
        while True:
            t += 1
            if t * t > i:
                break
        expect.append(total + t * 1000)
    assert_same(dev, np.array(expect), rtol=1e-6)
    assert_same(ref, np.array(expect), rtol=1e-6)


@sp.kernel
def continue_in_parallel_loop(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        out[i] = -1.0
        if x[i] < 0:
            continue
        out[i] = x[i] * 2


def test_continue_in_parallel_loop(rng):
    x = nonzero(rng, 64)
    out = sp.ndarray(sp.f32, 64)
    (_, dev), (_, ref) = launch_and_interpret(continue_in_parallel_loop, sp.from_numpy(x), out)
    expect = np.where(x < 0, -1.0, 2 * x)
    assert_same(dev, expect, rtol=1e-7)
    assert_same(ref, expect, rtol=1e-7)


@sp.kernel
def fib(out: sp.Array):
    for i in range(out.shape[0]):
        p, q = 0, 1
        for _ in range(i):
            p, q = q, p + q
        a, (b, c) = i, (2 * i, 3.5)
        out[i] = p + a + b + c


def test_tuple_assignment_and_locals():
    out = sp.ndarray(sp.f64, 30)
    (dev,), (ref,) = launch_and_interpret(fib, out)
    f = [0, 1]
    while len(f) < 30:
        f.append(f[-1] + f[-2])
    expect = np.array([f[i] + 3 * i + 3.5 for i in range(30)])
    assert_same(dev, expect)
    assert_same(ref, expect)


@sp.kernel
def local_types(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0               # a float local
        cnt = 0                 # an int local: += 1 stays an int
        y: sp.f64 = x[i]        # an annotated local
        for k in range(5):
            acc += x[i] * k
            cnt += 1
        cnt = cnt * 2 + 1       # int arithmetic on an int local
        flag = x[i] > 0
        if flag:
            cnt += 100
        out[i] = acc + cnt + y * 1e-3


def test_local_variables(rng):
    x = nonzero(rng, 32)
    out = sp.ndarray(sp.f64, 32)
    (_, dev), (_, ref) = launch_and_interpret(local_types, sp.from_numpy(x), out)
    xf = x.astype(np.float32)
    acc = sum(xf * np.float32(k) for k in range(5)).astype(np.float64)
    expect = acc + 11 + 100 * (x > 0) + x.astype(np.float64) * 1e-3
    assert_same(dev, expect, rtol=1e-6)
    assert_same(ref, expect, rtol=1e-6)


# ---- sp.static ---------------------------------------------------------------------------------------
USE_SQUARE = True
SCALE = 3
OFFSET = 0.25
WEIGHTS = (1.0, -2.0, 0.5)


@sp.kernel
def static_kernel(x: sp.Array, out: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0
        for j in sp.static(range(3)):
            acc += x[i] * WEIGHTS[j] + j
        for w in sp.static(WEIGHTS):
            acc += w
        if sp.static(USE_SQUARE):
            acc = acc * acc
        else:
            acc = -acc
        if sp.static(SCALE > 5):
            acc = acc + x[i, 99]       # never compiled: would be an indexing error
        out[i] = acc * SCALE + OFFSET


def test_static_unrolling_and_module_constants(rng):
    x = nonzero(rng, 16)
    out = sp.ndarray(sp.f32, 16)
    (_, dev), (_, ref) = launch_and_interpret(static_kernel, sp.from_numpy(x), out)
    acc = sum(x * w + j for j, w in enumerate(WEIGHTS)) + sum(WEIGHTS)
    expect = acc * acc * SCALE + OFFSET
    assert_same(dev, expect, rtol=1e-5)
    assert_same(ref, expect, rtol=1e-5)
    # module constants are compile-time constants: no loops left, no scalar parameters
    ir = static_kernel._compiled(static_kernel._bind((sp.from_numpy(x), out))[0]).ir
    assert ir.scalars == [] and not any(isinstance(s, N.RangeFor) for s in N.walk(ir.tasks[0].body))


def make_closure_kernel(flag, k, bias):
    @sp.kernel
    def closure_kernel(x: sp.Array, out: sp.Array):
        for i in range(x.shape[0]):
            v = x[i] * k + bias
            if sp.static(flag):
                v = -v
            out[i] = v
    return closure_kernel


@pytest.mark.parametrize("flag,k,bias", [(True, 2, 0.5), (False, 3, -1.0)])
def test_closure_constants(rng, flag, k, bias):
    x = nonzero(rng, 16)
    out = sp.ndarray(sp.f32, 16)
    (_, dev), (_, ref) = launch_and_interpret(make_closure_kernel(flag, k, bias), sp.from_numpy(x), out)
    expect = (x * k + bias) * (-1 if flag else 1)
    assert_same(dev, expect, rtol=1e-6)
    assert_same(ref, expect, rtol=1e-6)


# ---- @sp.func -------------------------------------------------------------------------------------------
@sp.func
def square(v):
    return v * v


@sp.func
def piecewise(v, lo=-0.5):
    if v < lo:
        return lo
    else:
        if v > 0.5:
            return square(v) + 1     # nested func
        else:
            return v * 3


@sp.func
def horner(v, n):
    acc = 0.0
    for k in range(n):
        acc = acc * v + (k + 1)
    n = n + 1                        # assigning to a parameter makes it a local copy
    return acc + n


@sp.func
def swap_sum(a, b):
    return b, a + b


@sp.func
def store_twice(arr, i, j, v):
    arr[i, j] = v
    arr[i, j] = arr[i, j] * 2


@sp.kernel
def use_funcs(x: sp.Array, out: sp.Array, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        p, q = swap_sum(v, 1.0)
        out[i, 0] = piecewise(v) + square(square(v))
        out[i, 1] = horner(v, m) + m       # the caller's m is unchanged by the func
        out[i, 2] = p * 10 + q
        store_twice(out, i, 3, v)


def test_func_inlining(rng):
    x = nonzero(rng, 40)
    out = sp.ndarray(sp.f32, (40, 4))
    (_, dev), (_, ref) = launch_and_interpret(use_funcs, sp.from_numpy(x), out, 4)
    pw = np.where(x < -0.5, -0.5, np.where(x > 0.5, x * x + 1, 3 * x))
    acc = np.zeros_like(x)
    for k in range(4):
        acc = acc * x + (k + 1)
    expect = np.stack([pw + x ** 4, acc + 5 + 4, 10 + (x + 1), 2 * x], axis=1)
    assert_same(dev, expect, rtol=1e-5)
    assert_same(ref, expect, rtol=1e-5)


# ---- indexing and shapes ---------------------------------------------------------------------------------
@sp.kernel
def index_nd(a1: sp.Array, a2: sp.Array, a3: sp.Array, a4: sp.Array, out: sp.Array):
    for i in range(a1.shape[0]):
        s = a1[i]
        for j in range(a2.shape[1]):
            s += a2[i, j] * (j + 1)
            for k in range(a3.shape[2]):
                s += a3[i, j, k] * (k + 1) * 0.5
                for l in range(a4.shape[3]):
                    s += a4[i, j, k, l] * (l - 1)
        out[i] = s + a4.shape[0] * 1000 + a3.shape[1] * 100 + a4.shape[2] * 10 + a4.shape[-1]


def test_indexing_1d_to_4d(rng):
    a1, a2 = nonzero(rng, 3), nonzero(rng, (3, 4))
    a3, a4 = nonzero(rng, (3, 4, 5)), nonzero(rng, (3, 4, 5, 2))
    out = sp.ndarray(sp.f32, 3)
    args = [sp.from_numpy(v) for v in (a1, a2, a3, a4)] + [out]
    dev, ref = launch_and_interpret(index_nd, *args)
    a1, a2, a3, a4 = (v.astype(np.float64) for v in (a1, a2, a3, a4))
    expect = (a1 + (a2 * np.arange(1, 5)).sum(1) + (a3 * np.arange(1, 6) * 0.5).sum((1, 2))
              + (a4 * (np.arange(2) - 1)).sum((1, 2, 3)) + 3 * 1000 + 4 * 100 + 5 * 10 + 2)
    assert_same(dev[4], expect, rtol=1e-5)
    assert_same(ref[4], expect, rtol=1e-5)


@sp.kernel
def transpose3(x: sp.Array, y: sp.Array):
    ni, nj, nk = x.shape            # unpacked at top level: re-evaluated inside the task
    for i, j in sp.ndrange(ni, nj):
        for k in range(nk):
            y[k, j, i] = x[i, j, k] + i * 100 + j * 10 + k


def test_ndrange_parallel_2d(rng):
    x = nonzero(rng, (5, 7, 3))
    y = sp.ndarray(sp.f32, (3, 7, 5))
    (_, dev), (_, ref) = launch_and_interpret(transpose3, sp.from_numpy(x), y)
    i, j, k = np.meshgrid(np.arange(5), np.arange(7), np.arange(3), indexing="ij")
    expect = (x + i * 100 + j * 10 + k).transpose(2, 1, 0)
    assert_same(dev, expect, rtol=1e-6)
    assert_same(ref, expect, rtol=1e-6)
    ir = transpose3._compiled(transpose3._bind((sp.from_numpy(x), y))[0]).ir
    assert len(ir.tasks) == 1 and ir.tasks[0].kind == "parallel"


@sp.kernel
def parallel_ranges(a: sp.Array, b: sp.Array, c: sp.Array, d: sp.Array, n: sp.i32, lo: sp.i32):
    for i in range(n - 1, -1, -2):                        # negative step, dynamic start
        a[i] = i * 10 + 1
    for i in range(lo, b.shape[0], 3):                    # dynamic start, step 3
        b[i] = i + 100
    for i, j in sp.ndrange((1, 3), c.shape[1]):           # (begin, end) pairs
        c[i, j] = i * 10 + j
    for i, j, k in sp.ndrange(d.shape[0], d.shape[1], d.shape[2]):
        s = 0
        for p, q in sp.ndrange(2, (1, 4)):                # a serial ndrange inside
            s += p * 10 + q
        d[i, j, k] = i * 1000 + j * 100 + k * 10 + s


def test_parallel_ranges_steps_and_ndrange():
    a, b = sp.ndarray(sp.i32, 7), sp.ndarray(sp.i32, 10)
    c, d = sp.ndarray(sp.i32, (4, 3)), sp.ndarray(sp.i32, (2, 3, 4))
    dev, ref = launch_and_interpret(parallel_ranges, a, b, c, d, 7, 2)
    ea, eb, ec = np.zeros(7, np.int32), np.zeros(10, np.int32), np.zeros((4, 3), np.int32)
    ea[6::-2] = np.arange(6, -1, -2) * 10 + 1
    eb[2::3] = np.arange(2, 10, 3) + 100
    ec[1:3] = np.arange(1, 3)[:, None] * 10 + np.arange(3)
    i, j, k = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
    ed = i * 1000 + j * 100 + k * 10 + 42
    for got in (dev, ref):
        for g, e in zip(got, (ea, eb, ec, ed)):
            assert_same(g, e.astype(np.int32))
    ir = parallel_ranges._compiled(parallel_ranges._bind((a, b, c, d, 7, 2))[0]).ir
    assert [t.kind for t in ir.tasks] == ["parallel"] * 4


@sp.kernel
def scalar_arrays(x: sp.Array, total: sp.Array, first: sp.Array, count: sp.Array):
    first[None] = x[0] * 2          # a serial top-level statement
    for i in range(x.shape[0]):
        total[()] += x[i]           # atomic add into a 0-d array
        count[None] += 1
    first[()] = first[None] + 1     # runs after the loop


def test_zero_dim_arrays_and_serial_statements(rng):
    x = nonzero(rng, 100)
    total, first, count = sp.ndarray(sp.f32, ()), sp.ndarray(sp.f32, ()), sp.ndarray(sp.i32, ())
    total.fill(0.5)
    count.fill(3)
    dev, ref = launch_and_interpret(scalar_arrays, sp.from_numpy(x), total, first, count)
    for got in (dev, ref):
        assert got[1].shape == ()
        assert_same(got[1], 0.5 + x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
        assert_same(got[2], x[0] * 2 + 1, rtol=1e-7)
        assert_same(got[3], np.int32(103))
    assert total[()] == dev[1] and count[None] == 103
    kinds = [t.kind for t in scalar_arrays._compiled(scalar_arrays._bind(
        (sp.from_numpy(x), total, first, count))[0]).ir.tasks]
    assert kinds == ["serial", "parallel", "serial"]


# ---- atomics -------------------------------------------------------------------------------------------
@sp.kernel
def histogram(keys: sp.Array, vals: sp.Array, hist: sp.Array, sums: sp.Array):
    for i in range(keys.shape[0]):
        hist[keys[i]] += 1
        sums[keys[i]] += vals[i]
        hist[0] -= 2


def test_augmented_assignment_is_atomic(rng):
    n = 20000
    keys = rng.integers(1, 5, n).astype(np.int32)
    vals = nonzero(rng, n)
    hist, sums = sp.ndarray(sp.i32, 5), sp.ndarray(sp.f32, 5)
    histogram(sp.from_numpy(keys), sp.from_numpy(vals), hist, sums)
    expect_h = np.bincount(keys, minlength=5)
    expect_h[0] = -2 * n
    assert_same(hist.to_numpy(), expect_h.astype(np.int32))
    expect_s = np.bincount(keys, weights=vals.astype(np.float64), minlength=5)
    assert_same(sums.to_numpy(), expect_s, rtol=1e-4, atol=1e-2)


@sp.kernel
def ticket(counter: sp.Array, order: sp.Array, mx: sp.Array, mn: sp.Array, x: sp.Array, olds: sp.Array):
    for i in range(order.shape[0]):
        t = sp.atomic_add(counter[None], 1)
        order[t] = i
        olds[i, 0] = sp.atomic_max(mx[0], x[i])
        olds[i, 1] = sp.atomic_min(mn[0], x[i])
        m = sp.atomic_max(mx[1], i * 2)
        olds[i, 2] = m


def test_atomic_builtins_return_old_values(rng):
    n = 3000
    x = ints(rng, n, 1, 10**6)
    counter, order = sp.ndarray(sp.i32, ()), sp.ndarray(sp.i32, n)
    mx, mn = sp.ndarray(sp.i32, 2), sp.ndarray(sp.i32, 1)
    mx.fill(-2**31 + 1)
    mn.fill(2**31 - 1)
    olds = sp.ndarray(sp.i32, (n, 3))
    ticket(counter, order, mx, mn, sp.from_numpy(x), olds)
    assert counter[()] == n
    assert sorted(order.to_numpy().tolist()) == list(range(n))   # every ticket handed out once
    assert mx[0] == x.max() and mn[0] == x.min() and mx[1] == 2 * (n - 1)
    o = olds.to_numpy()
    assert (o[:, 0] <= x.max()).all() and (o[:, 1] >= x.min()).all()
    assert (o[:, 0] == -2**31 + 1).sum() == 1 and (o[:, 1] == 2**31 - 1).sum() == 1   # one saw the init
    # the thread that held the maximum saw an old value below it (or the init)
    assert o[np.argmax(x), 0] < x.max()
    # the interpreter agrees on everything that does not depend on thread order
    counter.fill(0)
    mx.fill(-2**31 + 1)
    mn.fill(2**31 - 1)
    ref, _ = interpret(ticket, counter, order, mx, mn, sp.from_numpy(x), olds)
    assert ref[0][()] == n and ref[2][0] == x.max() and ref[3][0] == x.min()
    assert_same(ref[1], np.arange(n, dtype=np.int32))


@pytest.mark.parametrize("dtype", [sp.f32, sp.u32, sp.f64])
def test_atomic_max_min_float_and_unsigned(rng, dtype):
    @sp.kernel
    def extremes(x: sp.Array, mx: sp.Array, mn: sp.Array, total: sp.Array):
        for i in range(x.shape[0]):
            sp.atomic_max(mx[None], x[i])
            sp.atomic_min(mn[None], x[i])
            sp.atomic_add(total[None], x[i])
    n = 1000
    npdt = {sp.f32: np.float32, sp.f64: np.float64, sp.u32: np.uint32}[dtype]
    x = (rng.integers(1, 10**5, n) if dtype == sp.u32 else nonzero(rng, n, 1, 100)).astype(npdt)
    mx, mn, total = sp.ndarray(dtype, ()), sp.ndarray(dtype, ()), sp.ndarray(dtype, ())
    mx.fill(x[0])
    mn.fill(x[0])
    (_, dmx, dmn, dtot), (_, rmx, rmn, rtot) = launch_and_interpret(extremes, sp.from_numpy(x), mx, mn, total)
    for got_mx, got_mn, got_tot in ((dmx, dmn, dtot), (rmx, rmn, rtot)):
        assert got_mx == x.max() and got_mn == x.min()
        assert_same(got_tot, x.astype(np.float64).sum() if dtype != sp.u32 else x.astype(np.int64).sum(),
                    rtol=1e-5 if dtype == sp.f32 else 1e-12)


# ---- globals -------------------------------------------------------------------------------------------
GLOBAL_TABLE = None    # a module-level ndarray, set by the test below


def test_captured_module_and_closure_ndarrays(rng):
    table = sp.from_numpy(nonzero(rng, 8))
    global GLOBAL_TABLE
    GLOBAL_TABLE = sp.from_numpy(nonzero(rng, 8))
    written = sp.ndarray(sp.i32, 30)

    @sp.kernel
    def gather(idx: sp.Array, out: sp.Array):
        for i in range(idx.shape[0]):
            out[i] = table[idx[i]] * 10 + GLOBAL_TABLE[idx[i]]
            written[i] = idx[i] * 2       # a captured array written to

    idx = rng.integers(0, 8, 30).astype(np.int32)
    out = sp.ndarray(sp.f32, 30)
    dev, ref = launch_and_interpret(gather, sp.from_numpy(idx), out)
    expect = table.to_numpy()[idx] * 10 + GLOBAL_TABLE.to_numpy()[idx]
    assert_same(dev[1], expect, rtol=1e-6)
    assert_same(ref[1], expect, rtol=1e-6)
    for got in (dev, ref):
        assert_same(got[4], idx * 2)      # bound after the arguments: idx, out, table, GLOBAL_TABLE, written
    # a captured array's contents are read at launch, not at compile time
    table.fill(1.0)
    gather(sp.from_numpy(idx), out)
    assert_same(out.to_numpy(), 10 + GLOBAL_TABLE.to_numpy()[idx], rtol=1e-6)


# ---- scalar arguments -----------------------------------------------------------------------------------
@sp.kernel
def scalars_typed(out: sp.Array, a: sp.f32, b: sp.i32, c: sp.u32, d: sp.u1, e: float, f: int, g: bool, h: sp.f64):
    for i in range(out.shape[0]):
        out[i] = a * i + b + c * 2 + (100 if d else -100) + e + f * 3 + (1000 if g else -1000) + h * 0.5


@sp.kernel
def scalars_plain(out: sp.Array, a, b, c):
    for i in range(out.shape[0]):
        out[i] = a * i + b + (7 if c else 0)


def test_scalar_arguments_of_each_type():
    out = sp.ndarray(sp.f64, 5)
    args = (out, 1.5, -3, 4000000000, True, 0.25, 7, False, 0.125)
    (dev,), (ref,) = launch_and_interpret(scalars_typed, *args)
    i = np.arange(5)
    expect = np.float32(1.5) * i - 3 + (4000000000 * 2 % 2**32) + 100 + 0.25 + 21 - 1000 + 0.0625
    assert_same(dev, expect, rtol=1e-7)
    assert_same(ref, expect, rtol=1e-7)
    specs = scalars_typed._bind(args)[0]
    assert specs[1:] == [sp.f32, sp.i32, sp.u32, sp.u1, sp.f32, sp.i32, sp.u1, sp.f64]
    # unannotated scalars: float -> f32, int -> i32, bool -> u1
    out2 = sp.ndarray(sp.f32, 4)
    (dev2,), (ref2,) = launch_and_interpret(scalars_plain, out2, 0.5, 2, True)
    assert_same(dev2, 0.5 * np.arange(4) + 2 + 7)
    assert_same(ref2, dev2)
    assert scalars_plain._bind((out2, 0.5, 2, True))[0][1:] == [sp.f32, sp.i32, sp.u1]
    # numpy scalars keep their dtype; an int passed for an f32 parameter converts
    scalars_typed(out, np.float32(2.0), np.int32(1), 1, False, 1, 0, True, 1)
    assert_same(out.to_numpy(), 2.0 * i + 1 + 2 - 100 + 1 + 1000 + 0.5)


# ---- tasks ---------------------------------------------------------------------------------------------
@sp.kernel
def pipeline(x: sp.Array, y: sp.Array, z: sp.Array, s: sp.Array):
    n = x.shape[0]                  # a pure top-level assignment, re-evaluated in each task
    s[None] = 0.0
    for i in range(n):
        v = x[i] * 2
        y[i] = v
    for i in range(n):
        v = y[(i + 1) % n]          # the same local name in another dispatch is a new local
        z[i] = v + y[(i + n - 1) % n]    # reads neighbours written by the previous loop
    for i in range(n - 1):
        s[None] += z[i]
    s[None] = s[None] * 0.5 + n


def test_top_level_statements_run_in_order(rng):
    x = nonzero(rng, 1000)
    y, z, s = sp.ndarray(sp.f32, 1000), sp.ndarray(sp.f32, 1000), sp.ndarray(sp.f32, ())
    s.fill(123.0)
    dev, ref = launch_and_interpret(pipeline, sp.from_numpy(x), y, z, s)
    ye = x.astype(np.float64) * 2
    ze = np.roll(ye, -1) + np.roll(ye, 1)
    se = ze[:-1].sum() * 0.5 + 1000
    for got in (dev, ref):
        assert_same(got[1], ye, rtol=1e-7)
        assert_same(got[2], ze, rtol=1e-6)
        assert_same(got[3], se, rtol=1e-4)
    ir = pipeline._compiled(pipeline._bind((sp.from_numpy(x), y, z, s))[0]).ir
    assert [t.kind for t in ir.tasks] == ["serial", "parallel", "parallel", "parallel", "serial"]


def test_repeated_launches_see_previous_results():
    y = sp.ndarray(sp.f32, 10)

    @sp.kernel
    def bump(y: sp.Array, k: sp.f32):
        for i in range(y.shape[0]):
            y[i] = y[i] * 2 + k
    for k in range(5):
        bump(y, float(k))      # asynchronous: five launches queued back to back
    expect = np.zeros(10)
    for k in range(5):
        expect = expect * 2 + k
    assert_same(y.to_numpy(), expect)


def test_large_launch_beyond_65535_workgroups():
    n = (1 << 24) + 5

    @sp.kernel
    def iota(y: sp.Array):
        for i in range(y.shape[0]):
            y[i] = i * 3 + 1

    y = sp.ndarray(sp.i32, n)
    t0 = time.perf_counter()
    iota(y)
    got = y.to_numpy()
    assert time.perf_counter() - t0 < 20
    expect = np.arange(n, dtype=np.int64) * 3 + 1
    assert (got == expect.astype(np.int32)).all()
    assert got[-1] == 3 * (n - 1) + 1


def test_zero_sized_launch():
    @sp.kernel
    def touch(x: sp.Array, s: sp.Array, n: sp.i32):
        for i in range(x.shape[0]):
            x[i] = 1.0
        for i in range(n, 3):
            s[None] += 1.0

    x, s = sp.ndarray(sp.f32, 0), sp.ndarray(sp.f32, ())
    touch(x, s, 3)
    touch(x, s, 10)     # negative extent: no threads either
    sp.sync()
    assert x.to_numpy().shape == (0,) and s[None] == 0.0
    touch(x, s, 1)
    assert s[None] == 2.0


# ---- specialisation and cache -------------------------------------------------------------------------
def test_specialisation_per_dtype_and_ndim_and_cache(monkeypatch):
    @sp.kernel
    def scale(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = x[i] * 2 + 1

    cases = [(np.float32, (6,)), (np.int32, (6,)), (np.float64, (6,)), (np.uint32, (6,))]
    for dt, shape in cases:
        x = np.arange(6).astype(dt) + 1
        xd, yd = sp.from_numpy(x), sp.from_numpy(np.zeros(shape, dt))
        scale(xd, yd)
        assert yd.to_numpy().dtype == dt
        assert_same(yd.to_numpy(), x * 2 + 1)
    assert len(scale._cache) == 4
    scale(sp.from_numpy(np.ones(3, np.float32)), sp.ndarray(sp.f32, 3))
    assert len(scale._cache) == 4          # same dtypes: no recompilation

    # the same kernel text specialised on a 1-d and a 2-d array (and per dtype)
    @sp.kernel
    def total_all(x: sp.Array, total: sp.Array):
        for i in range(x.shape[0]):
            if sp.static(len(x.shape) == 1):
                total[None] += x[i]
            else:
                for j in range(x.shape[1]):
                    total[None] += x[i, j]

    a1, a2 = np.arange(1, 5, dtype=np.float32), np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    for a in (a1, a2):
        t = sp.ndarray(sp.f32, ())
        total_all(sp.from_numpy(a), t)
        assert t[None] == a.sum()
    assert len(total_all._cache) == 2
    compiles = []
    kmod = sys.modules["spvad.kernel"]
    real = kmod.compile_kernel
    monkeypatch.setattr(kmod, "compile_kernel", lambda *a: compiles.append(a[1]) or real(*a))
    for a in (a2, a1):
        total_all(sp.from_numpy(a), sp.ndarray(sp.f32, ()))
    assert compiles == []                  # both specialisations came from the cache
    t = sp.ndarray(sp.i32, ())
    total_all(sp.from_numpy(a2.astype(np.int32)), t)
    assert t[None] == 78 and len(compiles) == 1 and len(total_all._cache) == 3


@sp.kernel
def count_up_serial(n: sp.i32, out: sp.Array):
    k = 0
    total = 0.0
    while k < n:
        k += 1
        total = total + k * 0.5
    out[None] = total


def test_top_level_variables_assigned_again_stay_variables():
    """`k = 0` at the top of a serial task is a variable when assigned again, not a constant."""
    out = sp.ndarray(sp.f32, ())
    count_up_serial(7, out)
    assert out[None] == sum(k * 0.5 for k in range(1, 8))


@sp.kernel
def axpb(x: sp.Array, y: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + 1.0


def test_repeated_launches_with_the_same_and_new_arguments(rng):
    """A launch repeated with the very same objects is replayed; any new object takes the full path."""
    xn = rng.uniform(0.5, 1.5, 32).astype(np.float32)
    x, y, y2 = sp.from_numpy(xn), sp.ndarray(sp.f32, 32), sp.ndarray(sp.f32, 32)
    a = 2.5
    for _ in range(3):
        axpb(x, y, a)
    np.testing.assert_allclose(y.to_numpy(), 2.5 * xn + 1.0, rtol=1e-6)
    axpb(x, y, 3.5)
    np.testing.assert_allclose(y.to_numpy(), 3.5 * xn + 1.0, rtol=1e-6)
    axpb(x, y2, 3.5)
    np.testing.assert_allclose(y2.to_numpy(), 3.5 * xn + 1.0, rtol=1e-6)
    x.from_numpy(xn * 2)                 # new contents of the same ndarray: the replay reads them
    axpb(x, y2, 3.5)
    np.testing.assert_allclose(y2.to_numpy(), 3.5 * 2 * xn + 1.0, rtol=1e-6)
    with pytest.raises(sp.SpvadError):   # a mutable 0-d array is not a scalar argument
        axpb(x, y, np.array(1.5, np.float32))


@sp.kernel
def take_row(x: sp.Array, out: sp.Array, t: sp.i32, s: sp.f32):
    for i in range(x.shape[1]):
        out[t, i] = x[t, i] * s


def test_launches_with_new_scalar_values_use_them(rng):
    """Same ndarrays, a new time index and scale every call: each launch sees its own values."""
    xn = rng.uniform(0.5, 1.5, (6, 8)).astype(np.float32)
    x, out = sp.from_numpy(xn), sp.ndarray(sp.f32, (6, 8))
    for t in range(6):
        take_row(x, out, t, 0.5 + t)
    np.testing.assert_allclose(out.to_numpy(), xn * (0.5 + np.arange(6))[:, None], rtol=1e-6)
    with pytest.raises(sp.SpvadError):
        take_row(x, out, 2.5, 1.0)      # a float for an i32 still fails the checks
    with pytest.raises(sp.SpvadError):
        take_row(x, out, 2**40, 1.0)

"""Reverse mode through dynamic loops: each kernel has an independently written float64 reference (plain
Python loops) and its gradient is checked against central finite differences of that reference.

This file: `for` with runtime bounds (scalar, shape, array-read, enclosing/thread index, steps), `while`,
`break`, `continue`, nested/sibling/triangular loops. Also test_dynamic_branches.py (ifs, loop-carried
values, functions, outputs, several tasks), test_dynamic_mixed.py and test_reverse_semantics.py.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import N, case_table, check_case, positive, rand, zeros

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

CASES, case = case_table()


# ---- for loops with runtime bounds ---------------------------------------------------------------------
@sp.kernel
def scalar_bound(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * 0.9 + w[i] * sp.sin(v)
        y[i] = v


def scalar_bound_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * 0.9 + w[i] * math.sin(v)
        y[i] = v


case("scalar_bound", scalar_bound, scalar_bound_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 7], [2], [0, 1])
case("scalar_bound_zero_trips", scalar_bound, scalar_bound_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 0],
     [2], [0])
case("scalar_bound_f64", scalar_bound, scalar_bound_ref,
     lambda r: [rand(r, N, dtype=np.float64), rand(r, N, dtype=np.float64), zeros(dtype=np.float64), 9], [2], [0, 1])


@sp.kernel
def shape_bound(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(w.shape[0]):
            v = v + w[k] * sp.cos(v + float(k))   # every thread reads all of w: w.grad sums over threads
        y[i] = v


def shape_bound_ref(x, w, y):
    for i in range(len(x)):
        v = x[i]
        for k in range(len(w)):
            v = v + w[k] * math.cos(v + k)
        y[i] = v


case("shape_bound", shape_bound, shape_bound_ref, lambda r: [rand(r, N), rand(r, 5, 0.1, 0.5), zeros()], [2], [0, 1])


@sp.kernel
def array_bound(x: sp.Array, cnt: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(cnt[i]):
            v = sp.tanh(v * w[i]) + x[i] * 0.5
        y[i] = v * v


def array_bound_ref(x, cnt, w, y):
    for i in range(len(x)):
        v = x[i]
        for _ in range(cnt[i]):
            v = math.tanh(v * w[i]) + x[i] * 0.5
        y[i] = v * v


case("array_bound", array_bound, array_bound_ref,
     lambda r: [rand(r, N), r.integers(0, 7, N).astype(np.int32), rand(r, N, 0.5, 2.0), zeros()], [3], [0, 2])


@sp.kernel
def min_bound(x: sp.Array, cnt: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(min(n, cnt[i])):
            v = v * x[i] + 0.2
        y[i] = v


def min_bound_ref(x, cnt, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(min(n, cnt[i])):
            v = v * x[i] + 0.2
        y[i] = v


case("min_bound", min_bound, min_bound_ref,
     lambda r: [rand(r, N), r.integers(0, 9, N).astype(np.int32), zeros(), 5], [2], [0])


@sp.kernel
def stepped(x: sp.Array, w: sp.Array, y: sp.Array, a: sp.i32, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(a, n, 3):
            v = v + w[i] * float(k) * 0.1 * sp.cos(v)
        for k in range(n - 1, a - 1, -2):
            v = v * (1.0 + 0.05 * float(k) * w[i])
        y[i] = v


def stepped_ref(x, w, y, a, n):
    for i in range(len(x)):
        v = x[i]
        for k in range(a, n, 3):
            v = v + w[i] * k * 0.1 * math.cos(v)
        for k in range(n - 1, a - 1, -2):
            v = v * (1.0 + 0.05 * k * w[i])
        y[i] = v


case("stepped", stepped, stepped_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 1, 9], [2], [0, 1])


@sp.kernel
def index_bound(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(i % 5 + 1):   # bound from the thread index
            v = v + 0.3 * sp.sin(v * w[i])
        y[i] = v


def index_bound_ref(x, w, y):
    for i in range(len(x)):
        v = x[i]
        for _ in range(i % 5 + 1):
            v = v + 0.3 * math.sin(v * w[i])
        y[i] = v


case("index_bound", index_bound, index_bound_ref, lambda r: [rand(r, N), rand(r, N), zeros()], [2], [0, 1])


@sp.kernel
def prefix_reads(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = w[i]
        for k in range(i + 1):   # thread i reads x[0..i]: x.grad gathers from many threads
            v = v * 0.8 + x[k] * w[i]
        y[i] = v


def prefix_reads_ref(x, w, y):
    for i in range(len(x)):
        v = w[i]
        for k in range(i + 1):
            v = v * 0.8 + x[k] * w[i]
        y[i] = v


case("prefix_reads", prefix_reads, prefix_reads_ref, lambda r: [rand(r, N), rand(r, N), zeros()], [2], [0, 1])


# ---- while, break, continue ------------------------------------------------------------------------------
@sp.kernel
def while_value(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while v < 3.0 and k < 40:
            v = v * 1.3 + w[i] * w[i]
            k += 1
        y[i] = v * float(k)


def while_value_ref(x, w, y):
    for i in range(len(x)):
        v, k = x[i], 0
        while v < 3.0 and k < 40:
            v = v * 1.3 + w[i] * w[i]
            k += 1
        y[i] = v * k


case("while_value", while_value, while_value_ref, lambda r: [positive(r, N), rand(r, N), zeros()], [2], [0, 1])


@sp.kernel
def while_true_break(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while True:
            v = v * 0.7 + w[i]
            k += 1
            if k >= n:
                break
            if v > 1.5:
                break
            v = v + 0.1 * sp.sin(v)
        y[i] = v


def while_true_break_ref(x, w, y, n):
    for i in range(len(x)):
        v, k = x[i], 0
        while True:
            v = v * 0.7 + w[i]
            k += 1
            if k >= n or v > 1.5:
                break
            v = v + 0.1 * math.sin(v)
        y[i] = v


case("while_true_break", while_true_break, while_true_break_ref,
     lambda r: [rand(r, N), positive(r, N, 0.1, 0.9), zeros(), 8], [2], [0, 1])


@sp.kernel
def integrate_break(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + 0.1 * sp.sin(v) * w[i]
            if v > 1.5:
                break
        y[i] = v * v


def integrate_break_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v + 0.1 * math.sin(v) * w[i]
            if v > 1.5:
                break
        y[i] = v * v


case("break", integrate_break, integrate_break_ref,
     lambda r: [positive(r, N, 0.5, 1.4), positive(r, N, 0.5, 3.0), zeros(), 20], [2], [0, 1])


@sp.kernel
def continue_index(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            if k % 3 == 1:
                continue
            v = v + sp.sin(v * w[i])
        y[i] = v


def continue_index_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for k in range(n):
            if k % 3 == 1:
                continue
            v = v + math.sin(v * w[i])
        y[i] = v


case("continue_index", continue_index, continue_index_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 7], [2], [0, 1])


@sp.kernel
def continue_data(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            if v > 1.0:
                v = v * 0.5
                continue
            v = v + w[i] * v + 0.1
        y[i] = v


def continue_data_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            if v > 1.0:
                v = v * 0.5
                continue
            v = v + w[i] * v + 0.1
        y[i] = v


case("continue_data", continue_data, continue_data_ref,
     lambda r: [positive(r, N), positive(r, N, 0.2, 1.0), zeros(), 9], [2], [0, 1])


@sp.kernel
def break_and_continue(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        t = 0.0
        for k in range(n):
            v = v * w[i] + 0.3
            if v < 0.0:
                t = t + v
                continue
            if k > 2 and v > 2.0:
                break
            v = v + 0.1 * sp.cos(v)
            t = t * 0.5 + v
        y[i] = v + t


def break_and_continue_ref(x, w, y, n):
    for i in range(len(x)):
        v, t = x[i], 0.0
        for k in range(n):
            v = v * w[i] + 0.3
            if v < 0.0:
                t = t + v
                continue
            if k > 2 and v > 2.0:
                break
            v = v + 0.1 * math.cos(v)
            t = t * 0.5 + v
        y[i] = v + t


case("break_and_continue", break_and_continue, break_and_continue_ref,
     lambda r: [rand(r, N), rand(r, N, 0.5, 1.5), zeros(), 10], [2], [0, 1])


@sp.kernel
def parallel_continue(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            continue   # leaves this thread's work: y[i] keeps its value
        v = x[i]
        for k in range(n):
            v = sp.sqrt(v + 0.5) * v
        y[i] = v


def parallel_continue_ref(x, y, n):
    for i in range(len(x)):
        if x[i] < 0.0:
            continue
        v = x[i]
        for _ in range(n):
            v = math.sqrt(v + 0.5) * v
        y[i] = v


case("parallel_continue", parallel_continue, parallel_continue_ref, lambda r: [rand(r, N), zeros(), 4], [1], [0])


@sp.kernel
def nested_break(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(m):
                v = v + 0.2 * sp.sin(v + w[i])
                if v > 1.0 + float(a):
                    break   # leaves the inner loop only
            v = v * 0.9
        y[i] = v


def nested_break_ref(x, w, y, n, m):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for _ in range(m):
                v = v + 0.2 * math.sin(v + w[i])
                if v > 1.0 + a:
                    break
            v = v * 0.9
        y[i] = v


case("nested_break", nested_break, nested_break_ref,
     lambda r: [positive(r, N, 0.1, 1.0), positive(r, N, 0.1, 1.0), zeros(), 4, 6], [2], [0, 1])


# ---- nested, sibling and triangular loops ---------------------------------------------------------------
@sp.kernel
def nested(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            u = v
            for b in range(m):
                u = u * 0.8 + sp.sin(u) * w[i]
            v = v + 0.5 * u
        y[i] = v


def nested_ref(x, w, y, n, m):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            u = v
            for _ in range(m):
                u = u * 0.8 + math.sin(u) * w[i]
            v = v + 0.5 * u
        y[i] = v


case("nested", nested, nested_ref, lambda r: [rand(r, N), rand(r, N, 0.1, 0.5), zeros(), 3, 4], [2], [0, 1])


@sp.kernel
def siblings(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + w[i] * sp.cos(v)
        u = v
        for k in range(m):
            u = u * v * 0.5 + w[i]
        y[i] = u + v


def siblings_ref(x, w, y, n, m):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v + w[i] * math.cos(v)
        u = v
        for _ in range(m):
            u = u * v * 0.5 + w[i]
        y[i] = u + v


case("siblings", siblings, siblings_ref, lambda r: [rand(r, N), rand(r, N, 0.1, 0.6), zeros(), 4, 3], [2], [0, 1])


@sp.kernel
def triangular(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(a):
                v = v + 0.1 * sp.sin(v * w[i] + float(b))
        y[i] = v


def triangular_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for b in range(a):
                v = v + 0.1 * math.sin(v * w[i] + b)
        y[i] = v


case("triangular", triangular, triangular_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 6], [2], [0, 1])


@sp.kernel
def triangular3(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(a, n):
                for c in range(b):
                    v = v * 0.95 + 0.05 * sp.cos(v + w[i] * float(c - a))
        y[i] = v


def triangular3_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for b in range(a, n):
                for c in range(b):
                    v = v * 0.95 + 0.05 * math.cos(v + w[i] * (c - a))
        y[i] = v


case("triangular3", triangular3, triangular3_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 4], [2], [0, 1])


@sp.kernel
def growing_bound(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        m = 1
        for a in range(n):
            for b in range(m):   # bound is a loop-carried int: no static bound
                v = v + 0.1 * w[i] * sp.sin(v)
            m = m + a % 2 + 1
        y[i] = v


def growing_bound_ref(x, w, y, n):
    for i in range(len(x)):
        v, m = x[i], 1
        for a in range(n):
            for _ in range(m):
                v = v + 0.1 * w[i] * math.sin(v)
            m = m + a % 2 + 1
        y[i] = v


case("growing_bound", growing_bound, growing_bound_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 5], [2], [0, 1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient(name, rng):
    check_case(CASES[name], rng)

"""Reverse mode through dynamic control flow: each kernel has an independently written float64 reference
(plain Python loops) and its gradient is checked against central finite differences of that reference.

Covered: `for` with runtime bounds (scalar, shape, array-read, enclosing index), `while`, `break`,
`continue`, nested/sibling/triangular loops, loops inside `if` and `if` inside loops, short-circuit
conditions, loop-carried float/int/bool values, `@sp.func` calls, several outputs, atomic adds into a
scalar loss, several top-level loops and serial statements in one kernel, `sp.Tape`.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import check_grad, positive, rand

N = 12   # threads per test: small, lavapipe runs on 2 CPU cores


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape or (N,), dtype)


CASES = {}   # name -> (kernel, reference, make_args(rng), output indices, input indices to differentiate)


def case(name, kernel, ref, make_args, outs, wrt):
    CASES[name] = (kernel, ref, make_args, outs, wrt)


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


# ---- if and loops -----------------------------------------------------------------------------------------
@sp.kernel
def loop_in_if(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        if v > 0.0:
            for k in range(n):
                v = v * w[i] + 0.1
        else:
            for k in range(m):
                v = sp.sin(v) + w[i] * v
        y[i] = v


def loop_in_if_ref(x, w, y, n, m):
    for i in range(len(x)):
        v = x[i]
        if v > 0.0:
            for _ in range(n):
                v = v * w[i] + 0.1
        else:
            for _ in range(m):
                v = math.sin(v) + w[i] * v
        y[i] = v


case("loop_in_if", loop_in_if, loop_in_if_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 3, 5], [2], [0, 1])


@sp.kernel
def if_in_loop(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            if v > 0.5:
                v = v * w[i]
            elif v > -0.5:
                v = v + w[i] * w[i]
            else:
                v = -v * 0.5
        y[i] = v


def if_in_loop_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            if v > 0.5:
                v = v * w[i]
            elif v > -0.5:
                v = v + w[i] * w[i]
            else:
                v = -v * 0.5
        y[i] = v


case("if_in_loop", if_in_loop, if_in_loop_ref, lambda r: [rand(r, N, 0.1, 2.0), rand(r, N), zeros(), 6], [2], [0, 1])


@sp.kernel
def short_circuit(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            if (v > 0.2 and w[i] < 0.5) or k == 2:
                v = v * 1.1 + w[i]
            elif not (v < -0.5 or k % 2 == 0):
                v = v - 0.3 * w[i] * v
        y[i] = v


def short_circuit_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for k in range(n):
            if (v > 0.2 and w[i] < 0.5) or k == 2:
                v = v * 1.1 + w[i]
            elif not (v < -0.5 or k % 2 == 0):
                v = v - 0.3 * w[i] * v
        y[i] = v


case("short_circuit", short_circuit, short_circuit_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 6], [2], [0, 1])


@sp.kernel
def if_expression(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] if v > 0.0 else v * 0.5 + w[i]
        y[i] = v


def if_expression_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * w[i] if v > 0.0 else v * 0.5 + w[i]
        y[i] = v


case("if_expression", if_expression, if_expression_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 5], [2], [0, 1])


# ---- loop-carried values of every kind --------------------------------------------------------------
@sp.kernel
def bool_flag(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        flag = False
        for k in range(n):
            if flag:
                v = v * 0.8 + w[i]
            else:
                v = v * 1.5 + 0.1 * w[i]
            if abs(v) > 1.0:
                flag = not flag
        y[i] = v


def bool_flag_ref(x, w, y, n):
    for i in range(len(x)):
        v, flag = x[i], False
        for _ in range(n):
            v = v * 0.8 + w[i] if flag else v * 1.5 + 0.1 * w[i]
            if abs(v) > 1.0:
                flag = not flag
        y[i] = v


case("bool_flag", bool_flag, bool_flag_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 8], [2], [0, 1])


@sp.kernel
def int_carried(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        c = 0
        for k in range(n):
            c = (c + k * 3) % 5
            v = v + float(c) * 0.1 * sp.sin(v * w[i])
        y[i] = v


def int_carried_ref(x, w, y, n):
    for i in range(len(x)):
        v, c = x[i], 0
        for k in range(n):
            c = (c + k * 3) % 5
            v = v + c * 0.1 * math.sin(v * w[i])
        y[i] = v


case("int_carried", int_carried, int_carried_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 7], [2], [0, 1])


@sp.kernel
def tuple_carried(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        p = x[i]
        q = w[i]
        for k in range(n):
            p, q = q, p * 0.5 + q * w[i]
        y[i] = p * q


def tuple_carried_ref(x, w, y, n):
    for i in range(len(x)):
        p, q = x[i], w[i]
        for _ in range(n):
            p, q = q, p * 0.5 + q * w[i]
        y[i] = p * q


case("tuple_carried", tuple_carried, tuple_carried_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 6], [2], [0, 1])


@sp.kernel
def conditional_last(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        t = w[i]
        for k in range(n):
            v = sp.sin(v * 2.0 + w[i])
            if v > 0.3:
                t = v * t   # written in some iterations only, read after the loop
        y[i] = t + v


def conditional_last_ref(x, w, y, n):
    for i in range(len(x)):
        v, t = x[i], w[i]
        for _ in range(n):
            v = math.sin(v * 2.0 + w[i])
            if v > 0.3:
                t = v * t
        y[i] = t + v


case("conditional_last", conditional_last, conditional_last_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 6], [2],
     [0, 1])


# ---- @sp.func inside loops ---------------------------------------------------------------------------------
@sp.func
def relax(v, w):
    return v + 0.1 * sp.tanh(v * w)


@sp.func
def inner_iterations(v, w, m):
    for j in range(m):
        v = v * 0.9 + w * sp.cos(v)
    return v


@sp.kernel
def func_calls(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = relax(v, w[i])
            v = inner_iterations(v, w[i] * 0.5, k + 1)
        y[i] = v


def func_calls_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for k in range(n):
            v = v + 0.1 * math.tanh(v * w[i])
            for _ in range(k + 1):
                v = v * 0.9 + w[i] * 0.5 * math.cos(v)
        y[i] = v


case("func_calls", func_calls, func_calls_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 4], [2], [0, 1])


# ---- outputs: several, atomic into a scalar loss, overwritten in a loop ------------------------------------
@sp.kernel
def two_outputs(x: sp.Array, w: sp.Array, y: sp.Array, z: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        u = w[i]
        for k in range(n):
            v = v + 0.2 * sp.sin(u)
            u = u * 0.9 + 0.1 * v
        y[i] = v
        z[i] = u * v


def two_outputs_ref(x, w, y, z, n):
    for i in range(len(x)):
        v, u = x[i], w[i]
        for _ in range(n):
            v = v + 0.2 * math.sin(u)
            u = u * 0.9 + 0.1 * v
        y[i] = v
        z[i] = u * v


case("two_outputs", two_outputs, two_outputs_ref, lambda r: [rand(r, N), rand(r, N), zeros(), zeros(), 5], [2, 3],
     [0, 1])


@sp.kernel
def atomic_loss(x: sp.Array, w: sp.Array, loss: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + w[i] * sp.sin(v)
            loss[None] += 0.1 * v * v   # inside the loop
        loss[None] += v


def atomic_loss_ref(x, w, loss, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v + w[i] * math.sin(v)
            loss[()] += 0.1 * v * v
        loss[()] += v


case("atomic_loss", atomic_loss, atomic_loss_ref,
     lambda r: [rand(r, N), rand(r, N, 0.1, 0.5), np.zeros((), np.float32), 5], [2], [0, 1])


@sp.kernel
def store_in_loop(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.1
            y[i] = v   # overwritten each iteration: only the last store is the output


def store_in_loop_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * w[i] + 0.1
            y[i] = v


case("store_in_loop", store_in_loop, store_in_loop_ref, lambda r: [rand(r, N), rand(r, N, 0.5, 1.2), zeros(), 4], [2],
     [0, 1])


@sp.kernel
def store_then_read(x: sp.Array, w: sp.Array, y: sp.Array, z: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = w[i]
        for k in range(n):
            if k == 0:
                y[i] = x[i] * 2.0   # written once, then read in every iteration (valid: never overwritten)
            v = v * 0.5 + y[i] * w[i]
        z[i] = v


def store_then_read_ref(x, w, y, z, n):
    for i in range(len(x)):
        v = w[i]
        for k in range(n):
            if k == 0:
                y[i] = x[i] * 2.0
            v = v * 0.5 + y[i] * w[i]
        z[i] = v


# the reverse of the store reads y.grad[i]: the loads of y[i] in the loop must have added theirs by then
case("store_then_read", store_then_read, store_then_read_ref,
     lambda r: [rand(r, N), rand(r, N), zeros(), zeros(), 4], [2, 3], [0, 1])


# ---- several tasks: top-level loops and serial statements ----------------------------------------------
@sp.kernel
def two_tasks(x: sp.Array, w: sp.Array, y: sp.Array, z: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + 0.3 * sp.sin(v * w[i])
        y[i] = v
    for i in range(x.shape[0]):   # a second dispatch reads y, written by the first (valid: no overwrite)
        u = y[i]
        for k in range(i % 3 + 1):
            u = u * w[(i + 1) % x.shape[0]] + sp.cos(x[i])
        z[i] = u


def two_tasks_ref(x, w, y, z, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v + 0.3 * math.sin(v * w[i])
        y[i] = v
    for i in range(len(x)):
        u = y[i]
        for _ in range(i % 3 + 1):
            u = u * w[(i + 1) % len(x)] + math.cos(x[i])
        z[i] = u


case("two_tasks", two_tasks, two_tasks_ref, lambda r: [rand(r, N), rand(r, N), zeros(), zeros(), 4], [2, 3], [0, 1])


@sp.kernel
def serial_then_parallel(x: sp.Array, w: sp.Array, s: sp.Array, y: sp.Array, n: sp.i32):
    acc: sp.f32 = 0.0
    k: sp.i32 = 0
    while k < n:   # a single-thread task with a dynamic loop
        acc = acc * 0.5 + x[k] * w[k]
        k += 1
    s[None] = acc
    for i in range(x.shape[0]):
        v = x[i]
        for j in range(n):
            v = v * 0.9 + w[j] * 0.1
        y[i] = v


def serial_then_parallel_ref(x, w, s, y, n):
    acc = 0.0
    for k in range(n):
        acc = acc * 0.5 + x[k] * w[k]
    s[()] = acc
    for i in range(len(x)):
        v = x[i]
        for j in range(n):
            v = v * 0.9 + w[j] * 0.1
        y[i] = v


case("serial_then_parallel", serial_then_parallel, serial_then_parallel_ref,
     lambda r: [rand(r, N), rand(r, N), np.zeros((), np.float32), zeros(), 7], [2, 3], [0, 1])


@sp.kernel
def ndrange_loop(x: sp.Array, w: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        v = x[i, j]
        for k in range(j + 1):
            v = v + w[k] * sp.sin(v)
        y[i, j] = v


def ndrange_loop_ref(x, w, y):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            for k in range(j + 1):
                v = v + w[k] * math.sin(v)
            y[i, j] = v


case("ndrange", ndrange_loop, ndrange_loop_ref, lambda r: [rand(r, (3, 4)), rand(r, 4, 0.1, 0.5), zeros(3, 4)], [2],
     [0, 1])


@sp.kernel
def reset_then_accumulate(x: sp.Array, loss: sp.Array, first: sp.Array, n: sp.i32):
    loss[None] = 0.0                    # serial statements: one single-thread dispatch
    first[None] = x[0] * x[1]
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = sp.sin(v) + x[i]
        loss[None] += v * v


def reset_then_accumulate_ref(x, loss, first, n):
    loss[()] = 0.0
    first[()] = x[0] * x[1]
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = math.sin(v) + x[i]
        loss[()] += v * v


case("reset_then_accumulate", reset_then_accumulate, reset_then_accumulate_ref,
     lambda r: [rand(r, N), np.full((), 5.0, np.float32), np.zeros((), np.float32), 3], [1, 2], [0])


# ---- more shapes of control flow ----------------------------------------------------------------------------
@sp.func
def piecewise(v, w):
    if v > 0.0:
        return v * w
    else:
        return sp.sin(v) + w


@sp.kernel
def func_branches(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = piecewise(v, w[i]) * 0.9
        y[i] = v


def func_branches_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = (v * w[i] if v > 0 else math.sin(v) + w[i]) * 0.9
        y[i] = v


case("func_branches", func_branches, func_branches_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 5], [2], [0, 1])


@sp.kernel
def while_continue_break(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while k < n:
            k += 1
            if k % 2 == 0:
                continue
            v = v + w[i] * sp.cos(v)
            if v > 2.0:
                break
        y[i] = v


def while_continue_break_ref(x, w, y, n):
    for i in range(len(x)):
        v, k = x[i], 0
        while k < n:
            k += 1
            if k % 2 == 0:
                continue
            v = v + w[i] * math.cos(v)
            if v > 2.0:
                break
        y[i] = v


case("while_continue_break", while_continue_break, while_continue_break_ref,
     lambda r: [rand(r, N), rand(r, N), zeros(), 9], [2], [0, 1])


@sp.kernel
def loop_if_loop(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            if v * w[i] > 0.0:
                for b in range(a + 1):
                    v = v * 0.8 + 0.1 * w[i]
            else:
                v = -v + w[i]
        y[i] = v


def loop_if_loop_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            if v * w[i] > 0.0:
                for _ in range(a + 1):
                    v = v * 0.8 + 0.1 * w[i]
            else:
                v = -v + w[i]
        y[i] = v


case("loop_if_loop", loop_if_loop, loop_if_loop_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 4], [2], [0, 1])


@sp.kernel
def data_bounds_nested(x: sp.Array, cnt: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(cnt[(i + a) % x.shape[0]]):   # data-dependent inner bound
                v = v * 0.9 + 0.2 * sp.sin(v + float(b))
            u = v
            while u < 3.0 and u > 0.0:   # data-dependent while inside a for
                u = u * 1.5 + 0.1
                v = v + 0.01 * u
        y[i] = v


def data_bounds_nested_ref(x, cnt, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for b in range(cnt[(i + a) % len(x)]):
                v = v * 0.9 + 0.2 * math.sin(v + b)
            u = v
            while 3.0 > u > 0.0:
                u = u * 1.5 + 0.1
                v = v + 0.01 * u
        y[i] = v


case("data_bounds_nested", data_bounds_nested, data_bounds_nested_ref,
     lambda r: [rand(r, N), r.integers(0, 12, N).astype(np.int32), zeros(), 3], [2], [0])


@sp.kernel
def reset_in_loop(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.3
            if v > 1.0:
                v = 0.25   # overwritten by a constant: no gradient flows past this iteration
        y[i] = v * x[i]


def reset_in_loop_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * w[i] + 0.3
            if v > 1.0:
                v = 0.25
        y[i] = v * x[i]


case("reset_in_loop", reset_in_loop, reset_in_loop_ref,
     lambda r: [rand(r, N), rand(r, N, 0.5, 1.5), zeros(), 5], [2], [0, 1])


@sp.kernel
def vector_carried(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        p = sp.vec2(x[i], w[i])
        for k in range(n):
            p = p + 0.1 * sp.vec2(-p[1], p[0]) * w[i]   # a loop-carried vector (rotation steps)
        y[i] = p[0] * p[1] + sp.length(p)


def vector_carried_ref(x, w, y, n):
    for i in range(len(x)):
        a, b = x[i], w[i]
        for _ in range(n):
            a, b = a - 0.1 * b * w[i], b + 0.1 * a * w[i]
        y[i] = a * b + math.hypot(a, b)


case("vector_carried", vector_carried, vector_carried_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 5], [2], [0, 1])


@sp.kernel
def atomic_call_in_loop(x: sp.Array, loss: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * 0.9 + 0.1
            sp.atomic_add(loss[None], v * x[i])


def atomic_call_in_loop_ref(x, loss, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * 0.9 + 0.1
            loss[()] += v * x[i]


case("atomic_call_in_loop", atomic_call_in_loop, atomic_call_in_loop_ref,
     lambda r: [rand(r, N), np.zeros((), np.float32), 4], [1], [0])


@sp.kernel
def mixed_precision(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = sp.cast(x[i], sp.f64)   # f32 inputs, an f64 loop-carried value and output
        for k in range(n):
            v = v + sp.cast(w[i], sp.f64) * v * 0.1
        y[i] = v


def mixed_precision_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v + w[i] * v * 0.1
        y[i] = v


case("mixed_precision", mixed_precision, mixed_precision_ref,
     lambda r: [rand(r, N), rand(r, N), zeros(dtype=np.float64), 5], [2], [0, 1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient(name, rng):
    kernel, ref, make_args, outs, wrt = CASES[name]
    args = make_args(rng)
    if any(getattr(a, "dtype", None) == np.float64 for a in args) and not sp.device_info()["features"].get("float64"):
        pytest.skip("device has no float64")
    check_grad(kernel, ref, args, outs, wrt, rng)


def test_at_least_30_kernels():
    assert len({c[0] for c in CASES.values()}) >= 30


# ---- global store semantics: a kernel's gradient consumes the .grad of what it stores ------------------
def test_store_consumes_output_grad(rng):
    """`y[i] = e` overwrites y, so the gradient of the launch takes y.grad into e and zeroes it: y's
    value before the launch did not influence y afterwards (as in Taichi). `loss[None] += e` keeps it."""
    x = sp.from_numpy(rand(rng, N), needs_grad=True)
    w = sp.from_numpy(rand(rng, N, 0.5, 1.2), needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    store_in_loop(x, w, y, 4)
    y.grad.fill(1.0)
    store_in_loop.grad(x, w, y, 4)
    np.testing.assert_array_equal(y.grad.to_numpy(), np.zeros(N))

    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    atomic_loss(x, w, loss, 3)
    loss.grad.fill(2.0)
    atomic_loss.grad(x, w, loss, 3)
    assert loss.grad[None] == 2.0


# ---- atomic max/min: only the winning element receives the gradient ----------------------------------
@sp.kernel
def reduce_max(x: sp.Array, w: sp.Array, m: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.1
        sp.atomic_max(m[None], v)


@sp.kernel
def reduce_min(x: sp.Array, w: sp.Array, m: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v * w[i] + 0.1
        sp.atomic_min(m[None], v)


@pytest.mark.parametrize("kernel,pick,init", [(reduce_max, np.argmax, -1e30), (reduce_min, np.argmin, 1e30)],
                         ids=["max", "min"])
def test_atomic_extremum_gradient_goes_to_winner(kernel, pick, init, rng):
    xn, wn = rand(rng, N), rand(rng, N, 0.5, 1.5)

    def ref(x, w, m, n):
        vals = []
        for i in range(len(x)):
            v = x[i]
            for _ in range(n):
                v = v * w[i] + 0.1
            vals.append(v)
        m[()] = max(m[()], max(vals)) if kernel is reduce_max else min(m[()], min(vals))

    dev = check_grad(kernel, ref, [xn, wn, np.array(init, np.float32), 3], [2], [0, 1], rng)
    g = dev[0].grad.to_numpy()
    assert np.count_nonzero(g) == 1 and np.flatnonzero(g)[0] == pick(
        [_final(xn[i], wn[i], 3) for i in range(N)])


def _final(x, w, n):
    v = float(x)
    for _ in range(n):
        v = v * float(w) + 0.1
    return v


# ---- sp.Tape --------------------------------------------------------------------------------------------
@sp.kernel
def tape_first(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(n):
            v = v + w[i] * sp.sin(v)
        y[i] = v


@sp.kernel
def tape_second(y: sp.Array, w: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        u = y[i]
        k = 0
        while u > 0.1 and k < 5:
            u = u * 0.5 * w[i]
            k += 1
        loss[None] += u * u


def _tape_ref(x, w, n):
    loss = 0.0
    for i in range(len(x)):
        v = float(x[i])
        for _ in range(n):
            v = v + float(w[i]) * math.sin(v)
        u, k = v, 0
        while u > 0.1 and k < 5:
            u = u * 0.5 * float(w[i])
            k += 1
        loss += u * u
    return loss


def _fd(f, a, eps=1e-6):
    g = np.zeros(a.shape)
    for j in range(a.size):
        p, m = a.astype(np.float64), a.astype(np.float64)
        p[j] += eps
        m[j] -= eps
        g[j] = (f(p) - f(m)) / (2 * eps)
    return g


def test_tape_two_kernel_chain(rng):
    """Tape zeroes the grads of arrays it sees, seeds loss.grad = 1 and runs the gradients in reverse."""
    xn, wn, n = rand(rng, N), positive(rng, N, 0.5, 1.5), 4
    x = sp.from_numpy(xn, needs_grad=True)
    w = sp.from_numpy(wn, needs_grad=True)
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    for a in (x, w, y):
        a.grad.fill(123.0)   # stale values: the Tape must zero them
    loss.grad.fill(-7.0)
    with sp.Tape(loss=loss):
        tape_first(x, w, y, n)
        tape_second(y, w, loss)
    np.testing.assert_allclose(loss[None], _tape_ref(xn, wn, n), rtol=1e-5)
    assert loss.grad[None] == 1.0
    gx = _fd(lambda a: _tape_ref(a, wn, n), xn)
    gw = _fd(lambda a: _tape_ref(xn, a, n), wn)
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-4, atol=1e-4 * np.abs(gx).max())
    np.testing.assert_allclose(w.grad.to_numpy(), gw, rtol=1e-4, atol=1e-4 * np.abs(gw).max())
    np.testing.assert_array_equal(y.grad.to_numpy(), np.zeros(N))   # consumed by tape_first's gradient


def test_tape_rejects_non_scalar_loss():
    y = sp.ndarray(sp.f32, (N,), needs_grad=True)
    with pytest.raises(sp.SpvadError, match="single element"):
        sp.Tape(loss=y)
    with pytest.raises(sp.SpvadError, match="needs_grad"):
        sp.Tape(loss=sp.ndarray(sp.f32, ()))


# ---- known bugs elsewhere ---------------------------------------------------------------------------------
@sp.kernel
def serial_plain_init(x: sp.Array, s: sp.Array, n: sp.i32):
    acc = 0.0   # a pure top-level assignment: the frontend treats it as a lazy constant
    if n > 0:
        for k in range(n):
            acc = acc + x[k]
    s[None] = acc


@pytest.mark.xfail(strict=True, reason="frontend: a pure top-level assignment (`acc = 0.0`) in a serial task "
                   "becomes a lazy constant, so `acc = acc + x[k]` in a later loop restarts from 0 every "
                   "iteration (and `k = 0; while k < n: k += 1` never ends)")
def test_serial_task_accumulates_from_plain_initialiser(rng):
    xn = rand(rng, N)
    x, s = sp.from_numpy(xn), sp.ndarray(sp.f32, ())
    serial_plain_init(x, s, 5)
    np.testing.assert_allclose(s[None], xn[:5].astype(np.float64).sum(), rtol=1e-5)

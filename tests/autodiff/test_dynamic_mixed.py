"""Reverse mode through dynamic control flow, continued (see test_dynamic_loops.py): mixed shapes —
serial statements, functions with branches, while with continue and break, data-dependent nested bounds,
vectors, ndrange with continue, unrolled loops around dynamic ones, deep nesting, f64 values.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import N, case_table, check_case, rand, zeros

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

CASES, case = case_table()


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
def nd_cont(x: sp.Array, y: sp.Array, n: sp.i32):
    for i, j in sp.ndrange(x.shape[0], x.shape[1]):
        if x[i, j] < 0.0:
            continue
        v = x[i, j]
        for k in range(n + j):
            v = v * 0.9 + 0.1 * sp.sqrt(v + 1.0)
        y[i, j] = v


def nd_cont_ref(x, y, n):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if x[i, j] < 0:
                continue
            v = x[i, j]
            for k in range(n + j):
                v = v * 0.9 + 0.1 * math.sqrt(v + 1.0)
            y[i, j] = v


case("ndrange_continue", nd_cont, nd_cont_ref, lambda r: [rand(r, (3, 4)), zeros(3, 4), 3], [1], [0])


@sp.kernel
def serial_if(x: sp.Array, s: sp.Array, n: sp.i32):
    if n > 2:
        acc: sp.f32 = 1.0
        k: sp.i32 = 0
        while k < n:
            acc = acc * (1.0 + 0.1 * x[k])
            k += 1
        s[None] = acc
    else:
        s[None] = x[0]


def serial_if_ref(x, s, n):
    if n > 2:
        acc = 1.0
        for k in range(n):
            acc *= 1.0 + 0.1 * x[k]
        s[()] = acc
    else:
        s[()] = x[0]


case("serial_if", serial_if, serial_if_ref, lambda r: [rand(r, N), np.zeros((), np.float32), 5], [1], [0])


@sp.kernel
def static_dyn(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for s in sp.static(range(3)):
            for k in range(n + s):
                v = v + 0.1 * float(s + 1) * sp.sin(v * w[i])
        y[i] = v


def static_dyn_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for s in range(3):
            for k in range(n + s):
                v = v + 0.1 * (s + 1) * math.sin(v * w[i])
        y[i] = v


case("static_unrolled", static_dyn, static_dyn_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 3], [2], [0, 1])


@sp.kernel
def deep(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for a in range(n):
            for b in range(n):
                if b > a + 1:
                    break
                for c in range(n):
                    if c == b:
                        continue
                    k = 0
                    while k < c:
                        v = v * 0.97 + 0.03 * sp.cos(v * w[i])
                        k += 1
                        if v > 1.2:
                            break
                if v < -1.0:
                    break
        y[i] = v


def deep_ref(x, w, y, n):
    for i in range(len(x)):
        v = x[i]
        for a in range(n):
            for b in range(n):
                if b > a + 1:
                    break
                for c in range(n):
                    if c == b:
                        continue
                    k = 0
                    while k < c:
                        v = v * 0.97 + 0.03 * math.cos(v * w[i])
                        k += 1
                        if v > 1.2:
                            break
                if v < -1.0:
                    break
        y[i] = v


case("deep_nesting", deep, deep_ref, lambda r: [rand(r, N), rand(r, N), zeros(), 4], [2], [0, 1])


@sp.kernel
def float_bound(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        for k in range(int(x[i] * 7.0)):
            v = v + x[i] * 0.1 * float(k)
        y[i] = v


def float_bound_ref(x, y):
    for i in range(len(x)):
        v = x[i]
        for k in range(int(x[i] * 7.0)):
            v = v + x[i] * 0.1 * k
        y[i] = v


case("float_steers_bound", float_bound, float_bound_ref,   # x*7 kept away from integers
     lambda r: [((r.integers(1, 8, N) + r.uniform(0.1, 0.9, N)) / 7.0).astype(np.float32), zeros()], [1], [0])


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
    check_case(CASES[name], rng)

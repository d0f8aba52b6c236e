"""Reverse mode through dynamic control flow, continued (see test_dynamic_loops.py): loops inside `if` and
`if` inside loops, short-circuit conditions, loop-carried float/int/bool/tuple values, `@sp.func` calls,
several outputs, atomic adds into a scalar loss, stores inside loops, several tasks in one kernel.
"""
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import N, case_table, check_case, rand, zeros

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend

CASES, case = case_table()


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


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient(name, rng):
    check_case(CASES[name], rng)

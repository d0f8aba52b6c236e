"""Kernels with dynamic control flow for the forward/reverse agreement test.

Each case: a kernel and a maker of its arguments. Arguments are tagged: "in" (differentiated input:
needs_grad and needs_dual), "out" (differentiated output), "tmp" (intermediate array the kernel writes and
reads back: needs both companions), "const" (int data driving the control flow), or a plain scalar.
"""
import numpy as np

import spvad as sp

N = 24


def _x(rng, lo=0.2, hi=1.2):
    sign = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, N)).astype(np.float32)


def _counts(rng, lo=0, hi=7):
    return rng.integers(lo, hi, N).astype(np.int32)


# ---- 1. dynamic for: trip count from data ---------------------------------------------------------------
@sp.kernel
def dyn_for(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i]):
            p = p * sp.cos(p) + 0.1 * x[i]
        y[i] = p


# ---- 2. while with a float condition and a counter --------------------------------------------------------
@sp.kernel
def while_loop(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        k = 0
        while sp.abs(p) < 4.0 and k < c[i] + 2:
            p = p * 1.3 + sp.sin(x[i]) * 0.2
            k += 1
        y[i] = p * p


# ---- 3. break out of a scalar-bounded loop -------------------------------------------------------------
@sp.kernel
def with_break(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(n):
            p = p + 0.3 * sp.tanh(p * float(k + 1))
            if sp.abs(p) > 1.5:
                break
        y[i] = p * x[i]


# ---- 4. continue ---------------------------------------------------------------------------------------
@sp.kernel
def with_continue(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        q = 0.5
        for k in range(c[i] + 3):
            q = q * 0.9 + p * 0.1
            if (k + i) % 3 == 1:
                continue
            p = p * sp.exp(-0.1 * q)
        y[i] = p + q


# ---- 5. nested dynamic loops, inner bound from the outer index (triangular) ------------------------------
@sp.kernel
def nested_triangular(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for a in range(c[i]):
            for b in range(a + 1):
                p = p * 0.8 + sp.sin(p * float(b + 1)) * 0.3
            p = p + 0.05 * float(a)
        y[i] = p


# ---- 6. triangular access: thread i reads x[0..i] --------------------------------------------------------
@sp.kernel
def prefix_products(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        acc = 0.0
        for j in range(i + 1):
            acc = acc * 0.7 + x[j] * x[i]
        y[i] = acc


# ---- 7. if/elif/else inside a loop, values assigned in one branch only ------------------------------------
@sp.kernel
def if_in_loop(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        r = 1.0
        for k in range(c[i] + 1):
            if p > 0.3:
                p = p * p - 0.2
            elif p < -0.3:
                p = -p * 0.5 + 0.1
                r = r * p
            else:
                p = p + 0.25
        y[i] = p * r


# ---- 8. short-circuit and/or/not in loop conditions -------------------------------------------------------
@sp.kernel
def short_circuit(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i] + 2):
            if (p > 0.0 and sp.sin(p) < 0.6) or (k == 2 and not p > -0.5):
                p = p * 1.4 + 0.05
            else:
                p = sp.atan(p) * 0.9
        y[i] = p


# ---- 9. a bool carried from one iteration to the next ------------------------------------------------------
@sp.kernel
def bool_carried(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        flip = x[i] > 0.0
        for k in range(c[i] + 1):
            if flip:
                p = p * 0.5 + sp.cos(p)
            else:
                p = p * p * 0.3 - 0.1
            flip = not flip if p > 0.2 else flip
        y[i] = p


# ---- 10. @sp.func holding a loop, called in a loop ---------------------------------------------------------
@sp.func
def damped(p, steps):
    v = p
    for s in range(steps):
        v = v - 0.2 * sp.sin(v) * float(s + 1)
    return v


@sp.kernel
def func_in_loop(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i] % 3 + 1):
            p = damped(p, k + 1) * 1.1
        y[i] = p


# ---- 11. several top-level loops communicating through an array --------------------------------------------
@sp.kernel
def two_stages(x: sp.Array, c: sp.Array, tmp: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i]):
            p = p * 0.9 + 0.1 * sp.sin(p)
        tmp[i] = p
    for i in range(x.shape[0]):
        q = tmp[i]
        j = (i + 1) % x.shape[0]
        for k in range(c[j]):
            q = q + tmp[j] * 0.2 * q
        y[i] = q


# ---- 12. atomic adds into a scalar from inside a dynamic loop ---------------------------------------------
@sp.kernel
def atomic_sum(x: sp.Array, c: sp.Array, s: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i] + 1):
            p = p * 0.95 + 0.1
            s[None] += p * p
        s[None] += sp.sin(p)


# ---- 13. while with break and continue, and a second output ------------------------------------------------
@sp.kernel
def while_break_continue(x: sp.Array, c: sp.Array, y: sp.Array, z: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        k = 0
        acc = 0.0
        while True:
            k += 1
            if k > c[i] + 3:
                break
            if k % 2 == 0:
                acc = acc + p * 0.5
                continue
            p = sp.sqrt(p * p + 0.1) * 0.9
        y[i] = p
        z[i] = acc * x[i]


# ---- 14. two inputs; min/max/select/atan2/pow in a loop with a negative step ---------------------------------
@sp.kernel
def two_inputs_mixed_ops(x: sp.Array, w: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p = x[i]
        for k in range(c[i] + 2, 0, -1):
            a = min(p, w[i]) + max(p * 0.5, -w[i])
            b = sp.select(p > 0.0, sp.atan2(p, w[i] + 2.0), p ** 3)
            p = a * 0.6 + b * 0.3 + sp.pow(sp.abs(w[i]) + 0.5, p * 0.2)
        y[i] = p


# ---- 15. scalar argument bounds, nested while inside for, local accumulation then one store ----------------
@sp.kernel
def while_in_for(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        p = x[i]
        total = 0.0
        for k in range(n):
            m = 0
            while m < k and p < 3.0:
                p = p + 0.1 * sp.exp(-p * p)
                m += 1
            total = total + p * float(k)
        y[i] = total


CASES = {
    "dyn_for": (dyn_for, lambda r: [("in", _x(r)), ("const", _counts(r)), ("out", np.zeros(N, np.float32))]),
    "while_loop": (while_loop, lambda r: [("in", _x(r)), ("const", _counts(r)), ("out", np.zeros(N, np.float32))]),
    "with_break": (with_break, lambda r: [("in", _x(r)), ("out", np.zeros(N, np.float32)), 6]),
    "with_continue": (with_continue, lambda r: [("in", _x(r)), ("const", _counts(r)),
                                                ("out", np.zeros(N, np.float32))]),
    "nested_triangular": (nested_triangular, lambda r: [("in", _x(r)), ("const", _counts(r, 0, 5)),
                                                        ("out", np.zeros(N, np.float32))]),
    "prefix_products": (prefix_products, lambda r: [("in", _x(r)), ("out", np.zeros(N, np.float32))]),
    "if_in_loop": (if_in_loop, lambda r: [("in", _x(r)), ("const", _counts(r)), ("out", np.zeros(N, np.float32))]),
    "short_circuit": (short_circuit, lambda r: [("in", _x(r)), ("const", _counts(r)),
                                                ("out", np.zeros(N, np.float32))]),
    "bool_carried": (bool_carried, lambda r: [("in", _x(r)), ("const", _counts(r)),
                                              ("out", np.zeros(N, np.float32))]),
    "func_in_loop": (func_in_loop, lambda r: [("in", _x(r)), ("const", _counts(r)),
                                              ("out", np.zeros(N, np.float32))]),
    "two_stages": (two_stages, lambda r: [("in", _x(r)), ("const", _counts(r)), ("tmp", np.zeros(N, np.float32)),
                                          ("out", np.zeros(N, np.float32))]),
    "atomic_sum": (atomic_sum, lambda r: [("in", _x(r)), ("const", _counts(r)), ("out", np.zeros((), np.float32))]),
    "while_break_continue": (while_break_continue, lambda r: [
        ("in", np.abs(_x(r))), ("const", _counts(r)), ("out", np.zeros(N, np.float32)),
        ("out", np.zeros(N, np.float32))]),
    "two_inputs_mixed_ops": (two_inputs_mixed_ops, lambda r: [
        ("in", _x(r)), ("in", _x(r)), ("const", _counts(r, 0, 4)), ("out", np.zeros(N, np.float32))]),
    "while_in_for": (while_in_for, lambda r: [("in", _x(r)), ("out", np.zeros(N, np.float32)), 5]),
}


# ---- 16. gather and scatter with data-dependent indices, tuple assignment in a dynamic loop ---------------
@sp.kernel
def gather_scatter(x: sp.Array, c: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        p, q = x[c[i] % x.shape[0]], x[i]
        for k in range(c[i]):
            p, q = q, p * 0.5 + q * sp.cos(p) * 0.5
        y[(i * 7) % y.shape[0]] += p * q


# ---- 17. a serial (single-thread) top-level statement after a parallel loop, with a stepped loop -----------
@sp.kernel
def serial_tail(x: sp.Array, c: sp.Array, y: sp.Array, s: sp.Array):
    for i in range(x.shape[0]):
        acc = x[i]
        for k in range(c[i] % 4, 9, 2):
            acc = acc * 0.8 + sp.sin(acc + float(k))
        y[i] = acc
    if y.shape[0] > 0:   # one serial task: the `for j` inside runs in a single thread
        t = 0.0
        for j in range(y.shape[0]):
            if y[j] > 0.0:
                t = t + y[j] * y[j]
            else:
                t = t - y[j] * 0.5
        s[None] = t


CASES.update({
    "gather_scatter": (gather_scatter, lambda r: [("in", _x(r)), ("const", _counts(r, 0, 50)),
                                                  ("out", np.zeros(N, np.float32))]),
    "serial_tail": (serial_tail, lambda r: [("in", _x(r)), ("const", _counts(r)), ("tmp", np.zeros(N, np.float32)),
                                            ("out", np.zeros((), np.float32))]),
})


# ---- 18. a 2-D parallel loop, an unrolled static loop, a conditional expression ------------------------
@sp.kernel
def grid_static(x: sp.Array, c: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(x.shape[0], 3):
        p = x[i] * float(j + 1) * 0.5
        for s in sp.static(range(3)):
            p = p * 0.9 + sp.cos(p) * 0.1 * float(s)
        for k in range(c[i] % 4):
            p = p * 1.1 if p < 1.0 else sp.sqrt(sp.abs(p) + 0.1)
        y[i, j] = p


CASES["grid_static"] = (grid_static, lambda r: [("in", _x(r)), ("const", _counts(r)),
                                                ("out", np.zeros((N, 3), np.float32))])

"""`@sp.func` returns anywhere (if/elif/else, for and while loops, sp.static loops, nested funcs, vectors) and
keyword arguments (kernels, k.grad, k.fwd, Tape, FwdMode, funcs, with Python's errors). Values are checked
against float64 numpy references, gradients in both modes against central finite differences."""
import inspect
import linecache
import math

import numpy as np
import pytest

import spvad as sp

from adcheck import N, assert_close, case_table, check_grad, finite_differences, rand, reference, zeros

CASES, case = case_table()


# ---- funcs with early returns, and their kernels ---------------------------------------------------------
@sp.func
def piecewise(v, w):
    if v > 0.5:
        return v * w
    elif v < -0.5:
        return sp.sin(v) + w
    else:
        t = v * v
    return t * w + v


def piecewise_ref(v, w):
    if v > 0.5:
        return v * w
    if v < -0.5:
        return math.sin(v) + w
    return v * v * w + v


@sp.func
def first_over(v, w, n):
    acc = v
    for k in range(n):
        acc = acc * w + 0.3
        if acc > 1.2:
            return acc * v
    return acc - v


def first_over_ref(v, w, n):
    acc = v
    for _ in range(n):
        acc = acc * w + 0.3
        if acc > 1.2:
            return acc * v
    return acc - v


@sp.func
def while_return(v, w, n):
    k = 0
    s = v
    while k < n:
        s = sp.sin(s) * w + v
        if s < -0.4:
            return s * s
        k += 1
    return s


def while_return_ref(v, w, n):
    s = v
    for _ in range(n):
        s = math.sin(s) * w + v
        if s < -0.4:
            return s * s
    return s


@sp.func
def nested_loops(v, w, n, m):
    acc = 0.0
    for a in range(n):
        for b in range(m):
            acc = acc + v * w * (a + 1) - b * 0.1 * v
            if acc > 0.9:
                return acc * w
        acc = acc * 0.5
    return -acc


nested_loops_ref = nested_loops.fn   # plain arithmetic: the func itself, run by Python in float64


@sp.func
def nested_funcs(v, w, n):
    for k in range(n):
        u = piecewise(v + 0.2 * k, w)
        if u > 0.6:
            return first_over(u, w, n)
    return piecewise(-v, w)


def nested_funcs_ref(v, w, n):
    for k in range(n):
        u = piecewise_ref(v + 0.2 * k, w)
        if u > 0.6:
            return first_over_ref(u, w, n)
    return piecewise_ref(-v, w)


@sp.func
def static_return(v, w):
    for k in sp.static(range(3)):
        v = v * w + 0.2 * k
        if v > 0.7:
            return v
    return -v


def static_return_ref(v, w):
    for k in range(3):
        v = v * w + 0.2 * k
        if v > 0.7:
            return v
    return -v


@sp.func
def forever_until(v, w):
    s = v
    while True:   # the only way out is a return: no path falls off the end
        s = s * 1.5 + w * 0.1   # |s + 0.2 w| grows by 1.5 per iteration
        if s > 0.8 or s < -0.8:
            return s * v


def forever_until_ref(v, w):
    s = v
    while True:
        s = s * 1.5 + w * 0.1   # |s + 0.2 w| grows by 1.5 per iteration
        if s > 0.8 or s < -0.8:
            return s * v


def scalar_kernel(fn, nargs):
    """A kernel `y[i] = fn(x[i], w[i], n, m)` (the first `nargs` of those arguments)."""
    @sp.kernel
    def k(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32, m: sp.i32):
        for i in range(x.shape[0]):
            if nargs == 2:   # a compile-time constant: one branch is compiled
                y[i] = fn(x[i], w[i])
            elif nargs == 3:
                y[i] = fn(x[i], w[i], n)
            else:
                y[i] = fn(x[i], w[i], n, m)
    k.__name__ = k.name = f"{fn.__name__}_kernel"
    return k


def scalar_ref(ref, nargs):
    def run(x, w, y, n, m):
        for i in range(len(x)):
            y[i] = ref(*(x[i], w[i], n, m)[:nargs])
    return run


for _fn, _ref, _nargs in [(piecewise, piecewise_ref, 2), (first_over, first_over_ref, 3),
                          (while_return, while_return_ref, 3), (nested_loops, nested_loops_ref, 4),
                          (nested_funcs, nested_funcs_ref, 3), (static_return, static_return_ref, 2),
                          (forever_until, forever_until_ref, 2)]:
    case(_fn.__name__, scalar_kernel(_fn, _nargs), scalar_ref(_ref, _nargs),
         lambda r: [rand(r, N, 0.1, 1.5), rand(r, N, 0.3, 1.3), zeros(), 4, 3], [2], [0, 1])


@sp.func
def bend(p, w, n):
    if sp.dot(p, p) > 2.0:
        return p * w
    for k in range(n):
        if p[k] < -0.3:
            return sp.vec3(p[0] * p[1], p[1] * w, p[2] + w)
    return p + sp.vec3(w, w * w, 1.0)


def bend_ref(p, w, n):
    if p @ p > 2.0:
        return p * w
    for k in range(n):
        if p[k] < -0.3:
            return np.array([p[0] * p[1], p[1] * w, p[2] + w])
    return p + np.array([w, w * w, 1.0])


@sp.kernel
def bend_kernel(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        q = bend(sp.vec3(x[i, 0], x[i, 1], x[i, 2]), w[i], n)
        for k in sp.static(range(3)):
            y[i, k] = q[k]


def bend_kernel_ref(x, w, y, n):
    for i in range(len(x)):
        y[i] = bend_ref(x[i], w[i], n)


case("vector_returns", bend_kernel, bend_kernel_ref,
     lambda r: [rand(r, (N, 3), 0.1, 1.2), rand(r, N, 0.3, 1.3), zeros(N, 3), 3], [2], [0, 1])


@sp.func
def store_until(y, i, v, n):
    """No value: a bare `return` leaves the loop and the func."""
    for k in range(n):
        v = v * 0.9 + 0.25
        if v > 0.8:
            y[i] = v * v
            return
    y[i] = -v


@sp.kernel
def bare_return_kernel(x: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        store_until(y, i, x[i], n)


def bare_return_ref(x, y, n):
    for i in range(len(x)):
        v = x[i]
        for _ in range(n):
            v = v * 0.9 + 0.25
            if v > 0.8:
                y[i] = v * v
                break
        else:
            y[i] = -v


case("bare_return", bare_return_kernel, bare_return_ref, lambda r: [rand(r, N, 0.1, 1.0), zeros(), 3], [1], [0])


def test_cases_take_early_and_final_returns(rng):
    """The random inputs reach an early return in some threads and the final one in others (else a case
    would test less than it says)."""
    x, w = rand(rng, N, 0.1, 1.5).astype(np.float64), rand(rng, N, 0.3, 1.3).astype(np.float64)
    early = [any(acc > 1.2 for acc in accumulations(a, b, 4)) for a, b in zip(x, w)]
    assert 0 < sum(early) < N


def accumulations(v, w, n):
    """The values first_over compares, iteration by iteration."""
    acc = v
    for _ in range(n):
        acc = acc * w + 0.3
        yield acc


# ---- values and gradients (k.grad, sp.Tape, sp.FwdMode) --------------------------------------------------
@sp.kernel
def weighted_sum(y: sp.Array, s: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i] * s[i]


@pytest.mark.backends
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_reverse_gradient(name, rng):
    kernel, ref, make_args, outs, wrt = CASES[name]
    check_grad(kernel, ref, make_args(rng), outs, wrt, rng)


@pytest.mark.backends
@pytest.mark.parametrize("name", [n for n in sorted(CASES) if n != "vector_returns"])
def test_tape_gradient(name, rng):
    kernel, ref, make_args, (out,), wrt = CASES[name]
    args = make_args(rng)
    dev = [sp.from_numpy(a, needs_grad=True) if isinstance(a, np.ndarray) else a for a in args]
    seed = rand(rng, np.shape(args[out]), 0.5, 1.5)
    s, loss = sp.from_numpy(seed), sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        kernel(*dev)
        weighted_sum(dev[out], s, loss)
    for k in wrt:
        fd = finite_differences(ref, args, [out], [seed.astype(np.float64)], k)
        assert np.any(fd != 0)
        assert_close(dev[k].grad.to_numpy(), fd, 1e-4, f"Tape gradient w.r.t. argument {k} of {name}")


@pytest.mark.backends
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_mode(name, rng):
    kernel, ref, make_args, (out,), wrt = CASES[name]
    args = make_args(rng)
    for k in wrt:
        direction = rand(rng, np.shape(args[k]), 0.5, 1.5)
        dev = [sp.from_numpy(a, needs_dual=j in (k, out)) if isinstance(a, np.ndarray) else a
               for j, a in enumerate(args)]
        with sp.FwdMode(loss=dev[out], param=dev[k], seed=direction.ravel()):
            kernel(*dev)
        assert_close(dev[out].to_numpy(), reference(ref, args, [out])[0], 1e-4, f"primal of {name}")
        assert_close(dev[out].dual.to_numpy(), directional_derivative(ref, args, out, k, direction), 1e-4,
                     f"forward-mode derivative along argument {k} of {name}")


def directional_derivative(ref, args, out, k, direction, eps=1e-6):
    """(ref(args[k] + eps d) - ref(args[k] - eps d)) / 2 eps, in float64."""
    def at(h):
        a = list(args)
        a[k] = args[k].astype(np.float64) + h * direction
        return reference(ref, a, [out])[0]
    return (at(eps) - at(-eps)) / (2 * eps)


# ---- what the early returns compile to -------------------------------------------------------------------
@sp.func
def final_return_only(v, w):
    t = v * w
    return t + v


@sp.func
def tail_if_else(v, w):
    if v > 0.0:
        return v * w
    else:
        return v - w


@sp.kernel
def plain_funcs(x: sp.Array, w: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = final_return_only(x[i], w[i]) + tail_if_else(x[i], w[i])


def test_final_and_tail_returns_need_no_flag(rng):
    x, w, y = sp.from_numpy(rand(rng, N)), sp.from_numpy(rand(rng, N)), sp.ndarray(sp.f32, (N,))
    text = plain_funcs.ir(x, w, y)
    assert '"returned"' not in text and "exit_flag" not in text
    allocas = [line for line in text.splitlines() if "alloca" in line]
    assert len(allocas) == 1 and '"ret"' in allocas[0]   # the if/else's return slot, as before
    plain_funcs(x, w, y)
    xv, wv = x.to_numpy().astype(np.float64), w.to_numpy().astype(np.float64)
    assert_close(y.to_numpy(), xv * wv + xv + np.where(xv > 0, xv * wv, xv - wv), 1e-6, "plain funcs")


def test_returns_of_a_loop_leave_the_loop(rng):
    x, w, y = sp.from_numpy(rand(rng, N)), sp.from_numpy(rand(rng, N)), sp.ndarray(sp.f32, (N,))
    text = CASES["first_over"][0].ir(x, w, y, 4, 3)
    assert '"returned"' in text


# ---- results used from a path that returns nothing --------------------------------------------------------
@sp.func
def positive_part(v):
    if v > 0.0:
        return v
    v = v * 0.0


@sp.func
def bare_in_valued(v):
    if v > 0.0:
        return v
    return


@sp.kernel
def uses_positive_part(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = positive_part(x[i])


@sp.kernel
def uses_bare_in_valued(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = bare_in_valued(x[i]) * 2.0


@sp.kernel
def discards_positive_part(x: sp.Array):
    for i in range(x.shape[0]):
        positive_part(x[i])
        x[i] = x[i] + 1.0


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if line.strip() == text)


@pytest.mark.parametrize("kernel,func,text,what", [
    (uses_positive_part, positive_part, "v = v * 0.0", "its end"),
    (uses_bare_in_valued, bare_in_valued, "return", "a bare return")])
def test_value_from_a_path_returning_nothing_is_an_error(kernel, func, text, what):
    x = sp.from_numpy(np.array([1.0, -2.0], np.float32))
    with pytest.raises(sp.CompileError) as info:
        kernel(x)
    e = info.value
    assert (e.filename, e.lineno) == (__file__, _line_of(func.fn, text))
    assert e.source.strip() == text
    assert f"None from {what}" in e.message and "return a value on every path" in e.message
    assert (x.to_numpy() == [1.0, -2.0]).all()


def test_discarded_result_may_be_none():
    x = sp.from_numpy(np.array([1.0, -2.0], np.float32))
    discards_positive_part(x)
    assert (x.to_numpy() == [2.0, -1.0]).all()


# ---- keyword arguments -----------------------------------------------------------------------------------
@sp.func
def scaled(v, scale=2.0, shift=0.0):
    return v * scale + shift


@sp.func
def keyword_only(v, *, power=2):
    return v ** power


@sp.kernel
def calls_with_keywords(x: sp.Array, y: sp.Array, s: sp.f32):
    for i in range(x.shape[0]):
        y[i] = scaled(x[i]) + scaled(x[i], shift=s) + scaled(scale=s, v=x[i]) + keyword_only(x[i], power=3)


@sp.kernel
def axpy(x: sp.Array, y: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        y[i] = sp.sin(a * x[i]) + y[i]


def test_func_keywords_and_defaults(rng):
    x0 = rand(rng, N)
    x, y = sp.from_numpy(x0), sp.ndarray(sp.f32, (N,))
    calls_with_keywords(x, y, s=0.5)
    xv = x0.astype(np.float64)
    assert_close(y.to_numpy(), 2 * xv + (2 * xv + 0.5) + 0.5 * xv + xv ** 3, 1e-6, "func keywords")


def test_kernel_keywords_give_the_positional_launch(rng):
    x0, y0 = rand(rng, N), rand(rng, N)
    want = np.sin(0.7 * x0.astype(np.float64)) + y0
    for call in (lambda x, y: axpy(x, y, 0.7), lambda x, y: axpy(x=x, y=y, a=0.7),
                 lambda x, y: axpy(x, a=0.7, y=y), lambda x, y: axpy(a=0.7, y=y, x=x)):
        x, y = sp.from_numpy(x0), sp.from_numpy(y0)
        call(x, y)
        assert_close(y.to_numpy(), want, 1e-6, "keyword launch")
    x, y = sp.from_numpy(x0), sp.from_numpy(y0)
    for _ in range(3):   # the fast replay path, alternating positional and keyword calls
        axpy(x, y=y, a=0.7)
        axpy(x, y, 0.7)
    assert_close(y.to_numpy(), y0 + 6 * np.sin(0.7 * x0.astype(np.float64)), 1e-5, "replayed keyword launch")


@pytest.mark.backends
def test_keywords_in_grad_tape_and_fwdmode(rng):
    x0, y0 = rand(rng, N), rand(rng, N)
    dydx = 0.7 * np.cos(0.7 * x0.astype(np.float64))
    x, y = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(y0, needs_grad=True)
    y.grad.fill(1.0)
    axpy.grad(y=y, a=0.7, x=x)
    assert_close(x.grad.to_numpy(), dydx, 1e-5, "k.grad with keywords")

    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    ones = sp.from_numpy(np.ones(N, np.float32))
    x, y = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(y0, needs_grad=True)
    with sp.Tape(loss=loss):
        axpy(x, a=0.7, y=y)
        weighted_sum(s=ones, y=y, loss=loss)
    assert_close(x.grad.to_numpy(), dydx, 1e-5, "Tape with keywords")

    x, y = sp.from_numpy(x0, needs_dual=True), sp.from_numpy(y0, needs_dual=True)
    with sp.FwdMode(loss=y, param=x, seed=np.ones(N)):
        axpy(y=y, x=x, a=0.7)
    assert_close(y.dual.to_numpy(), dydx, 1e-5, "FwdMode with keywords")

    x, y = sp.from_numpy(x0, needs_dual=True), sp.from_numpy(y0, needs_dual=True)
    x.dual.fill(1.0)
    axpy.fwd(x, a=0.7, y=y)
    assert_close(y.dual.to_numpy(), dydx, 1e-5, "k.fwd with keywords")


@pytest.mark.parametrize("call,fragment", [
    (lambda x, y: axpy(x, y, 0.7, b=1), "unexpected keyword argument 'b'"),
    (lambda x, y: axpy(x, y, x=x, a=0.7), "multiple values for argument 'x'"),
    (lambda x, y: axpy(x, a=0.7), "missing argument 'y'"),
    (lambda x, y: axpy(x, a=0.7, n=1), "unexpected keyword argument 'n'"),
    (lambda x, y: axpy(x=x), "missing arguments 'y', 'a'"),
    (lambda x, y: axpy(x, y, 0.7, 1.0, a=0.7), "takes 3 arguments"),
    (lambda x, y: axpy.grad(x, y, c=0.7), "unexpected keyword argument 'c'"),
    (lambda x, y: axpy.fwd(x, a=0.7), "missing argument 'y'")])
def test_kernel_keyword_errors(call, fragment):
    x, y = sp.from_numpy(np.ones(N, np.float32)), sp.from_numpy(np.zeros(N, np.float32))
    with pytest.raises(sp.ArgumentError) as info:
        call(x, y)
    assert fragment in str(info.value) and "axpy" in str(info.value)
    assert (y.to_numpy() == 0).all()


def _bad_call(expr):
    """A kernel whose one statement calls `scaled` as `expr` says."""
    src = (f"@sp.kernel\ndef bad(x: sp.Array):\n    for i in range(x.shape[0]):\n        x[i] = {expr}\n")
    namespace = {"sp": sp, "scaled": scaled, "keyword_only": keyword_only}
    path = f"<bad call {expr}>"
    linecache.cache[path] = (len(src), None, src.splitlines(True), path)
    exec(compile(src, path, "exec"), namespace)
    return namespace["bad"], path


@pytest.mark.parametrize("expr,fragment", [
    ("scaled(x[i], factor=2.0)", "unexpected keyword argument 'factor'"),
    ("scaled(x[i], 2.0, scale=3.0)", "multiple values for argument 'scale'"),
    ("scaled(scale=3.0)", "missing 1 required argument: 'v'"),
    ("scaled(x[i], 1.0, 2.0, 3.0)", "takes 3 positional arguments, got 4"),
    ("keyword_only(x[i], 3)", "takes 1 positional arguments, got 2")])
def test_func_keyword_errors_name_the_call(expr, fragment):
    bad, path = _bad_call(expr)
    x = sp.from_numpy(np.ones(3, np.float32))
    with pytest.raises(sp.CompileError) as info:
        bad(x)
    e = info.value
    assert fragment in e.message
    assert (e.filename, e.lineno) == (path, 4) and expr in e.source

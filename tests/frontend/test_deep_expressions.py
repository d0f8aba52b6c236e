"""Long expressions: `t0 + t1 + ... ` nests one level per operator, so a sum of hundreds or thousands of terms
once went past Python's recursion limit. They compile and run, forward and in every derivative mode (k.grad,
k.fwd, sp.Tape), on both backends, and are cached on disk; nesting past what spvad compiles (an expression
10,000 levels deep, ifs and loops 128 deep) is a CompileError naming the kernel, never a RecursionError, a crash
or a compile that does not end. Kernels are generated into source files (the frontend reads their source)."""
import importlib.util
import sys
import threading
import time

import numpy as np
import pytest

import spvad as sp
from spvad import pipeline, runtime
from spvad.frontend.source import MAX_NESTING
from spvad.ir.deep_stack import call_with_deep_stack
from spvad.pipeline import DUAL, MAX_CONTROL_NESTING, PRIMAL, REVERSE

kernel_module = sys.modules["spvad.kernel"]   # `spvad.kernel` the attribute is the decorator
SIZES = [350, 2000]
THREADS = 16


def load_generated(folder, name, source):
    """The module `name` written from `source` into `folder` and imported."""
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- a sum of n terms of three kinds, with random signs and coefficients ---------------------------------------
def basis(k, x):
    """Term k's function of x (float64) and its derivative: x, x^2 (times a literal), sin x."""
    return [(x, np.ones_like(x)), (x * x, 2 * x), (np.sin(x), np.cos(x))][k % 3]


def sum_problem(n, rng):
    """(source, signs, literals): y[i] = s0 c[0] x + s1 w1 x^2 + s2 c[2] sin x + ...; c[k] an array, w_k literals."""
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    literals = rng.uniform(0.2, 1.0, n)
    terms = []
    for k in range(n):
        term = [f"c[{k}] * x[i]", f"{float(literals[k])!r} * x[i] * x[i]", f"c[{k}] * sp.sin(x[i])"][k % 3]
        terms.append(("- " if signs[k] < 0 else "+ " if k else "") + term)
    if signs[0] < 0:
        terms[0] = "-" + terms[0][2:]   # (a leading minus: unary, then the chain)
    source = (f"import spvad as sp\n\n\n@sp.kernel\ndef long_sum(x: sp.Array, c: sp.Array, y: sp.Array):\n"
              f"    for i in range(x.shape[0]):\n        y[i] = {' '.join(terms)}\n\n\n"
              "@sp.kernel\ndef weighted(y: sp.Array, w: sp.Array, loss: sp.Array):\n"
              "    for i in range(y.shape[0]):\n        loss[None] += w[i] * y[i]\n")
    return source, signs, literals


def sum_reference(x, c, signs, literals):
    """(y, dy/dx, dy/dc[k] per thread and k, scale of y's rounding) in float64."""
    n = len(signs)
    y, dydx, dydc = np.zeros_like(x), np.zeros_like(x), np.zeros((len(x), n))
    scale = np.zeros_like(x)
    for k in range(n):
        f, df = basis(k, x)
        coef = literals[k] if k % 3 == 1 else c[k]
        y += signs[k] * coef * f
        dydx += signs[k] * coef * df
        scale += np.abs(coef * f)
        if k % 3 != 1:
            dydc[:, k] = signs[k] * f
    return y, dydx, dydc, scale


@pytest.fixture(scope="module")
def sums(tmp_path_factory):
    """n -> (module, signs, literals), generated once for both backends."""
    folder, rng, out = tmp_path_factory.mktemp("deep"), np.random.default_rng(38), {}
    for n in SIZES:
        source, signs, literals = sum_problem(n, rng)
        out[n] = (load_generated(folder, f"long_sum_{n}", source), signs, literals)
    return out


def close(got, want, scale, what):
    """f32 sums of n terms: errors grow with the sum of the terms' magnitudes, not with the result."""
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= 2e-6 * scale + 1e-6), f"{what}: worst error {err.max():.3g} (scale {scale.max():.3g})"


def sum_inputs(n, rng):
    x = rng.uniform(-1.0, 1.0, THREADS)
    c = rng.uniform(-1.0, 1.0, n)
    return x, c, sp.from_numpy(x.astype(np.float32), needs_grad=True, needs_dual=True), \
        sp.from_numpy(c.astype(np.float32), needs_grad=True, needs_dual=True), \
        sp.ndarray(sp.f32, (THREADS,), needs_grad=True, needs_dual=True)


def check_every_mode(sums, n, rng):
    """Forward, k.grad, k.fwd and sp.Tape of the n-term sum against float64."""
    module, signs, literals = sums[n]
    k = module.long_sum
    xv, cv, x, c, y = sum_inputs(n, rng)
    want, dydx, dydc, scale = sum_reference(xv, cv, signs, literals)
    k(x, c, y)
    close(y.to_numpy(), want, scale, "y")

    g = rng.uniform(-1.0, 1.0, THREADS)   # k.grad: the adjoint of y seeded by hand
    y.grad.from_numpy(g.astype(np.float32))
    k.grad(x, c, y)
    close(x.grad.to_numpy(), g * dydx, np.abs(g) * scale, "x.grad (k.grad)")
    close(c.grad.to_numpy(), g @ dydc, np.abs(g) @ np.abs(dydc) + 1e-6, "c.grad (k.grad)")

    dx, dc = rng.uniform(-1.0, 1.0, THREADS), rng.uniform(-1.0, 1.0, n)   # k.fwd: directional derivative
    x.dual.from_numpy(dx.astype(np.float32))
    c.dual.from_numpy(dc.astype(np.float32))
    k.fwd(x, c, y)
    close(y.dual.to_numpy(), dydx * dx + dydc @ dc, scale + np.abs(dydc) @ np.abs(dc), "y.dual (k.fwd)")

    w = sp.from_numpy(g.astype(np.float32))   # sp.Tape: loss = sum(w * y)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    x.grad.fill(0.0)
    c.grad.fill(0.0)
    with sp.Tape(loss):
        k(x, c, y)
        module.weighted(y, w, loss)
    close(loss.to_numpy(), g @ want, np.abs(g) @ scale, "loss")
    close(x.grad.to_numpy(), g * dydx, np.abs(g) * scale, "x.grad (Tape)")
    close(c.grad.to_numpy(), g @ dydc, np.abs(g) @ np.abs(dydc) + 1e-6, "c.grad (Tape)")


@pytest.mark.backends
def test_a_sum_of_350_terms_runs_and_differentiates_in_every_mode(sums, rng):
    check_every_mode(sums, 350, rng)


@pytest.mark.parametrize("backend", ["interp"])
def test_a_sum_of_2000_terms_runs_and_differentiates_in_every_mode(backend, sums, rng):
    """On the interpreter: lavapipe takes minutes to compile these shaders (15 s the forward one alone), so on
    Vulkan the next test lowers every mode and spirv-val checks it, without running."""
    check_every_mode(sums, 2000, rng)


def test_a_sum_of_2000_terms_lowers_to_valid_spirv_in_every_mode(sums, rng):
    k = sums[2000][0].long_sum
    specs = k._bind(sum_inputs(2000, rng)[2:])[0]
    assert runtime.get().validate_spirv   # (under pytest): every module went through spirv-val
    for mode in (PRIMAL, REVERSE, DUAL):
        ck = k._compiled(specs, mode)
        assert ck.tasks and all(t.lowered.spirv for t in ck.tasks)


@pytest.mark.backends
def test_a_sum_of_350_named_terms(tmp_path, rng):
    """a0 + a1 + ... + a349, each a local of its own."""
    n = 350
    lines = [f"        a{k} = {'x[i] * c[k]' if k % 2 == 0 else 'sp.cos(x[i]) * c[k]'}".replace("[k]", f"[{k}]")
             for k in range(n)]
    source = ("import spvad as sp\n\n\n@sp.kernel\ndef named(x: sp.Array, c: sp.Array, y: sp.Array):\n"
              "    for i in range(x.shape[0]):\n" + "\n".join(lines) + "\n"
              f"        y[i] = {' + '.join(f'a{k}' for k in range(n))}\n")
    k = load_generated(tmp_path, "named_terms", source).named
    xv, cv, x, c, y = sum_inputs(n, rng)
    k(x, c, y)
    even, odd = cv[0::2].sum(), cv[1::2].sum()
    scale = np.abs(cv).sum() * np.ones(THREADS)
    close(y.to_numpy(), xv * even + np.cos(xv) * odd, scale, "y")
    y.grad.fill(1.0)
    k.grad(x, c, y)
    close(x.grad.to_numpy(), even - np.sin(xv) * odd, scale, "x.grad")
    want_c = np.where(np.arange(n) % 2 == 0, xv.sum(), np.cos(xv).sum())
    close(c.grad.to_numpy(), want_c, np.full(n, THREADS), "c.grad")


@pytest.mark.parametrize("n", SIZES)
def test_a_long_sum_is_cached_on_disk(sums, n, rng, monkeypatch):
    """The compile cache stores the IR of the kernel and its gradient (its format walks it in a loop) and
    loads them; the 350-term one runs from there (lavapipe compiles the other for minutes)."""
    module, signs, literals = sums[n]
    k = module.long_sum
    xv, cv, x, c, y = sum_inputs(n, rng)
    specs = k._bind((x, c, y))[0]
    compiled = [k._compiled(specs, mode) for mode in (PRIMAL, REVERSE)]
    k._cache.clear()   # as in a fresh process

    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the disk cache holds this kernel")
    monkeypatch.setattr(kernel_module, "compile_kernel", refuse)
    loaded = [k._compiled(specs, mode) for mode in (PRIMAL, REVERSE)]
    assert all(a is not b for a, b in zip(compiled, loaded))
    assert [t.lowered.spirv for ck in loaded for t in ck.tasks] == \
        [t.lowered.spirv for ck in compiled for t in ck.tasks]
    if n == 350:
        k(x, c, y)
        want, _, _, scale = sum_reference(xv, cv, signs, literals)
        close(y.to_numpy(), want, scale, "y (loaded from disk)")


MINUSES = ("import spvad as sp\n\n\n@sp.kernel\ndef minuses(x: sp.Array, y: sp.Array):\n"
           f"    for i in range(x.shape[0]):\n        y[i] = {'-' * 2001}x[i] * x[i]\n")


@pytest.mark.backends
def test_a_chain_of_2000_unary_minuses(tmp_path, rng):
    """`- - - ... x` nests one call of the frontend per operator: compiled on a deep stack (ir/deep_stack.py)."""
    k = load_generated(tmp_path, "minuses", MINUSES).minuses
    xv = rng.uniform(-1.0, 1.0, THREADS)
    x, y = sp.from_numpy(xv.astype(np.float32), needs_grad=True), sp.ndarray(sp.f32, (THREADS,), needs_grad=True)
    k(x, y)
    np.testing.assert_allclose(y.to_numpy(), -xv * xv, rtol=1e-6)
    y.grad.fill(1.0)
    k.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), -2 * xv, rtol=1e-6)


def test_deep_code_compiles_on_a_thread_with_a_small_stack(sums, tmp_path, rng, monkeypatch):
    """A thread's stack (256 KiB here) never decides: the unary chain passes the recursion limit there and
    compiles again on a deep stack; the long sum needs no recursion."""
    deep_calls = []
    monkeypatch.setattr(pipeline, "call_with_deep_stack",
                        lambda fn, *args: deep_calls.append(fn) or call_with_deep_stack(fn, *args))
    minuses = load_generated(tmp_path, "minuses", MINUSES).minuses
    k = sums[2000][0].long_sum
    jobs = [(k, k._bind(sum_inputs(2000, rng)[2:])[0]),
            (minuses, minuses._bind((sp.ndarray(sp.f32, (4,), needs_grad=True),) * 2)[0])]
    out, go = {}, threading.Event()

    def run():
        go.wait()   # (once the stack size for new threads is put back: the deep stack's thread reads it)
        try:
            out["compiled"] = [kernel._compiled(specs, mode) for kernel, specs in jobs for mode in (PRIMAL, REVERSE)]
        except BaseException as e:
            out["error"] = e

    limit, size = sys.getrecursionlimit(), threading.stack_size(256 << 10)
    try:
        thread = threading.Thread(target=run)
        thread.start()
    finally:
        threading.stack_size(size)
        go.set()
    thread.join()
    assert "compiled" in out, out.get("error")
    assert [fn.__name__ for fn in deep_calls] == ["_compile_kernel"] * 2   # the chain's primal and gradient
    assert sys.getrecursionlimit() == limit and threading.stack_size() == size   # both put back


# ---- too deep: a CompileError --------------------------------------------------------------------------------
def test_an_expression_of_100000_terms_is_a_compile_error(tmp_path):
    n = 100_000
    source = ("import spvad as sp\n\n\n@sp.kernel\ndef huge(x: sp.Array, y: sp.Array):\n"
              f"    for i in range(x.shape[0]):\n        y[i] = {' + '.join(['x[i]'] * n)}\n")
    # (Python compiles it only past its own recursion limit: on a deep stack too)
    k = call_with_deep_stack(load_generated, tmp_path, "huge", source).huge
    x, y = sp.from_numpy(np.ones(4, np.float32)), sp.ndarray(sp.f32, (4,))
    start, limit = time.monotonic(), sys.getrecursionlimit()
    with pytest.raises(sp.CompileError, match=rf"huge\.py:7: huge: an expression here is nested too deeply "
                                              rf"\(100,00\d levels; spvad compiles at most {MAX_NESTING:,}\)") as err:
        k(x, y)
    assert time.monotonic() - start < 30
    assert len(str(err.value)) < 600   # the line is cut short, not printed whole
    assert sys.getrecursionlimit() == limit   # put back


def test_ifs_nested_too_deeply_are_a_compile_error(tmp_path):
    n = MAX_CONTROL_NESTING + 40
    chain = " ".join(f"x[i] * {k}.0 if x[i] > {k}.5 else" for k in range(n))
    source = ("import spvad as sp\n\n\n@sp.kernel\ndef piecewise(x: sp.Array, y: sp.Array):\n"
              f"    for i in range(x.shape[0]):\n        y[i] = {chain} x[i]\n")
    k = load_generated(tmp_path, "piecewise", source).piecewise
    x, y = sp.from_numpy(np.ones(4, np.float32), needs_grad=True), sp.ndarray(sp.f32, (4,), needs_grad=True)
    for launch in (lambda: k(x, y), lambda: k.grad(x, y)):
        with pytest.raises(sp.CompileError, match=r"piecewise\.py:7: kernel piecewise: ifs and loops nested too "
                                                  r"deeply \(more than 128 levels"):
            launch()

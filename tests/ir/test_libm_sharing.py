"""Expansions of one operand share work (spvad/ir/libm/expand.py, trig.py): sin, cos and tan of one x reuse one range
reduction and one pair of polynomials where the first expansion dominates the others (same block earlier, or an
enclosing block), with exactly the bits each gives alone, on the interpreter's rows, on Vulkan and on the
interpreter backend; kernels and gradients that use them against float64 numpy."""
import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.frontend import ArraySpec
from spvad.ir import nodes as N
from spvad.ir import verify
from spvad.ir.libm.vector_eval import evaluate, evaluate_built, expansion_stmts
from spvad.ir.ops import Op

TRIG = (Op.SIN, Op.COS, Op.TAN)


def operands(dt, rng, n=1 << 13):
    """Random bit patterns (NaN, infinities, subnormals, huge), moderate and small arguments, never all zeros."""
    uint = np.uint32 if dt == T.f32 else np.uint64
    bits = rng.integers(0, np.iinfo(uint).max, n, dtype=uint, endpoint=True).view(dt.np)
    return np.concatenate([bits, rng.uniform(-2e4, 2e4, n).astype(dt.np), rng.uniform(-4, 4, n).astype(dt.np)])


def same_bits(a, b):
    """Bit for bit, any NaN equal to any NaN (SPIR-V leaves a computed NaN's payload open)."""
    return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(
        np.where(np.isnan(a), 0, a).view(f"u{a.itemsize}"), np.where(np.isnan(b), 0, b).view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("first", TRIG, ids=lambda op: op.value)
@pytest.mark.parametrize("op", TRIG, ids=lambda op: op.value)
def test_shared_expansion_gives_the_bits_alone(op, first, dtype):
    x = operands(dtype, np.random.default_rng(7))
    alone = evaluate(op, dtype, x)
    after = evaluate_built(lambda e, p: (e.compute(first, p), e.compute(op, p))[1], dtype, x)
    assert same_bits(alone, after)


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
def test_sin_and_cos_of_one_operand_cost_one_reduction(dtype):
    def count(build):
        return sum(isinstance(s, N.Compute) for s in expansion_stmts(build, dtype, 1)[1])
    sin = count(lambda e, p: e.compute(Op.SIN, p))
    both = count(lambda e, p: e.compute(Op.ADD, e.compute(Op.SIN, p), e.compute(Op.COS, p)))
    all3 = count(lambda e, p: [e.compute(op, p) for op in TRIG][-1])
    assert both <= sin + 12, (sin, both)    # a quadrant swap and the finishing steps, not a second reduction
    assert all3 <= sin + 60, (sin, all3)    # tan: its double-word quotient on the shared polynomials


@sp.kernel
def blocks(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        v = x[i]
        s = 0.0
        if v > 0.0:
            s = sp.sin(v)        # inside a branch: it does not dominate the cos below, which reduces again
        c = sp.cos(v)
        t = 0.0
        for _ in range(2):
            t += sp.tan(v)       # in a loop after the cos: served by it
        y[i] = s + c + t


def rounds(kernel, specs, mode):
    """How many range reductions a compiled kernel's IR computes (f64's Cody-Waite rounds once per reduction,
    f32's takes two Op.MUL_HI); the IR is verified first (a reused statement must dominate its uses)."""
    ir = kernel._compiled(specs, mode).ir
    verify.verify(ir)
    ops = [s.op for t in ir.tasks for s in N.walk(t.body) if isinstance(s, N.Compute)]
    return ops.count(Op.ROUND) + ops.count(Op.MUL_HI) // 2


@pytest.mark.backends
def test_reuse_respects_the_blocks():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.4, 1.4, 512).astype(np.float32)
    y = sp.ndarray(sp.f32, x.shape)
    blocks(sp.from_numpy(x), y)
    xd = x.astype(np.float64)
    want = np.where(xd > 0, np.sin(xd), 0.0) + np.cos(xd) + 2 * np.tan(xd)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=2e-6, atol=2e-6)
    assert rounds(blocks, [ArraySpec(T.f32, 1), ArraySpec(T.f32, 1)], "primal") == 2


@sp.kernel
def integrate(x: sp.Array, w: sp.Array, y: sp.Array, steps: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(steps):
            v = v + 0.25 * sp.sin(v) * w[i]
        y[i] = v


@pytest.mark.backends
def test_integrator_gradient_shares_sin_and_cos():
    """The reverse sweep needs sin(v) and cos(v) of each step's v: one reduction each step."""
    rng = np.random.default_rng(5)
    n, steps = 128, 6
    xs, ws = rng.uniform(-3, 3, n).astype(np.float32), rng.uniform(0.5, 1.5, n).astype(np.float32)
    x, w = sp.from_numpy(xs, needs_grad=True), sp.from_numpy(ws, needs_grad=True)
    y = sp.ndarray(sp.f32, (n,), needs_grad=True)
    integrate(x, w, y, steps)
    y.grad.fill(1.0)
    integrate.grad(x, w, y, steps)
    v, dx, dw, wd = xs.astype(np.float64), np.ones(n), np.zeros(n), ws.astype(np.float64)
    for _ in range(steps):   # forward-mode closed form in float64
        s, c = np.sin(v), np.cos(v)
        dx, dw = dx + 0.25 * c * wd * dx, dw + 0.25 * (c * wd * dw + s)
        v = v + 0.25 * s * wd
    np.testing.assert_allclose(y.to_numpy(), v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.grad.to_numpy(), dw, rtol=1e-4, atol=1e-5)
    specs = [ArraySpec(T.f32, 1, needs_grad=True)] * 3 + [T.i32]
    assert rounds(integrate, specs, "reverse") == 1


@sp.kernel
def sin_cos_tan(x: sp.Array, s: sp.Array, c: sp.Array, t: sp.Array):
    for i in range(x.shape[0]):
        s[i] = sp.sin(x[i])
        c[i] = sp.cos(x[i])
        t[i] = sp.tan(x[i])


@sp.kernel
def sin_alone(x: sp.Array, s: sp.Array):
    for i in range(x.shape[0]):
        s[i] = sp.sin(x[i])


@sp.kernel
def cos_alone(x: sp.Array, c: sp.Array):
    for i in range(x.shape[0]):
        c[i] = sp.cos(x[i])


@sp.kernel
def tan_alone(x: sp.Array, t: sp.Array):
    for i in range(x.shape[0]):
        t[i] = sp.tan(x[i])


@pytest.mark.backends
@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
def test_kernel_bits_shared_and_alone(dtype):
    x = operands(dtype, np.random.default_rng(11), n=1 << 7)   # the interpreter runs a thread at a time
    xa = sp.from_numpy(x)
    outs = [sp.ndarray(dtype, x.shape) for _ in range(3)]
    sin_cos_tan(xa, *outs)
    for kernel, out, op in zip((sin_alone, cos_alone, tan_alone), outs, TRIG):
        alone = sp.ndarray(dtype, x.shape)
        kernel(xa, alone)
        assert same_bits(out.to_numpy(), alone.to_numpy()), op
        assert same_bits(out.to_numpy(), evaluate(op, dtype, x)), op

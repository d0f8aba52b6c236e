"""The trig family of the math library (spvad/ir/libm/trig.py): errors in ulps against mpmath over dense samples of
the whole domain (tiny, subnormal, huge, near multiples of pi/2, near the reductions' seams), the IEEE/numpy
values at zeros, infinities and NaN, and the same bits from the interpreter's rows, from Vulkan and from the
interpreter backend running kernels. Samples are evaluated by libm.vector_eval (the interpreter's rows over
numpy arrays), itself checked here bit for bit against scalar_ops.eval_op.
"""
import math

import numpy as np
import pytest

import spvad as sp
from libm_reference import GOAL, REFERENCE, samples, ulp_errors
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.libm.vector_eval import evaluate, expansion_stmts
from spvad.ir.ops import Op
from spvad.ir.scalar_ops import eval_op


def interpret(op, dtype, *inputs):
    """`op`'s expansion through the interpreter's rows (scalar_ops.eval_op), one point at a time."""
    params, stmts, out = expansion_stmts(lambda e, *p: e.compute(op, *p), dtype, len(inputs))
    result = []
    for point in zip(*inputs):
        vals = {a: dtype.np.type(v) for a, v in zip(params, point)}
        for s in stmts:
            assert isinstance(s, (N.Const, N.Compute)), s   # an expansion places Const and Compute only
            vals[s] = (s.dtype.np.type(s.value) if isinstance(s, N.Const)
                       else eval_op(s.op, s.dtype, [vals[a] for a in s.args]))
        result.append(vals[out])
    return np.array(result, dtype=dtype.np)


TRIG = ("sin", "cos", "tan", "asin", "acos", "atan", "atan2")
TRIG_OPS = {REFERENCE[name][0] for name in TRIG}


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("name", TRIG)
def test_ulps_against_mpmath(name, dtype):
    """tests/libm_reference.py's dense samples (near multiples of pi/2 and the closest f32 and f64 to them, the
    reductions' seams, atan's bucket edges, tiny to huge, subnormal) and special values."""
    args = samples(name, dtype, 600, np.random.default_rng(7))
    got = evaluate(REFERENCE[name][0], dtype, *args)
    errors = ulp_errors(name, dtype, args, got)
    k = int(np.argmax(errors))
    assert errors[k] <= GOAL[dtype], f"{name} {dtype}: {errors[k]:.2f} ulp at {[a[k] for a in args]} -> {got[k]!r}"


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
def test_edge_values(dtype):
    """IEEE/C99 values, and atan2 = numpy's arctan2 bit for bit at every zero, infinity and NaN pairing."""
    t = dtype.np.type
    inf, nan = np.inf, np.nan
    specials = np.array([0.0, -0.0, inf, -inf, nan], dtype=dtype.np)
    for fn in (Op.SIN, Op.TAN, Op.ASIN, Op.ATAN):   # odd: -0.0 -> -0.0
        got = evaluate(fn, dtype, specials)
        assert got[0] == 0 and not np.signbit(got[0]) and got[1] == 0 and np.signbit(got[1]), fn
        assert np.isnan(got[4])
    assert np.all(np.isnan(evaluate(Op.SIN, dtype, specials[2:])))
    assert np.all(np.isnan(evaluate(Op.COS, dtype, specials[2:])))
    assert list(evaluate(Op.COS, dtype, specials[:2])) == [1, 1]
    assert list(evaluate(Op.ATAN, dtype, specials[2:4])) == [t(math.pi / 2), t(-math.pi / 2)]
    ends = np.array([1.0, -1.0, 1.5, -2.0, inf], dtype=dtype.np)
    assert list(evaluate(Op.ASIN, dtype, ends)[:2]) == [t(math.pi / 2), t(-math.pi / 2)]
    assert list(evaluate(Op.ACOS, dtype, ends)[:2]) == [0, t(math.pi)]
    assert np.all(np.isnan(evaluate(Op.ASIN, dtype, ends[2:]))) and np.all(np.isnan(evaluate(Op.ACOS, dtype, ends[2:])))
    assert evaluate(Op.ACOS, dtype, specials[:2]).tolist() == [t(math.pi / 2)] * 2
    values = np.array([0.0, -0.0, inf, -inf, nan, 1.0, -2.5, 1e-30], dtype=dtype.np)
    y, x = (a.ravel() for a in np.meshgrid(values, values))
    got = evaluate(Op.ATAN2, dtype, y, x)
    with np.errstate(all="ignore"):
        want = np.arctan2(y, x)
    bits = f"u{dtype.np.itemsize}"
    special = ~(np.isfinite(y) & np.isfinite(x) & (y != 0) & (x != 0)) & ~np.isnan(want)
    assert np.array_equal(got[special].view(bits), want[special].view(bits)), \
        [(a, b, g, w) for a, b, g, w in zip(y[special], x[special], got[special], want[special]) if g != w]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(got[~special], want[~special], rtol=4e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("name", TRIG)
def test_vectorised_twin_is_the_interpreter(name, dtype):
    """vector_eval (used for the dense sweeps) gives the interpreter's bits: the same rows, scalar by scalar."""
    args = [a[::24] for a in samples(name, dtype, 200, np.random.default_rng(3))]
    op = REFERENCE[name][0]
    assert_same_bits(evaluate(op, dtype, *args), interpret(op, dtype, *args), name, args[0])


def _kernels():
    @sp.kernel
    def unary(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i, 0] = sp.sin(x[i])
            y[i, 1] = sp.cos(x[i])
            y[i, 2] = sp.tan(x[i])
            y[i, 3] = sp.asin(x[i])
            y[i, 4] = sp.acos(x[i])
            y[i, 5] = sp.atan(x[i])
            y[i, 6] = sp.atan2(x[i], x[x.shape[0] - 1 - i])
    return unary


@pytest.mark.backends
@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
def test_kernels_give_the_expansions_bits(dtype):
    """sp.sin ... sp.atan2 in a kernel: on Vulkan and on the interpreter backend, the expansions' exact bits."""
    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.uniform(-2, 2, 80), np.exp2(rng.uniform(-140, 120, 80)) * rng.choice([-1, 1], 80),
                         [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5]]).astype(dtype.np)
    y = sp.ndarray(dtype, (len(xs), 7))
    _kernels()(sp.from_numpy(xs), y)
    got = y.to_numpy()
    for col, fn in enumerate((Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN)):
        assert_same_bits(got[:, col], evaluate(fn, dtype, xs), fn, xs)
    assert_same_bits(got[:, 6], evaluate(Op.ATAN2, dtype, xs, xs[::-1]), "atan2", xs)


def assert_same_bits(got, want, what, xs):
    """Bit for bit, NaN as NaN (a NaN's sign and payload mean nothing)."""
    nan = np.isnan(want)
    same = (got.tobytes() == want.tobytes()) or (np.array_equal(np.isnan(got), nan)
                                                  and got[~nan].tobytes() == want[~nan].tobytes())
    assert same, (what, [(v, p, q) for v, p, q in zip(xs, got, want) if p.tobytes() != q.tobytes()][:5])


@pytest.mark.parametrize("dtype", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("name", TRIG)
def test_one_float_dtype(name, dtype):
    """The Op is expanded (no driver function left), f64 is never computed in f32, and f32 never needs f64 (a
    device may lack it): every float the expansion places is of the argument's dtype."""
    op, arity, _ = REFERENCE[name]
    _, stmts, _ = expansion_stmts(lambda e, *p: e.compute(op, *p), dtype, arity)
    assert not [s for s in stmts if isinstance(s, N.Compute) and s.op in TRIG_OPS]
    assert {s.dtype for s in stmts if s.dtype.is_float} == {dtype}


def test_two_over_pi_words_against_mpmath():
    """The eight words of 2/pi f32's reduction selects from hold its bits as mpmath computes them: word j the 32
    bits from 2^-(32 (j - 1)) on, zero before the binary point."""
    import mpmath
    from spvad.ir.libm.trig_f32 import WORDS
    with mpmath.workprec(400):
        frac = int(mpmath.floor(2 / mpmath.pi * mpmath.mpf(2) ** 300))   # 2/pi's first 300 fraction bits
    for j, word in enumerate(WORDS):
        first = 32 * (j - 1)
        want = sum(((frac >> (300 - b)) & 1) << (first + 31 - b) for b in range(max(first, 1), first + 32))
        assert word == want, (j, hex(word), hex(want))
    assert WORDS[:2] == (0, 0x517CC1B7)


def test_mul_hi_against_python_integers():
    rng = np.random.default_rng(11)
    for a, b in zip(rng.integers(0, 2 ** 32, 200, dtype=np.uint64), rng.integers(0, 2 ** 32, 200, dtype=np.uint64)):
        assert eval_op(Op.MUL_HI, T.u32, [np.uint32(a), np.uint32(b)]) == (int(a) * int(b)) >> 32

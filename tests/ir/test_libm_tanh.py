"""f32 tanh (ir/libm/hyperbolic.py, _tanh_f32) is one short formula, so that issue #36's elementwise tanh runs within
1.10x of the driver's on lavapipe, which pays for both sides of every select: its statements counted, its error
over every f32 of slices of each binade against float64 numpy, its special values bit for bit."""
import numpy as np
import pytest

from libm_reference import GOAL
from spvad import types as T
from spvad.ir import nodes as N
from spvad.ir.libm.vector_eval import evaluate, expansion_stmts
from spvad.ir.ops import Op

CHUNK = 1 << 18   # floats per vector_eval call (it keeps every intermediate array)


def computes(dtype):
    _, stmts, _ = expansion_stmts(lambda e, x: e.compute(Op.TANH, x), dtype, 1)
    return [s for s in stmts if isinstance(s, N.Compute)]


def test_f32_tanh_is_one_short_formula():
    stmts = computes(T.f32)
    assert len(stmts) <= 40, len(stmts)   # (35; the odd polynomial beside fdlibm's expm1 was 143)
    assert sum(s.op == Op.DIV for s in stmts) == 1
    assert {s.dtype for s in stmts if s.dtype.is_float} == {T.f32}   # f32 never needs f64


def f32_range(lo, hi):
    """Every f32 from `lo` up to (not including) `hi`, both positive."""
    a, b = np.array([lo, hi], np.float32).view(np.int32)
    return np.arange(a, b, dtype=np.int32).view(np.float32)


def top_of_each_binade():
    """The highest CHUNK floats of each binade from 2^-12 (below it tanh is x) to 8, where the result's ulp is
    smallest against its value (the worst relative rounding), and every float from 8 to 9.2 (the clamp at 9.1)."""
    tops = [f32_range(np.nextafter(np.float32(2.0 ** (k + 1)), np.float32(0), dtype=np.float32) -
                      np.float32(2.0 ** (k - 23) * (CHUNK - 1)), 2.0 ** (k + 1)) for k in range(-12, 3)]
    return np.concatenate(tops + [f32_range(8.0, 9.2)])


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
def test_f32_tanh_within_the_goal_over_every_float_of_slices(sign):
    x = np.float32(sign) * top_of_each_binade()
    worst = 0.0
    for k in range(0, len(x), CHUNK):
        xs = x[k:k + CHUNK]
        got = evaluate(Op.TANH, T.f32, xs).astype(np.float64)
        want = np.tanh(xs.astype(np.float64)).astype(np.float32)   # correctly rounded but for rare double roundings
        err = np.abs(got - want) / np.spacing(np.abs(want)).astype(np.float64)
        worst = max(worst, float(err.max()))
        assert err.max() <= GOAL[T.f32], (xs[np.argmax(err)], err.max())
    assert worst >= 1.0   # (the slices do reach the rounding: a test that could not fail would not)


def test_f32_tanh_special_values_bit_for_bit():
    tiny, sub, big = np.float32(2.0 ** -12) * np.float32(0.999), np.float32(2.0 ** -149), np.finfo(np.float32).max
    x = np.array([0.0, -0.0, np.inf, -np.inf, sub, -sub, tiny, -tiny, 1e-38, big, -big, 9.1, -9.1, 20.0], np.float32)
    want = np.array([0.0, -0.0, 1.0, -1.0, sub, -sub, tiny, -tiny, 1e-38, 1.0, -1.0, 1.0, -1.0, 1.0], np.float32)
    got = evaluate(Op.TANH, T.f32, x)
    assert got.tobytes() == want.tobytes(), [(a, b, c) for a, b, c in zip(x, got, want) if b.tobytes() != c.tobytes()]
    assert np.isnan(evaluate(Op.TANH, T.f32, np.array([np.nan, -np.nan], np.float32))).all()

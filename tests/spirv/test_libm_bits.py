"""The math library runs the same algorithm everywhere: each expansion (ir/libm/) gives the same bits on the Vulkan
device (lavapipe) as libm.vector_eval, on random bit patterns (NaNs and subnormals included), dense samples and
edge values (any NaN equals any NaN: SPIR-V leaves a computed NaN's payload open), and the interpreter backend
agrees with both; its steps keep NoContraction under fast_math=True. native_math=True is the driver's own
functions. (benchmarks/libm_bits.py: the 1M-point check.)"""
import numpy as np
import pytest

import spvad as sp
from libm_reference import samples
from spvad import types as T
from spvad.ir.libm import EXPANSIONS
from spvad.ir.libm.vector_eval import evaluate
from spvad.ir.ops import ARITY, Op

from elementwise import call_of, elementwise

N_RANDOM = 1 << 15   # random bit patterns per function and dtype, and as many dense samples (64k points in all)
OPS = sorted(EXPANSIONS, key=lambda op: op.value)


def arity(op):
    return ARITY[op]


def points(op, dt, n, rng):
    """Operand arrays: random bit patterns, then the dense samples of libm_reference where it has the function."""
    uint = np.uint32 if dt == T.f32 else np.uint64
    bits = [rng.integers(0, np.iinfo(uint).max, n, dtype=uint, endpoint=True).view(dt.np) for _ in range(arity(op))]
    try:
        dense = samples(op.value, dt, n // 2, rng)
    except KeyError:   # (a function without samples there: uniform ones)
        dense = [rng.uniform(-50, 50, n).astype(dt.np) for _ in range(arity(op))]
    return [np.concatenate([b, d]) for b, d in zip(bits, dense)]


def run(op, dt, args, **options):
    kernel = elementwise(call_of(op), arity(op))[0]
    if options:
        kernel = sp.kernel(**options)(kernel.fn)
    out = sp.ndarray(dt, (len(args[0]),))
    kernel(*(sp.from_numpy(a) for a in args), out)
    return out.to_numpy()


def same_bits(a, b):
    """Bit for bit, but any NaN is a NaN: SPIR-V leaves the payload of a computed NaN to the driver."""
    uint = np.uint32 if a.dtype == np.float32 else np.uint64
    return (a.view(uint) == b.view(uint)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("dt", [T.f32, T.f64], ids=str)
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.value)
def test_device_gives_the_bits_of_the_expansion(op, dt):
    args = points(op, dt, N_RANDOM, np.random.default_rng(len(op.value) * 7 + dt.bits))
    got, want = run(op, dt, args), evaluate(op, dt, *args)
    same = same_bits(got, want)
    k = np.flatnonzero(~same)[:5]
    assert same.all(), f"{op.value} {dt}: {(~same).sum()} of {len(same)} differ, e.g. at " \
                       f"{[a[k] for a in args]}: device {got[k]}, expansion {want[k]}"


def test_interpreter_gives_the_same_bits():
    """The interpreter backend (a thread at a time, scalar_ops.EVAL) computes each expansion as vector_eval does."""
    rng = np.random.default_rng(3)
    cases = [(op, dt, [np.concatenate([a[:32], a[-32:]]) for a in points(op, dt, 64, rng)])
             for op in OPS for dt in (T.f32, T.f64)]
    sp.init(backend="interp")
    try:
        results = [run(op, dt, args) for op, dt, args in cases]
    finally:
        sp.init()
    for (op, dt, args), got in zip(cases, results):
        want = evaluate(op, dt, *args)
        same = same_bits(got, want)
        k = np.flatnonzero(~same)[:5]
        assert same.all(), f"{op.value} {dt}: interpreter {got[k]}, expansion {want[k]} at {[a[k] for a in args]}"


def test_subnormal_results_are_not_flushed():
    """exp(-100) in f32 is subnormal: the expansion rounds it once (the driver's Exp gave 0)."""
    x = np.array([-100.0, -103.0, -88.0, -745.0], np.float32)
    assert run(Op.EXP, T.f32, [x]).tolist() == np.exp(x.astype(np.float64)).astype(np.float32).tolist()
    xd = np.array([-740.0, -745.0, -708.5])
    assert run(Op.EXP, T.f64, [xd]).tolist() == np.exp(xd).tolist()


def test_expansion_steps_keep_no_contraction_under_fast_math():
    x, y = sp.ndarray(sp.f32, (8,)), sp.ndarray(sp.f32, (8,))
    kernel = elementwise(sp.exp, 1)[0]
    text = kernel.disassemble(x, y)
    assert "Exp" not in text.replace("OpExt", "")   # no GLSL.std.450 Exp: the expansion
    assert text.count("NoContraction") >= 10, text
    native = sp.kernel(native_math=True)(kernel.fn).disassemble(x, y)
    assert "Exp" in native.replace("OpExt", "") and "NoContraction" not in native


def test_native_math_is_the_drivers_and_part_of_the_compile_key():
    """@sp.kernel(native_math=True) and sp.init(native_math=True) use GLSL.std.450 (lavapipe's exp flushes
    exp(-100) to 0 in f32); the same function compiles apart with and without."""
    x = np.array([-100.0, 1.0], np.float32)
    ours = run(Op.EXP, T.f32, [x])
    assert ours[0] == np.float32(np.exp(-100.0))
    native = run(Op.EXP, T.f32, [x], native_math=True)
    assert native[0] != ours[0] and abs(native[1] - np.e) < 1e-6
    sp.init(native_math=True)
    try:
        assert run(Op.EXP, T.f32, [x])[0] == native[0]
        assert run(Op.EXP, T.f32, [x], native_math=False)[0] == ours[0]
    finally:
        sp.init()


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_native_math_takes_a_bool(bad):
    with pytest.raises(sp.SpvadError, match="native_math"):
        sp.init(native_math=bad)
    if bad is not None:
        with pytest.raises(sp.SpvadError, match="native_math"):
            sp.kernel(native_math=bad)(lambda a: None)

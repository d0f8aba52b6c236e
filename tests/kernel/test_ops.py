"""Every operator and math function of the kernel language, per dtype, end to end (`@sp.kernel` on Vulkan).

Each row is a Python expression compiled into a one-line kernel (written to a real file, as a user's
would be). The device result is compared with an independent float64/int64 numpy reference AND with the
IR interpreter running the same compiled IR, on random non-zero data.
"""
import ast
import atexit
import importlib.util
import math
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.ir import nodes as N
from oracle import assert_same, launch_and_interpret

N_ELEMS = 64
NP = {sp.f32: np.float32, sp.f64: np.float64, sp.i32: np.int32, sp.u32: np.uint32, sp.u1: np.bool_}
FLOATS, INTS = (sp.f32, sp.f64), (sp.i32, sp.u32)
NUMERIC = FLOATS + INTS

# ---- kernels from expression text --------------------------------------------------------------------
_KERNEL_DIR = Path(tempfile.mkdtemp(prefix="spvad_ops_"))
atexit.register(shutil.rmtree, _KERNEL_DIR, ignore_errors=True)
_KERNELS = {}
_TEMPLATE = '''import spvad as sp


@sp.kernel
def op_kernel({params}out: sp.Array):
    for i in range(out.shape[0]):
        out[i] = {expr}
'''


def kernel_for(expr, nargs):
    """A kernel `out[i] = expr` of inputs a (and b) per element, compiled from a real source file."""
    key = (expr, nargs)
    if key not in _KERNELS:
        params = "".join(f"{n}: sp.Array, " for n in "ab"[:nargs])
        text = _TEMPLATE.format(params=params, expr=_indexed(expr, nargs))
        path = _KERNEL_DIR / f"k_{zlib.crc32(repr(key).encode()):08x}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _KERNELS[key] = mod.op_kernel
    return _KERNELS[key]


def _indexed(expr, nargs):
    """Replace the free names a/b of `expr` by a[i]/b[i] (via the AST, so sp.abs etc. stay intact)."""
    class Index(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in "ab"[:nargs] and len(node.id) == 1:
                return ast.Subscript(ast.Name(node.id, ast.Load()), ast.Name("i", ast.Load()), ast.Load())
            return node
    return ast.unparse(Index().visit(ast.parse(expr, mode="eval")))


# ---- data ----------------------------------------------------------------------------------------------
def data(rng, dtype, domain, n=N_ELEMS):
    """Random non-zero inputs of `dtype` in `domain`: 'any' (both signs), 'pos', 'unit' (|x| < 1), 'tan',
    'shift' (ints 0..31), 'halves' (k + 0.5 mixed with random), 'small' (|x| <= 3), 'tiny' (|x| from
    1e-7 to 1e-2, log-uniform); 'zeros' is 'any' with every third element 0 (for truthiness)."""
    if domain == "zeros":
        v = data(rng, dtype, "any", n)
        v[::3] = 0
        return v
    if dtype == sp.u1:
        v = rng.random(n) < 0.5
        v[:2] = [True, False]
        return v
    if dtype.is_int:
        if domain == "shift":
            v = rng.integers(0, 32, n)
        elif dtype == sp.u32 or domain == "pos":
            v = rng.integers(1, 100, n)
        elif domain == "small":
            v = rng.integers(1, 8, n) * np.where(rng.random(n) < 0.5, -1, 1)
        else:
            v = rng.integers(1, 100, n) * np.where(rng.random(n) < 0.5, -1, 1)
        return v.astype(NP[dtype])
    if domain == "tiny":
        v = np.exp(rng.uniform(np.log(1e-7), np.log(1e-2), n)) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
        return v.astype(NP[dtype])
    lo, hi, signed = {"any": (0.1, 4.0, True), "pos": (0.1, 4.0, False), "unit": (0.05, 0.95, True),
                      "tan": (0.1, 1.4, True), "small": (0.2, 3.0, True), "halves": (0.1, 4.0, True)}[domain]
    v = rng.uniform(lo, hi, n)
    if signed:
        v *= np.where(rng.random(n) < 0.5, -1.0, 1.0)
    if domain == "halves":
        v[: n // 2] = (rng.integers(-6, 6, n // 2) + 0.5)
    return v.astype(NP[dtype])


def away_from_quotient_ints(a, b):
    """Move a so that a / b is not within 1e-3 of an integer (float // and % are discontinuous there)."""
    q = a.astype(np.float64) / b
    near = np.abs(q - np.round(q)) < 1e-3
    return np.where(near, a + b * 0.25, a).astype(a.dtype)


# ---- reference semantics (float64 / int64 numpy) --------------------------------------------------------
def py_floordiv(a, b):
    return np.floor_divide(a, b)


def py_mod(a, b):
    return np.mod(a, b)


def result_dtype(kind, dt):
    return {"same": dt, "float": dt if dt.is_float else sp.f32, "bool": sp.u1, "i32": sp.i32}[kind]


# Rows: (expression, numpy reference on float64/int64 inputs, dtypes, result kind, domains, tolerance).
# Tolerance is relative for f32 (f64 rows use 1e-12 unless the function is computed in f32 on the GPU:
# GLSL.std.450 transcendentals are 32-bit only, so f64 sin & co. have f32 accuracy).
SIMPLE, TRANS, LOOSE = 1e-5, 2e-5, 1e-3   # LOOSE: Mesa's asin/acos approximations err by ~4e-4
BINARY = [
    ("a + b", np.add, NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a - b", np.subtract, NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a * b", np.multiply, NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a / b", np.true_divide, NUMERIC, "float", ("any", "any"), SIMPLE),
    ("a // b", py_floordiv, NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a % b", py_mod, NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a ** b", np.power, FLOATS, "same", ("pos", "small"), TRANS),
    ("sp.pow(a, b)", np.power, FLOATS, "same", ("pos", "small"), TRANS),
    ("a ** b", np.power, INTS, "same", ("small", "shift"), 0),   # Op.POWI: wraps like `*` (int64 mod 2**32)
    ("sp.atan2(a, b)", np.arctan2, FLOATS, "same", ("any", "any"), TRANS),
    ("sp.hypot(a, b)", np.hypot, FLOATS, "same", ("any", "any"), SIMPLE),
    ("sp.fmod(a, b)", np.fmod, FLOATS, "same", ("any", "any"), SIMPLE),   # C: the sign of a, unlike %
    ("min(a, b)", np.minimum, NUMERIC, "same", ("any", "any"), 0),
    ("max(a, b)", np.maximum, NUMERIC, "same", ("any", "any"), 0),
    ("sp.min(a, b)", np.minimum, NUMERIC, "same", ("any", "any"), 0),
    ("sp.max(a, b)", np.maximum, NUMERIC, "same", ("any", "any"), 0),
    ("a < b", np.less, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a <= b", np.less_equal, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a > b", np.greater, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a >= b", np.greater_equal, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a == b", np.equal, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a != b", np.not_equal, NUMERIC + (sp.u1,), "bool", ("any", "any"), 0),
    ("a & b", np.bitwise_and, INTS + (sp.u1,), "same", ("any", "any"), 0),
    ("a | b", np.bitwise_or, INTS + (sp.u1,), "same", ("any", "any"), 0),
    ("a ^ b", np.bitwise_xor, INTS + (sp.u1,), "same", ("any", "any"), 0),
    ("a << b", np.left_shift, INTS, "same", ("any", "shift"), 0),
    ("a >> b", np.right_shift, INTS, "same", ("any", "shift"), 0),
    ("a and b", np.logical_and, (sp.u1,), "bool", ("any", "any"), 0),
    ("a or b", np.logical_or, (sp.u1,), "bool", ("any", "any"), 0),
    ("a > 0 and b > 0", lambda a, b: (a > 0) & (b > 0), NUMERIC, "bool", ("any", "any"), 0),
    ("a < 0 or b < 0", lambda a, b: (a < 0) | (b < 0), NUMERIC, "bool", ("any", "any"), 0),
    ("not (a < b)", lambda a, b: ~(a < b), NUMERIC, "bool", ("any", "any"), 0),
    ("sp.select(a > b, a, b * 2)", lambda a, b: np.where(a > b, a, b * 2), NUMERIC, "same", ("any", "any"), 0),
    ("a if a > b else b - a", lambda a, b: np.where(a > b, a, b - a), NUMERIC, "same", ("any", "any"), SIMPLE),
    ("a + b * 2 - 1", lambda a, b: a + b * 2 - 1, NUMERIC, "same", ("any", "any"), SIMPLE),
]

UNARY = [
    ("-a", np.negative, NUMERIC, "same", "any", 0),
    ("abs(a)", np.abs, (sp.f32, sp.f64, sp.i32), "same", "any", 0),
    ("sp.abs(a)", np.abs, NUMERIC, "same", "any", 0),
    ("sp.sign(a)", np.sign, (sp.f32, sp.f64, sp.i32), "same", "any", 0),
    ("sp.sin(a)", np.sin, FLOATS, "float", "any", TRANS),
    ("sp.cos(a)", np.cos, FLOATS, "float", "any", TRANS),
    ("sp.tan(a)", np.tan, FLOATS, "float", "tan", TRANS),
    ("sp.asin(a)", np.arcsin, FLOATS, "float", "unit", LOOSE),
    ("sp.acos(a)", np.arccos, FLOATS, "float", "unit", LOOSE),
    ("sp.atan(a)", np.arctan, FLOATS, "float", "any", TRANS),
    ("sp.sinh(a)", np.sinh, FLOATS, "float", "any", TRANS),
    ("sp.cosh(a)", np.cosh, FLOATS, "float", "any", TRANS),
    ("sp.tanh(a)", np.tanh, FLOATS, "float", "any", TRANS),
    ("sp.exp(a)", np.exp, FLOATS, "float", "any", TRANS),
    ("sp.log(a)", np.log, FLOATS, "float", "pos", TRANS),
    ("sp.log2(a)", np.log2, FLOATS, "float", "pos", TRANS),
    ("sp.exp2(a)", np.exp2, FLOATS, "float", "any", TRANS),
    ("sp.log10(a)", np.log10, FLOATS, "float", "pos", TRANS),
    ("sp.expm1(a)", np.expm1, FLOATS, "float", "tiny", TRANS),   # no cancellation for small |a|
    ("sp.expm1(a)", np.expm1, FLOATS, "float", "any", TRANS),
    ("sp.log1p(a)", np.log1p, FLOATS, "float", "tiny", TRANS),
    ("sp.log1p(a)", np.log1p, FLOATS, "float", "unit", TRANS),
    ("sp.sqrt(a)", np.sqrt, FLOATS, "float", "pos", SIMPLE),
    ("sp.rsqrt(a)", lambda a: 1 / np.sqrt(a), FLOATS, "float", "pos", TRANS),
    ("sp.floor(a)", np.floor, FLOATS, "float", "halves", 0),
    ("sp.ceil(a)", np.ceil, FLOATS, "float", "halves", 0),
    ("sp.round(a)", np.round, FLOATS, "float", "halves", 0),   # half to even, as numpy and Python
    # int inputs of float functions are converted to f32 first
    ("sp.sin(a)", np.sin, (sp.i32,), "float", "small", TRANS),
    ("sp.sqrt(a)", np.sqrt, (sp.i32, sp.u32), "float", "pos", SIMPLE),
    ("a ** 2", lambda a: a * a, NUMERIC, "same", "any", SIMPLE),
    ("a ** 3", lambda a: a * a * a, (sp.f32, sp.f64, sp.i32), "same", "any", SIMPLE),
    ("a ** 5", lambda a: a ** 5, (sp.f32, sp.f64, sp.i32), "same", "small", SIMPLE),
    ("a ** 1", lambda a: a, NUMERIC, "same", "any", 0),
    ("a ** 0", np.ones_like, NUMERIC, "same", "any", 0),
    ("a ** -2", lambda a: 1.0 / (a * a), FLOATS, "same", "any", SIMPLE),
    ("a ** 3.0", lambda a: a * a * a, FLOATS, "same", "any", SIMPLE),
    ("a ** 0.5", np.sqrt, FLOATS, "same", "pos", TRANS),
    ("sp.clamp(a, -0.5, 0.5)", lambda a: np.clip(a, -0.5, 0.5), FLOATS, "same", "unit", 0),
    ("sp.clamp(a, -20, 30)", lambda a: np.clip(a, -20, 30), (sp.f32, sp.f64, sp.i32), "same", "any", 0),
    ("sp.clamp(a, 20, 70)", lambda a: np.clip(a, 20, 70), (sp.u32,), "same", "any", 0),
    ("~a", np.invert, INTS, "same", "any", 0),
    ("not a", np.logical_not, (sp.u1,), "bool", "any", 0),
    ("not a", np.logical_not, NUMERIC, "bool", "zeros", 0),    # truthiness of numbers
    ("1 if a else 2", lambda a: np.where(a != 0, 1, 2), NUMERIC, "i32", "zeros", 0),
    ("-a", lambda a: -a.astype(np.int64), (sp.u1,), "i32", "any", 0),
    ("a + a", lambda a: a.astype(np.int64) * 2, (sp.u1,), "i32", "any", 0),   # True + True == 2
    ("min(a, 1.5, -a)", lambda a: np.minimum(np.minimum(a, 1.5), -a), FLOATS, "same", "any", 0),
    ("max(a, 3, -a)", lambda a: np.maximum(np.maximum(a, 3), -a), (sp.i32,), "same", "any", 0),
]


def _rows(table):
    for expr, ref, dtypes, kind, domain, tol in table:
        for dt in dtypes:
            yield pytest.param(expr, ref, dt, kind, domain, tol, id=f"{expr}-{dt}")


def _check(expr, nargs, inputs, ref_fn, out_dt, tol, dt):
    out = sp.ndarray(out_dt, len(inputs[0]))
    out.fill(7 if not out_dt.is_bool else True)    # a kernel that writes nothing cannot pass
    k = kernel_for(expr, nargs)
    arrays = [sp.from_numpy(v) for v in inputs]
    assert all(a.dtype == dt for a in arrays)
    (*_, dev), (*_, interp) = launch_and_interpret(k, *arrays, out)
    wide = [v.astype(np.float64) if dt.is_float else v.astype(np.int64) if dt.is_int else v for v in inputs]
    with np.errstate(all="ignore"):
        ref = np.asarray(ref_fn(*wide))
    if out_dt.is_int:
        ref = ref.astype(np.int64).astype(NP[out_dt])   # two's-complement wrap, as numpy int32/uint32
    else:
        ref = ref.astype(NP[out_dt])
    rtol = tol if (out_dt == sp.f32 or tol > SIMPLE) else (1e-12 if tol else 0)
    atol = rtol * 0.1 if rtol else 0
    assert_same(dev, ref, rtol=rtol, atol=atol, what=f"{expr} on {dt}: device vs numpy")
    assert_same(interp, ref, rtol=max(rtol, 1e-6 if out_dt == sp.f32 else 0), atol=atol,
                what=f"{expr} on {dt}: interpreter vs numpy")
    assert_same(dev, interp, rtol=rtol, atol=atol, what=f"{expr} on {dt}: device vs interpreter")


@pytest.mark.parametrize("expr,ref,dt,kind,domains,tol", list(_rows(BINARY)))
def test_binary_op(rng, expr, ref, dt, kind, domains, tol):
    a, b = data(rng, dt, domains[0]), data(rng, dt, domains[1])
    if kind == "bool":
        b[::4] = a[::4]      # ties tell < from <= and == from !=
    if expr in ("a // b", "a % b") and dt.is_float:
        a = away_from_quotient_ints(a, b)
    if dt == sp.u32 and expr in ("a >> b",):
        a = (a * 40_000_000).astype(np.uint32)   # high bit set: the shift must be logical
    _check(expr, 2, [a, b], ref, result_dtype(kind, dt), tol, dt)


@pytest.mark.parametrize("expr,ref,dt,kind,domain,tol", list(_rows(UNARY)))
def test_unary_op(rng, expr, ref, dt, kind, domain, tol):
    a = data(rng, dt, domain)
    _check(expr, 1, [a], ref, result_dtype(kind, dt), tol, dt)


I32_MIN, I32_MAX = -2**31, 2**31 - 1


def wrap32(values, dtype=np.int32):
    """Python integers as the GPU's 32-bit two's complement keeps them."""
    return np.array([v & 0xFFFFFFFF for v in values], np.uint32).view(dtype) if dtype == np.int32 else \
        np.array([v & 0xFFFFFFFF for v in values], np.uint32)


def test_integer_floordiv_mod_python_semantics():
    """All sign combinations, incl. exact multiples and INT_MIN on either side (INT_MIN // -1 wraps to
    INT_MIN), against Python's own // and %: NVIDIA got them wrong when they were built on OpSRem, which
    Vulkan leaves undefined for negative operands."""
    pairs = [(a, b) for a in (-7, -6, -1, 0, 1, 5, 6, 7, I32_MAX, I32_MIN + 1, I32_MIN)
             for b in (-3, -2, -1, 1, 2, 3, 7, I32_MAX, I32_MIN)]
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    for expr, fn in (("a // b", lambda x, y: x // y), ("a % b", lambda x, y: x % y)):
        out = sp.ndarray(sp.i32, len(pairs))
        k = kernel_for(expr, 2)
        (_, _, dev), (_, _, interp) = launch_and_interpret(k, sp.from_numpy(a), sp.from_numpy(b), out)
        expect = wrap32([fn(x, y) for x, y in pairs])
        assert_same(dev, expect, what=expr)
        assert_same(interp, expect, what=expr)


@pytest.mark.parametrize("expr,fn,values", [
    ("abs(a)", abs, [I32_MIN, I32_MIN + 1, -1, 0, 5, I32_MAX]),
    ("-a", lambda v: -v, [I32_MIN, -1, 0, I32_MAX]),
    ("a << b", lambda v: v << 35 % 32, [1, -1, I32_MIN, 12345]),        # shifts use the low 5 bits of b = 35
    ("a >> b", lambda v: v >> 35 % 32, [I32_MIN, -1, 7, I32_MAX]),
], ids=["abs", "neg", "shl", "shr"])
def test_integer_edge_values_wrap(expr, fn, values):
    """The results the interpreter gives, on every device: two's-complement wrapping (abs(INT_MIN) and
    -INT_MIN are INT_MIN), shift amounts taken modulo 32."""
    a = np.array(values, np.int32)
    out = sp.ndarray(sp.i32, len(a))
    k = kernel_for(expr, 2 if "b" in expr else 1)
    args = [sp.from_numpy(a)] + ([sp.from_numpy(np.full(len(a), 35, np.int32))] if "b" in expr else [])
    dev, interp = (r[-1] for r in launch_and_interpret(k, *args, out))
    expect = wrap32([fn(int(v)) for v in values])
    assert_same(dev, expect, what=expr)
    assert_same(interp, expect, what=expr)


def test_u32_floordiv_mod_past_2_31():
    a = np.array([4_000_000_000, 2**32 - 1, 2**31, 7, 0], np.uint32)
    b = np.array([3, 2**31 + 1, 2**32 - 1, 2**31, 5], np.uint32)
    for expr, fn in (("a // b", lambda x, y: x // y), ("a % b", lambda x, y: x % y)):
        dev, interp = (r[-1] for r in launch_and_interpret(kernel_for(expr, 2), sp.from_numpy(a),
                                                           sp.from_numpy(b), sp.ndarray(sp.u32, len(a))))
        expect = np.array([fn(int(x), int(y)) for x, y in zip(a, b)], np.uint32)
        assert_same(dev, expect, what=expr)
        assert_same(interp, expect, what=expr)


def test_exact_integer_power_of_negative_base():
    """`v ** k` with a small constant int k is repeated multiplication: exact, and fine for v < 0."""
    v = np.array([-3.0, -1.5, -0.5, 0.25, 2.0, -7.0], np.float32)
    for k_exp in (2, 3, 4, 7, -1, -3):
        out = sp.ndarray(sp.f32, len(v))
        k = kernel_for(f"a ** {k_exp}", 1)
        (_, dev), (_, interp) = launch_and_interpret(k, sp.from_numpy(v), out)
        expect = np.array([float(x) ** k_exp for x in v], np.float32)
        assert_same(dev, expect, rtol=1e-6, what=f"a ** {k_exp}")
        assert not np.isnan(dev).any()
        assert_same(interp, expect, rtol=1e-6)


# ---- casts -----------------------------------------------------------------------------------------------
CAST_SOURCES = {sp.f32: np.array([-2.75, -1.5, -0.5, 0.5, 1.25, 3.99, 100.5, -7.0], np.float32),
                sp.f64: np.array([-2.75, -1.5, -0.5, 0.5, 1.25, 3.99, 1e6 + 0.5, -7.0], np.float64),
                sp.i32: np.array([-5, -1, 1, 2, 7, 100, -100, 2**24 + 1], np.int32),
                sp.u32: np.array([1, 2, 7, 100, 3, 2**24 + 1, 4000000000, 2**31], np.uint32),
                sp.u1: np.array([True, False, True, True, False, False, True, False])}


def saturated(v, dst):
    """float -> integer: truncation toward zero, NaN -> 0, values beyond the type -> its nearest end."""
    lo, hi = (I32_MIN, I32_MAX) if dst == sp.i32 else (0, 2**32 - 1)
    t = np.trunc(np.nan_to_num(v.astype(np.float64), nan=0.0, posinf=hi, neginf=lo))
    return np.clip(t, lo, hi)


def cast_reference(v, src, dst):
    """numpy semantics of a C-style conversion: float->int truncates (saturating), bool->number 0/1,
    x->bool x != 0."""
    if dst == sp.u1:
        return v != 0
    if src.is_float and dst.is_int:
        return saturated(v, dst)
    return v.astype(np.float64) if dst.is_float and src != sp.u1 else v.astype(NP[dst]) if src != sp.u1 else v


@pytest.mark.parametrize("src", list(CAST_SOURCES), ids=str)
@pytest.mark.parametrize("dst", [sp.f32, sp.f64, sp.i32, sp.u32, sp.u1], ids=str)
def test_cast(src, dst):
    v = CAST_SOURCES[src]
    if (src, dst) == (sp.u32, sp.i32):
        expect = v.view(np.int32)                           # same bit pattern
    elif (src, dst) == (sp.i32, sp.u32):
        expect = v.view(np.uint32)
    else:
        expect = cast_reference(v, src, dst)
    out = sp.ndarray(dst, len(v))
    k = kernel_for(f"sp.cast(a, sp.{dst})", 1)
    (_, dev), (_, interp) = launch_and_interpret(k, sp.from_numpy(v), out)
    expect = np.asarray(expect)
    rtol = 1e-7 if dst == sp.f32 else 0
    assert_same(dev, expect.astype(NP[dst]), rtol=rtol, what=f"cast {src} -> {dst}")
    assert_same(interp, expect.astype(NP[dst]), rtol=rtol)


EXTREMES = [np.nan, np.inf, -np.inf, 3e9, -3e9, 5e9, 1e30, -1e30, -0.5, -1.0, 0.75, -7.9, 2.0**31, -2.0**31,
            2147483520.0, -2147483904.0, 4294967040.0, 2.0**32]   # f32 neighbours of 2**31 and 2**32
WIDE = [2147483647.75, -2147483648.75, -2147483649.0, 4294967295.5, -0.999]   # f64 only


@pytest.mark.parametrize("src", [sp.f32, sp.f64], ids=str)
@pytest.mark.parametrize("dst", [sp.i32, sp.u32], ids=str)
def test_float_to_int_casts_saturate(src, dst):
    """NaN, infinities and values beyond the integer type give defined results on every device (SPIR-V
    leaves OpConvertFToS/U undefined there): NaN -> 0, beyond -> the nearest end of the type."""
    v = np.array(EXTREMES + (WIDE if src == sp.f64 else []), NP[src])
    k = kernel_for(f"sp.cast(a, sp.{dst})", 1)
    (_, dev), (_, interp) = launch_and_interpret(k, sp.from_numpy(v), sp.ndarray(dst, len(v)))
    expect = saturated(v, dst).astype(NP[dst])
    assert_same(dev, expect, what=f"cast {src} -> {dst}")
    assert_same(interp, expect, what=f"cast {src} -> {dst}")


@pytest.mark.parametrize("expr,dt,out_dt,expect", [
    ("int(a)", sp.f32, sp.i32, lambda v: np.trunc(v)),
    ("int(a)", sp.f64, sp.i32, lambda v: np.trunc(v)),
    ("float(a)", sp.i32, sp.f32, lambda v: v),
    ("float(a)", sp.f64, sp.f64, lambda v: v),           # float() of an f64 stays f64
    ("sp.f32(a)", sp.i32, sp.f32, lambda v: v),
    ("sp.i32(a) + 1", sp.f32, sp.i32, lambda v: np.trunc(v) + 1),
    ("int(a) // 2", sp.f32, sp.i32, lambda v: np.trunc(v).astype(np.int64) // 2),
    ("float(a) / 2", sp.i32, sp.f32, lambda v: v / 2),
], ids=lambda x: x if isinstance(x, str) else str(x) if isinstance(x, T.DType) else "")
def test_int_float_builtins(expr, dt, out_dt, expect):
    v = CAST_SOURCES[dt]
    k = kernel_for(expr, 1)
    out = sp.ndarray(sp.f64, len(v))   # wide enough to show the expression's own precision
    assert stored_dtype(k, sp.from_numpy(v), out) == out_dt
    (_, dev), (_, interp) = launch_and_interpret(k, sp.from_numpy(v), out)
    want = np.asarray(expect(v.astype(np.float64) if dt.is_float else v.astype(np.int64)))
    want = want.astype(NP[out_dt]).astype(np.float64)
    assert_same(dev, want, what=expr)
    assert_same(interp, want, what=expr)


# ---- promotion -------------------------------------------------------------------------------------------
def stored_dtype(k, *args):
    """dtype of the value a kernel's (only) store writes, before the implicit conversion to the array."""
    specs, _, _ = k._bind(args)
    stores = [s for t in k._compiled(specs).ir.tasks for s in N.walk(t.body) if isinstance(s, N.GlobalStore)]
    assert len(stores) == 1
    v = stores[0].value
    if isinstance(v, N.Compute) and v.op is N.Op.CAST:
        v = v.args[0]
    return v.dtype


PROMOTION = [   # (expression, dtype of a, dtype of b, result dtype) -- numpy-like, weak Python literals
    ("a + b", sp.i32, sp.f32, sp.f32),
    ("a * b", sp.f32, sp.f64, sp.f64),
    ("a - b", sp.i32, sp.f64, sp.f64),
    ("a + b", sp.i32, sp.u32, sp.i32),
    ("a / b", sp.i32, sp.i32, sp.f32),
    ("a / b", sp.u32, sp.u32, sp.f32),
    ("a // b", sp.i32, sp.i32, sp.i32),
    ("a + b", sp.u1, sp.u1, sp.i32),
    ("a + b", sp.u1, sp.f32, sp.f32),
    ("a + 1", sp.f32, sp.f32, sp.f32),          # the int literal adapts
    ("a + 1.5", sp.i32, sp.i32, sp.f32),        # a float literal makes an int float
    ("a * 2.0", sp.f64, sp.f64, sp.f64),        # ... but never narrows f64
    ("a + 3", sp.u32, sp.u32, sp.u32),
    ("a + 1", sp.u1, sp.u1, sp.i32),
    ("2 ** 3 + a", sp.u32, sp.u32, sp.u32),     # constant folding gives a weak literal
    ("max(a, b)", sp.i32, sp.f32, sp.f32),
    ("sp.sin(a)", sp.i32, sp.i32, sp.f32),
    ("sp.sin(a)", sp.f64, sp.f64, sp.f64),
    ("a if a > 0 else b", sp.i32, sp.f32, sp.f32),
    ("a ** b", sp.f32, sp.i32, sp.f32),         # an integer exponent keeps the base's type (Op.POWI)
    ("a ** b", sp.f64, sp.u32, sp.f64),
    ("a ** b", sp.i32, sp.i32, sp.i32),
    ("a ** b", sp.u32, sp.i32, sp.u32),
    ("sp.pow(a, b)", sp.i32, sp.i32, sp.f32),   # sp.pow is a float function
]


@pytest.mark.parametrize("expr,da,db,want", PROMOTION, ids=lambda x: x if isinstance(x, str) else str(x))
def test_promotion(expr, da, db, want):
    a = sp.from_numpy(np.array([3, 5, 1, 2], NP[da]))
    b = sp.from_numpy(np.array([2, 3, 1, 2], NP[db]))
    out = sp.ndarray(sp.f64, 4)
    k = kernel_for(expr, 2)
    assert stored_dtype(k, a, b, out) == want
    # The value agrees with float64 Python on the same inputs, rounded through the promoted dtype.
    (_, _, dev), (_, _, interp) = launch_and_interpret(k, a, b, out)
    env = {"sp": sp, "max": max}
    ref = []
    for x, y in zip(a.to_numpy().tolist(), b.to_numpy().tolist()):
        r = eval(expr.replace("sp.sin", "__import__('math').sin"), env, {"a": x, "b": y})
        ref.append(float(np.asarray(r).astype(NP[want])))
    # sin in float32 (also for f64: GLSL.std.450 has it for 32 bits only): GPUs' err by up to ~2**-21 in
    # absolute terms (NVIDIA: 6e-8 at sin(3)); Vulkan sets no precision for it
    tol = dict(rtol=1e-7, atol=1e-6) if "sin" in expr else dict(rtol=1e-15 if want == sp.f64 else 1e-7)
    assert_same(dev, np.array(ref), what=expr, **tol)
    assert_same(interp, dev, rtol=1e-7, atol=tol.get("atol", 0.0), what=f"{expr}: interpreter vs device")


def test_i32_division_is_f32_not_f64():
    """i32 / i32 gives f32, visible in the rounding of 1/3 stored into an f64 array."""
    k = kernel_for("a / b", 2)
    out = sp.ndarray(sp.f64, 1)
    k(sp.from_numpy(np.array([1], np.int32)), sp.from_numpy(np.array([3], np.int32)), out)
    assert out[0] == float(np.float32(1) / np.float32(3)) != 1 / 3


def test_lang_functions_match_kernels_on_the_host():
    """`sp.round` etc. called on the host follow the kernel semantics (round half to even)."""
    v = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2], np.float32)
    out = sp.ndarray(sp.f32, len(v))
    kernel_for("sp.round(a)", 1)(sp.from_numpy(v), out)
    assert_same(sp.round(v), out.to_numpy())
    assert math.isclose(sp.clamp(5.0, 0.0, 1.0), 1.0) and sp.select(True, 1, 2) == 1


def test_every_math_function_has_a_value_row():
    """A math op callable as sp.<name> is compared with numpy in the UNARY or BINARY table above."""
    from spvad.frontend.calls import MATH1, MATH2
    exprs = " ".join(row[0] for row in UNARY + BINARY)
    missing = [name for name in {**MATH1, **MATH2} if f"sp.{name}(" not in exprs]
    assert not missing, f"no value row for sp.{', sp.'.join(missing)}"

"""The call tables (spvad/frontend/calls.py): every sp.* builtin and every Python math function kernels may call
has a row, rows are defined once, and each math row computes what Python's math module computes (float64
reference, f32 tolerance); an integer-vector index under sp.init(debug=True) touches no element out of
bounds in any mode."""
import ast
import importlib.util
import math

import numpy as np
import pytest

import spvad as sp
from spvad.frontend import calls, scalar_calls
from adcheck import rand
from modes import check_modes

# (expression of a and b, numpy reference, domain of a): one row per entry of scalar_calls.MATH_MODULE
MATH_CASES = [
    ("math.sin(a)", np.sin, "any"), ("math.cos(a)", np.cos, "any"), ("math.tan(a)", np.tan, "any"),
    ("math.asin(a)", np.arcsin, "unit"), ("math.acos(a)", np.arccos, "unit"), ("math.atan(a)", np.arctan, "any"),
    ("math.sinh(a)", np.sinh, "any"), ("math.cosh(a)", np.cosh, "any"), ("math.tanh(a)", np.tanh, "any"),
    ("math.exp(a)", np.exp, "any"), ("math.exp2(a)", np.exp2, "any"), ("math.log2(a)", np.log2, "pos"),
    ("math.log10(a)", np.log10, "pos"), ("math.expm1(a)", np.expm1, "any"), ("math.log1p(a)", np.log1p, "pos"),
    ("math.sqrt(a)", np.sqrt, "pos"), ("math.atan2(a, b)", np.arctan2, "any"),
    ("math.hypot(a, b)", np.hypot, "any"), ("math.fmod(a, b)", np.fmod, "any"),
    ("math.log(a)", np.log, "pos"), ("math.log(a, 3.0)", lambda a: np.log(a) / np.log(3.0), "pos"),
    ("math.pow(a, b)", np.power, "pos"), ("math.fabs(a)", np.abs, "any"),
    ("math.trunc(a * 3.0)", lambda a: np.trunc(a * 3.0), "any"),
    ("math.floor(a * 3.0)", lambda a: np.floor(a * 3.0), "any"),
    ("math.ceil(a * 3.0)", lambda a: np.ceil(a * 3.0), "any"),
    ("math.degrees(a)", np.degrees, "any"), ("math.radians(a)", np.radians, "any"),
]
KERNEL = """

@sp.kernel
def k{n}(a: sp.Array, b: sp.Array, out: sp.Array):
    for i in range(out.shape[0]):
        out[i] = {expr}
"""


def indexed(expr):
    """`expr` with its free names a and b read at element i."""
    class Index(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in ("a", "b"):
                return ast.Subscript(node, ast.Name("i", ast.Load()), ast.Load())
            return node
    return ast.unparse(Index().visit(ast.parse(expr, mode="eval")))


@pytest.fixture(scope="module")
def math_kernels(tmp_path_factory):
    """The kernels of MATH_CASES, from a real source file (kernels need their source)."""
    text = "import math\nimport spvad as sp\n" + "".join(
        KERNEL.format(n=n, expr=indexed(expr)) for n, (expr, _, _) in enumerate(MATH_CASES))
    path = tmp_path_factory.mktemp("math_kernels") / "math_kernels.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("math_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_math_row_has_a_case():
    covered = {eval(expr.split("(")[0], {"math": math}) for expr, _, _ in MATH_CASES}
    assert covered == set(scalar_calls.MATH_MODULE), set(scalar_calls.MATH_MODULE) ^ covered


@pytest.mark.parametrize("n", range(len(MATH_CASES)), ids=[c[0] for c in MATH_CASES])
def test_math_functions_compute_what_python_computes(n, math_kernels, rng):
    expr, ref, domain = MATH_CASES[n]
    a = {"any": rand(rng, 16, 0.1, 2.0), "pos": rng.uniform(0.1, 3.0, 16).astype(np.float32),
         "unit": rand(rng, 16, 0.05, 0.95)}[domain]
    b = rng.uniform(0.2, 2.0, 16).astype(np.float32)
    out = sp.ndarray(sp.f32, (16,))
    getattr(math_kernels, f"k{n}")(sp.from_numpy(a), sp.from_numpy(b), out)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = ref(a64, b64) if ", b)" in expr else ref(a64)
    loose = expr.startswith(("math.asin", "math.acos"))   # Mesa's asin/acos approximations err by ~4e-4
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-3 if loose else 2e-5, atol=1e-6)


def test_every_builtin_has_a_row():
    names = {getattr(v, "_spvad_builtin") for v in vars(sp).values() if hasattr(v, "_spvad_builtin")
             and not isinstance(v, type)}
    assert names and not names - set(calls.SP_BUILTINS), names - set(calls.SP_BUILTINS)


def test_a_row_defined_twice_is_a_mistake():
    with pytest.raises(AssertionError, match="defined twice"):
        calls.merged({"sin": None}, {"sin": None})


def test_unknown_callees_name_what_kernels_may_call():
    @sp.kernel
    def calls_round(x: sp.Array):
        for i in x:
            x[i] = round(x[i])
    with pytest.raises(sp.CompileError, match="cannot call round inside a kernel .*math functions"):
        calls_round(sp.from_numpy(np.ones(2, np.float32)))


# ---- out of bounds: none in any mode, with debug checks on ------------------------------------------------
@sp.kernel
def scatter_near_the_edges(x: sp.Array, v: sp.Array, grid: sp.Array):
    for p in range(x.shape[0]):
        base = sp.cast(sp.vec2(x[p, 0], x[p, 1]) * 4.0 - 0.5, sp.i32)
        for i, j in sp.static(sp.ndrange(3, 3)):
            if 0 <= base[0] + i < grid.shape[0] and 0 <= base[1] + j < grid.shape[1]:
                grid[base + sp.Vector([i, j])] += v[p] * x[p, 0] * (i + 1) - x[p, 1] * j


def scatter_near_the_edges_ref(x, v, grid):
    for p in range(x.shape[0]):
        base = np.floor(x[p] * 4.0 - 0.5).astype(int)
        for i in range(3):
            for j in range(3):
                if 0 <= base[0] + i < grid.shape[0] and 0 <= base[1] + j < grid.shape[1]:
                    grid[base[0] + i, base[1] + j] += v[p] * x[p, 0] * (i + 1) - x[p, 1] * j


def test_guarded_vector_indices_stay_in_bounds_under_debug(debug, rng):
    x = rng.uniform(0.2, 1.0, (6, 2)).astype(np.float32)     # stencils cross the upper edges of the 4x4 grid
    args = [x, rand(rng, 6), rand(rng, (4, 4))]
    check_modes(scatter_near_the_edges, scatter_near_the_edges_ref, args, outs=[2], wrt=[0, 1], rng=rng)
    sp.sync()

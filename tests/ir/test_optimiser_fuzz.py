"""Random kernels (locals, loops with runtime bounds, while loops with breaks, ifs, stores read back) compiled
with every optimiser pass and with none: the interpreter must give the same primal values bit for bit and the
same gradients up to the order of float sums; a few also run on the device and match the interpreter."""
import importlib.util
import sys

import numpy as np
import pytest

import spvad as sp
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.ir import simplify
from spvad.pipeline import DUAL, PASSES, PRIMAL, REVERSE, run_passes

SEEDS = 40
F32 = ArraySpec(sp.f32, 1, needs_grad=True)
EXPRS = ["{u} * 0.9 + 0.1 * sp.sin({v})", "{u} * {v} * 0.5", "sp.tanh({u} + {v})", "{u} + w[i] * 0.3",
         "x[i] * 0.7 - 0.2 * {u}", "sp.cos({u}) * 0.8", "{u} - 0.1 * {v} * {v}", "sp.exp(-{u} * {u})"]


class _Gen:
    def __init__(self, rng):
        self.rng, self.lines, self.vars, self.loops = rng, [], ["a", "b", "c"], 0

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def expr(self):
        return self.pick(EXPRS).format(u=self.pick(self.vars), v=self.pick(self.vars))

    def block(self, indent, depth):
        for _ in range(int(self.rng.integers(1, 4))):
            self.statement(indent, depth)

    def statement(self, indent, depth):
        pad = " " * indent
        kind = self.pick(["assign", "assign", "for", "if", "while", "store"] if depth < 2 else
                         ["assign", "if"] if depth < 3 else ["assign"])
        if kind == "assign":
            self.lines.append(f"{pad}{self.pick(self.vars)} = {self.expr()}")
        elif kind == "store":   # a store read back: forwarding of global elements
            self.lines.append(f"{pad}y[i] = {self.expr()}")
            self.lines.append(f"{pad}{self.pick(self.vars)} = y[i] * 0.5 + {self.pick(self.vars)} * 0.5")
        elif kind == "for":
            k = f"k{self.loops}"
            self.loops += 1
            self.lines.append(f"{pad}for {k} in range({self.pick(['n', 'n - 1', '2', 'n + ' + str(depth)])}):")
            self.block(indent + 4, depth + 1)
        elif kind == "if":
            self.lines.append(f"{pad}if {self.pick(self.vars)} > {self.pick(self.vars)}:")
            self.block(indent + 4, depth + 1)
            self.lines.append(f"{pad}else:")
            self.block(indent + 4, depth + 1)
        else:
            k = f"k{self.loops}"
            self.loops += 1
            self.lines.append(f"{pad}{k} = 0")
            self.lines.append(f"{pad}while {k} < n:")
            self.lines.append(f"{pad}    {k} += 1")
            self.block(indent + 4, depth + 1)
            self.lines.append(f"{pad}    if {self.pick(self.vars)} > 1.5:")
            self.lines.append(f"{pad}        break")


def source(seed):
    g = _Gen(np.random.default_rng(seed))
    g.lines = [f"def fuzz_{seed}(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):",
               "    for i in range(x.shape[0]):", "        a = x[i]", "        b = w[i]", "        c = 0.5"]
    g.block(8, 0)
    g.lines.append("        y[i] = a + b * c")
    return "import spvad as sp\n\n\n" + "\n".join(g.lines) + "\n"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    out = {}
    for seed in range(SEEDS):
        path = folder / f"fuzz_{seed}.py"
        path.write_text(source(seed))
        spec = importlib.util.spec_from_file_location(f"fuzz_{seed}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        out[seed] = getattr(module, f"fuzz_{seed}")
    return out


def run(fn, mode, skip, x, w, seed_grad, n):
    kernel = run_passes(build_kernel(fn, [F32, F32, F32, sp.i32])[0], mode, ad_stack_size=64,
                        verify_each=True, skip=skip)[0]
    buffers = {(0, "primal"): x.copy(), (1, "primal"): w.copy(), (2, "primal"): np.zeros_like(x),
               (0, "grad"): np.zeros_like(x), (1, "grad"): np.zeros_like(x), (2, "grad"): seed_grad.copy()}
    run_kernel(kernel, buffers, [n])
    return buffers


@pytest.mark.parametrize("seed", range(SEEDS))
def test_every_pass_keeps_every_value(kernels, seed):
    rng = np.random.default_rng(1000 + seed)
    x, w = rng.uniform(-1.0, 1.0, 5).astype(np.float32), rng.uniform(-1.0, 1.0, 5).astype(np.float32)
    seed_grad = rng.uniform(0.5, 1.5, 5).astype(np.float32)
    for mode in (PRIMAL, REVERSE):
        for n in (0, 1, 3):
            want = run(kernels[seed], mode, tuple(PASSES), x, w, seed_grad, n)
            got = run(kernels[seed], mode, (), x, w, seed_grad, n)
            for key in want:   # primal values bit for bit; a gradient may sum one element's adjoints in
                # another order (two loads of x[i] became one), so within float rounding
                tol = 0 if mode is PRIMAL else 1e-5
                np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol * 0.1,
                                           err_msg=f"{mode.kind} n={n} {key}\n" + source(seed))


@pytest.mark.parametrize("seed", range(0, SEEDS, 8))
def test_the_device_agrees_with_the_interpreter(kernels, seed):
    rng = np.random.default_rng(2000 + seed)
    x0, w0 = rng.uniform(-1.0, 1.0, 5).astype(np.float32), rng.uniform(-1.0, 1.0, 5).astype(np.float32)
    g0 = rng.uniform(0.5, 1.5, 5).astype(np.float32)
    k = sp.kernel(kernels[seed])
    x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(w0, needs_grad=True)
    y = sp.ndarray(sp.f32, (5,), needs_grad=True)
    k(x, w, y, 3)
    y.grad.from_numpy(g0)
    k.grad(x, w, y, 3)
    ref = run(kernels[seed], REVERSE, (), x0, w0, g0, 3)
    want_y = run(kernels[seed], PRIMAL, (), x0, w0, g0, 3)[(2, "primal")]
    np.testing.assert_allclose(y.to_numpy(), want_y, rtol=1e-4, atol=1e-5, err_msg=source(seed))
    np.testing.assert_allclose(x.grad.to_numpy(), ref[(0, "grad")], rtol=1e-3, atol=1e-4, err_msg=source(seed))
    np.testing.assert_allclose(w.grad.to_numpy(), ref[(1, "grad")], rtol=1e-3, atol=1e-4, err_msg=source(seed))


def test_simplify_ends_at_a_fixed_point(kernels, monkeypatch):
    """simplify stops after one round unless that round reshaped blocks (simplify._Rewriter.reshaped): after
    every simplify of every mode's passes, one more round must change nothing."""
    plain, checked = simplify.simplify, [0]

    def simplify_and_check(kernel, distinct=False):
        plain(kernel, distinct)
        for task in kernel.tasks:
            assert not simplify._Rewriter(task, distinct).run() and not simplify.eliminate_dead_code(task)
        checked[0] += 1
        return kernel

    monkeypatch.setattr(simplify, "simplify", simplify_and_check)
    for seed, fn in kernels.items():
        for mode in (PRIMAL, REVERSE, DUAL):
            try:
                run_passes(build_kernel(fn, [F32, F32, F32, sp.i32])[0], mode, ad_stack_size=64)
            except AssertionError:
                raise AssertionError(f"{mode.kind}: simplify left work for another round\n" + source(seed)) from None
    assert checked[0] >= 3 * 2 * SEEDS

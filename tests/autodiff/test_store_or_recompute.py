"""Store or recompute (autodiff/store_or_recompute.py): the reverse loop pops what it would recompute when
recomputing costs more, by the COST table, than pushing. Gradients are the same bit for bit, on the
interpreter, with and without the pass (random non-zero inputs); what is kept follows the cost."""
import numpy as np
import pytest

import spvad as sp
from spvad.autodiff.store_or_recompute import COST
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir.interp import run_kernel
from spvad.ir.ops import Op
from spvad.pipeline import REVERSE, run_passes
from tests.common_kernels import integrate

F32 = ArraySpec(sp.f32, 1, needs_grad=True)


def cheap(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(n):
            v = v * w[i] + 0.1          # recomputing v * w costs less than a second stack
        y[i] = v


def nested_while(x: sp.Array, w: sp.Array, y: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        v = x[i]
        k = 0
        while k < n:
            u = sp.exp(-v * v)
            if u > 0.5:
                v = v + 0.2 * u * w[i]
            else:
                v = v * 0.9 + sp.tanh(w[i] * v)
            for j in range(k):
                v = v + 0.01 * sp.cos(v + float(j))
            k += 1
        y[i] = v


CASES = [integrate, cheap, nested_while]


def gradient_kernel(fn, skip=()):
    """The reverse kernel with its transcendentals left as Ops (native_math: the math library's expansions, which
    come last, would hide what store_or_recompute chose)."""
    return run_passes(build_kernel(fn, [F32, F32, F32, sp.i32])[0], REVERSE, ad_stack_size=64,
                      verify_each=True, skip=skip, native_math=True)[0]


def reverse_loops(kernel):
    return [s for t in kernel.tasks for s in N.walk(t.body) if isinstance(s, N.RangeFor) and s.step < 0]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [0, 1, 6])
def test_gradients_are_the_same_bit_for_bit(fn, n, rng):
    x, w = (rng.uniform(0.2, 1.5, 6).astype(np.float32) for _ in range(2))
    seed = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    out = []
    for skip in ((), ("store",)):
        buffers = {(0, "primal"): x.copy(), (1, "primal"): w.copy(), (2, "primal"): np.zeros(6, np.float32),
                   (0, "grad"): np.zeros(6, np.float32), (1, "grad"): np.zeros(6, np.float32),
                   (2, "grad"): seed.copy()}
        run_kernel(gradient_kernel(fn, skip), buffers, [n])
        out.append(buffers)
    for key in out[0]:
        np.testing.assert_array_equal(out[0][key], out[1][key], err_msg=str(key))


def test_the_integrator_keeps_its_partials_and_recomputes_no_transcendental():
    k = gradient_kernel(integrate)
    (loop,) = reverse_loops(k)
    ops = {s.op for s in N.walk(loop.body) if isinstance(s, N.Compute)}
    assert not ops & {Op.SIN, Op.COS}, ops
    kept = sorted(s.name for s in N.adstacks_of(k.tasks[0]))
    assert kept == ["v_stack_cos", "v_stack_mul"], kept   # cos(v) and 0.01*sin(v), not v
    (before,) = reverse_loops(gradient_kernel(integrate, ("store",)))
    assert {Op.SIN, Op.COS} <= {s.op for s in N.walk(before.body) if isinstance(s, N.Compute)}


def test_a_cheap_body_keeps_the_snapshot():
    assert [s.name for s in N.adstacks_of(gradient_kernel(cheap).tasks[0])] == ["v_stack"]


def test_the_cost_table_covers_every_op():
    assert set(COST) == set(Op)
    assert COST[Op.SIN] > COST[Op.MUL] and COST[Op.DIV] > COST[Op.ADD]

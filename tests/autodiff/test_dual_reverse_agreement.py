"""Forward and reverse mode agree: `<J v, w>` from forward mode (FwdMode or kernel.fwd) equals
`<v, J^T w>` from reverse mode (kernel.grad with the outputs' .grad = w), for random v and w, on kernels
with dynamic control flow. The two derivatives share only the partials table; everything else (dual
slots in forward order vs adstack snapshots replayed backwards) is independent.
"""
import numpy as np
import pytest

import spvad as sp

from agreement_kernels import CASES

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


def _device(args):
    out = []
    for a in args:
        if not isinstance(a, tuple):
            out.append(a)
        elif a[0] == "const":
            out.append(sp.from_numpy(a[1]))
        else:
            out.append(sp.from_numpy(a[1], needs_grad=True, needs_dual=True))
    return out


def _tagged(args, kind):
    return [k for k, a in enumerate(args) if isinstance(a, tuple) and a[0] == kind]


def _random_dir(rng, shape):
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(0.5, 1.5, shape)).astype(np.float32)


def test_at_least_twelve_kernels():
    assert len(CASES) >= 12


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_reverse(name, rng):
    kernel, make = CASES[name]
    args = make(rng)
    ins, outs = _tagged(args, "in"), _tagged(args, "out")
    v = {k: _random_dir(rng, args[k][1].shape) for k in ins}
    w = {k: _random_dir(rng, args[k][1].shape) for k in outs}

    # forward mode: one launch carrying v through the duals
    fwd = _device(args)
    if len(ins) == 1:
        with sp.FwdMode(loss=fwd[outs[0]], param=fwd[ins[0]], seed=v[ins[0]].reshape(-1)):
            kernel(*fwd)
    else:
        for k in ins:
            fwd[k].dual.from_numpy(v[k])
        kernel.fwd(*fwd)
    jv_w = sum(float(np.sum(fwd[k].dual.to_numpy().astype(np.float64) * w[k])) for k in outs)

    # reverse mode: forward launch, then the gradient launch seeded with w
    rev = _device(args)
    kernel(*rev)
    for k in outs:
        rev[k].grad.from_numpy(w[k])
    kernel.grad(*rev)
    terms = [rev[k].grad.to_numpy().astype(np.float64) * v[k] for k in ins]
    v_jtw = sum(float(np.sum(t)) for t in terms)
    scale = sum(float(np.sum(np.abs(t))) for t in terms)

    # the forward-mode launch computes the primal outputs too
    for k in outs:
        np.testing.assert_allclose(fwd[k].to_numpy(), rev[k].to_numpy(), rtol=1e-6, atol=1e-6)
    assert scale > 1e-3, "vacuous: the derivative is (almost) zero"
    assert abs(jv_w - v_jtw) <= 2e-5 * scale, f"<Jv,w>={jv_w!r} but <v,J^T w>={v_jtw!r} (scale {scale:.3g})"

"""Gradient checking for the autodiff tests: run a kernel and its `.grad` on the device, compare with an
independent float64 numpy reference and the central finite differences of that reference.

A reference has the kernel's signature and writes its outputs in place (numpy float64 copies of the
arguments), so `loss[None] += ...` and stores mean the same thing in both.
"""
import contextlib

import numpy as np

import spvad as sp


N = 12   # threads per case of the dynamic-control-flow tables: small, lavapipe runs on 2 CPU cores


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape or (N,), dtype)


def case_table():
    """A table of gradient cases and the function adding one:
    name -> (kernel, reference, make_args(rng), output indices, input indices to differentiate)."""
    cases = {}

    def case(name, kernel, ref, make_args, outs, wrt):
        cases[name] = (kernel, ref, make_args, outs, wrt)
    return cases, case


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data with random signs (a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def positive(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    return rng.uniform(lo, hi, shape).astype(dtype)


def _f64(args):
    """float64 copies of the float arrays (the values the device sees, rounded to its dtype first)."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            out.append(a.astype(np.float64) if a.dtype.kind == "f" else a.copy())
        else:
            out.append(a)
    return out


def reference(ref, args, outs):
    """Run the float64 reference; returns the outputs (float64 arrays)."""
    a = _f64(args)
    ref(*a)
    return [a[k] for k in outs]


def reference_loss(ref, args, outs, seeds):
    return sum(float(np.sum(s * o)) for s, o in zip(seeds, reference(ref, args, outs)))


def finite_differences(ref, args, outs, seeds, k, eps=1e-6):
    """d loss / d args[k] by central differences in float64, loss = sum(seed * output)."""
    base = _f64(args)
    g = np.zeros(base[k].shape)
    for j in np.ndindex(base[k].shape):
        vals = []
        for h in (eps, -eps):
            a = list(base)
            a[k] = base[k].copy()
            a[k][j] += h
            vals.append(reference_loss(ref, a, outs, seeds))
        g[j] = (vals[0] - vals[1]) / (2 * eps)
    return g


def device_args(args, grad):
    """ndarrays for the numpy arguments (those at index in `grad` get needs_grad), scalars pass through."""
    return [sp.from_numpy(a, needs_grad=k in grad) if isinstance(a, np.ndarray) else a
            for k, a in enumerate(args)]


def assert_close(got, want, rtol, what):
    """rtol, plus an absolute floor of rtol * max|want| for elements whose exact value is near 0."""
    want = np.asarray(want, dtype=np.float64)
    atol = rtol * max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol, err_msg=what)


def check_grad(kernel, ref, args, outs, wrt, rng, rtol=1e-4, fwd_rtol=1e-4, eps=1e-6, seeds=None):
    """Forward on the device == reference; `kernel.grad` == finite differences of the reference, for
    loss = sum(seed * output) over the outputs at index `outs`, w.r.t. the arrays at index `wrt`.
    Returns the device arguments (for further checks)."""
    dev = device_args(args, set(outs) | set(wrt))
    kernel(*dev)
    want = reference(ref, args, outs)
    for k, w in zip(outs, want):
        assert_close(dev[k].to_numpy(), w, fwd_rtol, f"forward output {k} of {kernel.name}")
    if seeds is None:
        seeds = [rand(rng, np.shape(args[k]), 0.5, 1.5, np.float64) for k in outs]
    for k, s in zip(outs, seeds):
        dev[k].grad.from_numpy(s)
    kernel.grad(*dev)
    for k in wrt:
        fd = finite_differences(ref, args, outs, seeds, k, eps)
        assert np.any(fd != 0), f"test is vacuous: zero gradient w.r.t. argument {k}"
        assert_close(dev[k].grad.to_numpy(), fd, rtol, f"gradient w.r.t. argument {k} of {kernel.name}")
    return dev


def check_case(case, rng):
    """One row of a gradient table: (kernel, reference, make_args(rng), outputs, inputs to differentiate)."""
    kernel, ref, make_args, outs, wrt = case
    args = make_args(rng)
    if any(getattr(a, "dtype", None) == np.float64 for a in args) and \
            not sp.device_info()["features"].get("float64"):
        import pytest
        pytest.skip("device has no float64")
    return check_grad(kernel, ref, args, outs, wrt, rng)


@contextlib.contextmanager
def maybe_debug(debug):
    """With `debug`, the test's backend runs with debug=True (bounds checks on the device) and the next sync,
    at the end, must report nothing out of bounds; the plain runtime is back afterwards."""
    backend = sp.device_info()["backend"]
    if debug:
        sp.init(backend=backend, debug=True)
    try:
        yield
        sp.sync()   # debug: no out-of-bounds report
    finally:
        if debug:
            sp.init(backend=backend)

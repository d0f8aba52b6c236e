"""`sp.template()` parameters (Taichi's ti.template(): an ndarray, or a Python value bound at compile time) and
loop indices or arguments assigned in the body (Python's rule: the iteration is unaffected), forward, in
reverse (k.grad, sp.Tape) and in forward mode, against float64 numpy, on Vulkan and on the interpreter."""
import numpy as np
import pytest

import spvad as sp
from adcheck import assert_close, rand
from modes import check_modes

pytestmark = pytest.mark.backends   # each test runs on Vulkan and on the interpreter backend


# ---- sp.template() -------------------------------------------------------------------------------------
@sp.func
def square(v):
    return v * v


@sp.func
def wave(v):
    return sp.sin(v) + v


@sp.kernel
def apply(src: sp.template(), dst: sp.template(), f: sp.template(), scale: sp.template(), offsets: sp.template()):
    for i in src:
        dst[i] = f(src[i]) * scale + offsets[i % 2]


def apply_ref(f):
    def ref(src, dst, _f, scale, offsets):
        dst[:] = f(src) * scale + np.array(offsets)[np.arange(len(src)) % 2]
    return ref


def test_template_arguments_in_every_mode(rng):
    for f, ref_f, scale in ((square, lambda v: v * v, 2.0), (wave, lambda v: np.sin(v) + v, -0.5)):
        args = [rand(rng, 9), np.zeros(9, np.float32), f, scale, (0.25, -1.0)]
        check_modes(apply, apply_ref(ref_f), args, outs=[1], wrt=[0], rng=rng)


def test_template_specialises_per_value_not_per_array(rng):
    a, b, c, d = (sp.from_numpy(rand(rng, 4)) for _ in range(4))
    apply(a, b, square, 2.0, (0.0, 1.0))
    compiled = len(apply._cache)
    apply(c, d, square, 2.0, (0.0, 1.0))              # other ndarrays of the same type: the same kernel
    assert len(apply._cache) == compiled
    apply(c, d, square, 2.0, [0.0, 1.0])              # values are compile-time constants: a list is not a tuple
    apply(c, d, square, 3.0, (0.0, 1.0))
    apply(c, d, square, 3, (0.0, 1.0))                # 3 and 3.0 are different constants
    apply(c, d, wave, 3.0, (0.0, 1.0))
    assert len(apply._cache) == compiled + 4
    np.testing.assert_allclose(d.to_numpy(), (np.sin(c.to_numpy()) + c.to_numpy()) * 3.0 + [0, 1, 0, 1],
                               rtol=1e-5)


@sp.kernel
def advect(vel: sp.template(), q: sp.template(), new_q: sp.template()):
    """smoke's `advect(vf: ti.template(), qf: ti.template(), new_qf: ti.template())`, in 1-D: semi-Lagrangian
    with linear interpolation, clamped at the ends."""
    for i in q:
        p = sp.clamp(i - vel[i], 0.0, q.shape[0] - 1.001)
        k = int(p)
        t = p - k
        new_q[i] = q[k] * (1.0 - t) + q[k + 1] * t


def advect_ref(vel, q):
    p = np.clip(np.arange(len(q)) - vel, 0.0, len(q) - 1.001)
    k = p.astype(int)
    t = p - k
    return q[k] * (1 - t) + q[k + 1] * t


def test_double_buffered_template_arguments_under_a_tape(rng):
    """The buffers swap roles every step (smoke's `advect(v, q, q_tmp); advect(v, q_tmp, q)`)."""
    n, steps = 12, 4
    vel0, q0 = rng.uniform(-1.5, 1.5, n).astype(np.float32), rand(rng, n)
    vel, q = sp.from_numpy(vel0), sp.from_numpy(q0, needs_grad=True)
    tmp = sp.ndarray(sp.f32, (n,), needs_grad=True)
    w = rand(rng, n)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)

    @sp.kernel
    def objective(q: sp.template(), w: sp.Array, loss: sp.Array):
        for i in q:
            loss[None] += q[i] * q[i] * w[i]

    with sp.Tape(loss):
        for _ in range(steps):
            advect(vel, q, tmp)
            advect(vel, tmp, q)
        objective(q, sp.from_numpy(w), loss)

    def total(q):
        for _ in range(2 * steps):
            q = advect_ref(vel0.astype(np.float64), q)
        return float(np.sum(q * q * w))
    q64, eps = q0.astype(np.float64), 1e-6
    fd = np.array([(total(q64 + eps * e) - total(q64 - eps * e)) / (2 * eps) for e in np.eye(n)])
    assert_close(loss.to_numpy(), total(q64), 1e-5, "loss")
    assert_close(q.grad.to_numpy(), fd, 2e-4, "gradient w.r.t. the initial q")


def test_template_errors():
    x = sp.from_numpy(np.ones(3, np.float32))

    @sp.kernel
    def assigns(x: sp.template(), c: sp.template()):
        for i in x:
            c = 2.0
            x[i] = c
    with pytest.raises(sp.CompileError, match="cannot assign to 'c'"):
        assigns(x, 1.0)


# ---- loop indices and arguments assigned in the body -----------------------------------------------------
@sp.kernel
def rebinds(x: sp.Array, out: sp.Array, s: sp.f32, m: sp.i32, g: sp.vec2):
    for i in range(x.shape[0]):
        i = sp.cast(i, sp.i32)           # as Quadrants' own tests write it
        s = s * x[i]                     # a scalar argument: each thread starts from the argument's value
        g = g * x[i] + 1.0               # a vector argument too
        acc = 0.0
        for k in range(m):
            if k % 2 == 1:
                k = k * 10               # on odd iterations only: the reads below see either value
            acc += x[i] * k
        n = 0
        for j in range(3):
            j = j + 5                    # the loop still runs 3 times
            n += j
        out[i] = acc * s + g[0] * g[1] + n


def rebinds_ref(x, out, s, m, g):
    ks = np.array([k * 10 if k % 2 == 1 else k for k in range(m)])
    gx = np.array(g)[None, :] * x[:, None] + 1.0
    out[:] = x * ks.sum() * (s * x) + gx[:, 0] * gx[:, 1] + (5 + 6 + 7)


def test_loop_index_and_arguments_rebound_in_the_body(rng):
    args = [rand(rng, 6), np.zeros(6, np.float32), 1.5, 5, (0.5, -2.0)]
    check_modes(rebinds, rebinds_ref, args, outs=[1], wrt=[0], rng=rng)


@sp.kernel
def rebinds_parallel_index(x: sp.Array, out: sp.Array):
    for i, j in x:
        j = x.shape[1] - 1 - j           # a mirrored column; the thread still writes its own row
        i = i * 1.0                      # a float now, as in Python
        out[int(i), j] = x[int(i), j] * (i + 1.0)


def rebinds_parallel_index_ref(x, out):
    out[:] = x * (np.arange(x.shape[0])[:, None] + 1.0)


def test_parallel_loop_indices_rebound(rng):
    args = [rand(rng, (3, 4)), np.zeros((3, 4), np.float32)]
    check_modes(rebinds_parallel_index, rebinds_parallel_index_ref, args, outs=[1], wrt=[0], rng=rng)


def test_rebinding_to_another_kind_is_refused():
    @sp.kernel
    def to_vector(x: sp.Array):
        for i in range(x.shape[0]):
            i = sp.vec2(1.0, 2.0)
            x[0] = i[0]
    with pytest.raises(sp.CompileError, match="holds a scalar; cannot assign a vec2"):
        to_vector(sp.from_numpy(np.ones(2, np.float32)))

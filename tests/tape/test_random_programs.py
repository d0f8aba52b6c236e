"""Random programs under a Tape: sequences of launches of a few small kernels over a pool of four buffers
(reuse, swaps, aliased arguments, in-place updates) and host writes (fill, from_numpy, setitem). Each
program is re-run in float64 numpy; its gradients with respect to the buffers' first contents and a
weight array must match the central finite differences of the numpy program."""
import numpy as np
import pytest

import spvad as sp

pytestmark = pytest.mark.backends   # Vulkan, the interpreter, and Vulkan with debug=True

N = 6            # elements per buffer
POOL = 4         # buffers
PROGRAMS = 200   # random programs checked
LENGTH = (3, 16)


@sp.kernel
def mapped(src: sp.Array, dst: sp.Array, w: sp.Array):
    for i in range(src.shape[0]):
        dst[i] = sp.sin(src[i]) * w[i] + 0.5 * src[i]


@sp.kernel
def relax(x: sp.Array, w: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] + 0.3 * sp.tanh(x[i] * w[i])


@sp.kernel
def mix(a: sp.Array, b: sp.Array, dst: sp.Array):
    for i in range(a.shape[0]):
        dst[i] = a[i] * sp.cos(b[i])


@sp.kernel
def accumulate(src: sp.Array, dst: sp.Array):
    for i in range(src.shape[0]):
        dst[i] += 0.5 * src[i] * src[i]


@sp.kernel
def rotate(src: sp.Array, dst: sp.Array):
    for i in range(src.shape[0]):
        dst[(i + 1) % src.shape[0]] = 0.9 * src[i] + 0.1 * src[i] * src[i]


@sp.kernel
def weighted_squares(x: sp.Array, loss: sp.Array, c: sp.f32):
    for i in range(x.shape[0]):
        loss[None] += c * x[i] * x[i]


def numpy_op(op, bufs, w):
    """The same operation on float64 numpy buffers (elementwise kernels read before they write)."""
    kind, args = op[0], op[1:]
    if kind == "mapped":
        s, d = args
        bufs[d] = np.sin(bufs[s]) * w + 0.5 * bufs[s]
    elif kind == "relax":
        (x,) = args
        bufs[x] = bufs[x] + 0.3 * np.tanh(bufs[x] * w)
    elif kind == "mix":
        a, b, d = args
        bufs[d] = bufs[a] * np.cos(bufs[b])
    elif kind == "accumulate":
        s, d = args
        bufs[d] = bufs[d] + 0.5 * bufs[s] * bufs[s]
    elif kind == "rotate":
        s, d = args
        bufs[d] = np.roll(0.9 * bufs[s] + 0.1 * bufs[s] ** 2, 1)
    elif kind == "fill":
        bufs[args[0]] = np.full(N, args[1])
    elif kind == "from_numpy":
        bufs[args[0]] = np.array(args[1], np.float64)
    elif kind == "setitem":
        x, j, v = args
        bufs[x] = bufs[x].copy()
        bufs[x][j] = v


def device_op(op, bufs, w):
    kind, args = op[0], op[1:]
    if kind == "mapped":
        mapped(bufs[args[0]], bufs[args[1]], w)
    elif kind == "relax":
        relax(bufs[args[0]], w)
    elif kind == "mix":
        mix(*(bufs[k] for k in args))
    elif kind == "accumulate":
        accumulate(bufs[args[0]], bufs[args[1]])
    elif kind == "rotate":
        rotate(bufs[args[0]], bufs[args[1]])
    elif kind == "fill":
        bufs[args[0]].fill(args[1])
    elif kind == "from_numpy":
        bufs[args[0]].from_numpy(np.asarray(args[1], np.float32))
    elif kind == "setitem":
        bufs[args[0]][args[1]] = args[2]


def random_program(rng):
    ops = []
    for _ in range(rng.integers(*LENGTH)):
        kind = rng.choice(["mapped", "relax", "mix", "accumulate", "rotate", "mapped", "mix", "host"])
        pick = lambda: int(rng.integers(POOL))   # noqa: E731
        if kind == "mapped":
            ops.append(("mapped", pick(), pick()))
        elif kind == "relax":
            ops.append(("relax", pick()))
        elif kind == "mix":
            ops.append(("mix", pick(), pick(), pick()))   # any aliasing, dst == a == b included
        elif kind == "accumulate":
            ops.append(("accumulate", pick(), pick()))
        elif kind == "rotate":   # a permutation: reading and writing one buffer would race between threads
            s = pick()
            ops.append(("rotate", s, (s + 1 + int(rng.integers(POOL - 1))) % POOL))
        else:
            host = rng.choice(["fill", "from_numpy", "setitem"])
            if host == "fill":
                ops.append(("fill", pick(), float(np.float32(rng.uniform(-1, 1)))))
            elif host == "from_numpy":
                ops.append(("from_numpy", pick(), [float(v) for v in rng.uniform(-1, 1, N).astype(np.float32)]))
            else:
                ops.append(("setitem", pick(), int(rng.integers(N)), float(np.float32(rng.uniform(-1, 1)))))
    coeffs = [float(np.float32(c)) for c in rng.uniform(0.2, 1.0, POOL)]
    return ops, coeffs


def numpy_loss(ops, coeffs, start, w):
    bufs = [b.astype(np.float64) for b in start]
    for op in ops:
        numpy_op(op, bufs, w)
    return sum(c * np.sum(b * b) for c, b in zip(coeffs, bufs)), bufs


def central_differences(ops, coeffs, start, w, eps=1e-6):
    params = [b.astype(np.float64) for b in start] + [w.astype(np.float64)]
    grads = []
    for k, p in enumerate(params):
        g = np.zeros(N)
        for j in range(N):
            hi, lo = [q.copy() for q in params], [q.copy() for q in params]
            hi[k][j] += eps
            lo[k][j] -= eps
            g[j] = (numpy_loss(ops, coeffs, hi[:POOL], hi[POOL])[0] -
                    numpy_loss(ops, coeffs, lo[:POOL], lo[POOL])[0]) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("chunk", range(4))
def test_random_programs_match_finite_differences(chunk):
    rng = np.random.default_rng(20261126 + chunk)
    kept = 0
    for _ in range(PROGRAMS // 4):
        ops, coeffs = random_program(rng)
        start = [rng.uniform(-1, 1, N).astype(np.float32) for _ in range(POOL)]
        w0 = rng.uniform(0.3, 1.2, N).astype(np.float32)
        bufs = [sp.from_numpy(b, needs_grad=True) for b in start]
        w = sp.from_numpy(w0, needs_grad=True)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        with sp.Tape(loss) as tape:
            for op in ops:
                device_op(op, bufs, w)
            for b, c in zip(bufs, coeffs):
                weighted_squares(b, loss, c)
        kept += tape.checkpoint_bytes
        want_loss, want_bufs = numpy_loss(ops, coeffs, start, w0)
        where = f"program {ops}"
        np.testing.assert_allclose(loss[None], want_loss, rtol=1e-4, err_msg=where)
        for b, want in zip(bufs, want_bufs):   # the Tape leaves the arrays as the forward did
            np.testing.assert_allclose(b.to_numpy(), want, rtol=1e-4, atol=1e-5, err_msg=where)
        fd = central_differences(ops, coeffs, start, w0)
        for got, want in zip([b.grad.to_numpy() for b in bufs] + [w.grad.to_numpy()], fd):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(want).max()),
                                       err_msg=where)
    assert kept > 0   # the programs did overwrite contents their gradients needed

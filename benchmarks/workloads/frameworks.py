"""The systems NVIDIA users run, as peers of spvad on three workloads (integrator, elementwise, mass_spring):
- `jax`: `jax.jit`, gradients by `jax.grad` through `lax.fori_loop` / `lax.scan`;
- `torch`: eager PyTorch with autograd; `torch-compile`: the same functions through `torch.compile`;
- `cuda`: hand-written CUDA C through CuPy's RawKernel, forward and hand-derived reverse, from the same
  derivations as the GLSL limit (benchmarks/limit/*.comp).
Each runs on the framework's default device: a CUDA GPU when there is one, else the CPU builds of jax and torch
(so CI exercises this code); `cuda` is UNAVAILABLE without CuPy and a CUDA device, with the reason. Every result
is checked against the workload's float64 reference, as spvad's is."""
import importlib

import numpy as np

from .common import Op, Unavailable

SYSTEMS = ("jax", "torch", "torch-compile", "cuda")
WORKLOADS = ("integrator", "elementwise", "mass_spring")


def supports(system, workload):
    return system in SYSTEMS and workload in WORKLOADS


def unavailable(system):
    """None when `system` can run here, else why not (checked once, before any workload)."""
    try:
        if system == "jax":
            _jax()
        elif system in ("torch", "torch-compile"):
            _torch()
        elif system == "cuda":
            _cupy()
    except Unavailable as e:
        return str(e)
    return None


def prepare(system, workload, cfg, ref):
    """The workload's Ops for `system` (module functions named `_<workload>_<jax|torch|cuda>`)."""
    kind = "torch" if system == "torch-compile" else system
    build = globals()[f"_{workload}_{kind}"]
    return build(cfg, ref, compiled=True) if system == "torch-compile" else build(cfg, ref)


# ---- the frameworks, imported on first use --------------------------------------------------------------
def _import(name, why):
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure makes the system unavailable
        raise Unavailable(f"import {name} failed ({why}): {e}") from None


def _jax():
    jax = _import("jax", "pip install jax")
    return jax, importlib.import_module("jax.numpy")


def _torch():
    return _import("torch", "pip install torch")


def _cupy():
    cp = _import("cupy", "CuPy needs the CUDA toolkit and an NVIDIA GPU")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"no CUDA device: {e}") from None
    if count == 0:
        raise Unavailable("no CUDA device")
    return cp


def _torch_device(torch):
    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_sync(torch):
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)


def _maybe_compile(torch, fn, compiled):
    if not compiled:
        return fn
    try:
        return torch.compile(fn)
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"torch.compile failed: {e}") from None


def _torch_runs(torch, fn, arrays, compiled):
    """fn (torch.compile'd when asked) of leaf tensors made from `arrays` on torch's device: (the tensors, a dict
    whose "y" is the last result, run_forward under no_grad, run_backward: sum(fn(...)).backward() into .grad)."""
    fn = _maybe_compile(torch, fn, compiled)
    dev = _torch_device(torch)
    leaves = [torch.tensor(a, device=dev, requires_grad=True) for a in arrays]
    out = {}

    def run_forward():
        with torch.no_grad():
            out["y"] = fn(*leaves)

    def run_backward():
        for t in leaves:
            t.grad = None
        out["y"] = fn(*leaves)
        out["y"].sum().backward()

    return leaves, out, run_forward, run_backward


def _numpy(a):
    """A framework array as float64 numpy (torch tensors are detached first)."""
    a = a.detach().cpu() if hasattr(a, "detach") else a
    return np.asarray(a, dtype=np.float64)


# ---- the integrator: v = v + 0.01*sin(v)*w[i], `steps` times; gradients of sum(y) w.r.t. x and w ---------
def _integrator_checks():
    from .integrator import _check_forward, _check_gradient
    return _check_forward, _check_gradient


def _integrator_jax(cfg, ref):
    jax, jnp = _jax()
    check_fwd, check_grad = _integrator_checks()
    steps = cfg["steps"]

    def integrate(x, w):
        return jax.lax.fori_loop(0, steps, lambda _, v: v + 0.01 * jnp.sin(v) * w, x)

    forward = jax.jit(integrate)
    gradient = jax.jit(jax.grad(lambda x, w: jnp.sum(integrate(x, w)), argnums=(0, 1)))
    x, w = jnp.asarray(ref["x"]), jnp.asarray(ref["w"])
    out = {}

    def run_forward():
        out["y"] = forward(x, w)

    def run_gradient():
        out["g"] = gradient(x, w)

    sync = lambda: jax.block_until_ready(out)  # noqa: E731
    return [Op("forward", run_forward, sync, check=lambda: check_fwd(_numpy(out["y"]), ref)),
            Op("gradient", run_gradient, sync,
               check=lambda: check_grad(_numpy(out["g"][0]), _numpy(out["g"][1]), ref))]


def _integrator_torch(cfg, ref, compiled=False):
    torch = _torch()
    check_fwd, check_grad = _integrator_checks()
    steps = cfg["steps"]

    def integrate(x, w):
        v = x
        for _ in range(steps):
            v = v + 0.01 * torch.sin(v) * w
        return v

    (x, w), out, run_forward, run_gradient = _torch_runs(torch, integrate, (ref["x"], ref["w"]), compiled)
    sync = _torch_sync(torch)
    return [Op("forward", run_forward, sync, check=lambda: check_fwd(_numpy(out["y"]), ref)),
            Op("gradient", run_gradient, sync, check=lambda: check_grad(_numpy(x.grad), _numpy(w.grad), ref))]


INTEGRATOR_CUDA = r"""
extern "C" __global__ void forward(const float* x, const float* w, float* y, unsigned n, int steps) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], wi = w[i];
    for (int s = 0; s < steps; s++) v = v + 0.01f * sinf(v) * wi;
    y[i] = v;
}
// Hand-written reverse (integrator_gradient.comp's derivation): the forward sweep keeps each step's partials
// a = 1 + 0.01 cos(v) w and b = 0.01 sin(v) in registers/local memory, the reverse sweep two multiply-adds.
extern "C" __global__ void gradient(const float* x, const float* w, float* gy, float* gx, float* gw,
                                    unsigned n, int steps) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (steps > CAP) { gx[i] = __int_as_float(0x7fc00000); return; }
    float v = x[i], wi = w[i], a[CAP], b[CAP];
    for (int s = 0; s < steps; s++) {
        float sn, cs;
        sincosf(v, &sn, &cs);
        a[s] = 1.0f + 0.01f * cs * wi;
        b[s] = 0.01f * sn;
        v = v + 0.01f * sn * wi;
    }
    float g = gy[i], gwi = 0.0f;
    for (int s = steps - 1; s >= 0; s--) { gwi += g * b[s]; g *= a[s]; }
    gx[i] += g;
    gw[i] += gwi;
    gy[i] = 0.0f;
}
"""


def _blocks(n, block=256):
    return ((n + block - 1) // block,), (block,)


def _integrator_cuda(cfg, ref):
    cp = _cupy()
    check_fwd, check_grad = _integrator_checks()
    n, steps = cfg["threads"], cfg["steps"]
    module = cp.RawModule(code=INTEGRATOR_CUDA, options=(f"-DCAP={steps}", "-use_fast_math"))
    fwd, grad = module.get_function("forward"), module.get_function("gradient")
    x, w = cp.asarray(ref["x"]), cp.asarray(ref["w"])
    y, gy, gx, gw = (cp.zeros(n, cp.float32) for _ in range(4))
    grid, block = _blocks(n)

    def seed():
        gx.fill(0.0)
        gw.fill(0.0)
        gy.fill(1.0)

    sync = cp.cuda.Device().synchronize
    return [Op("forward", lambda: fwd(grid, block, (x, w, y, np.uint32(n), np.int32(steps))), sync,
               check=lambda: check_fwd(cp.asnumpy(y), ref)),
            Op("gradient", lambda: grad(grid, block, (x, w, gy, gx, gw, np.uint32(n), np.int32(steps))), sync,
               setup=seed, check=lambda: check_grad(cp.asnumpy(gx), cp.asnumpy(gw), ref))]


# ---- elementwise: y = tanh(1.5 x + 0.2); x.grad = 1.5 (1 - y^2) -----------------------------------------
def _elementwise_checks():
    from .elementwise import _check_forward, _check_gradient
    return _check_forward, _check_gradient


def check_copy(y, ref):
    from .elementwise import check_copy
    return check_copy(y, ref)


def _elementwise_jax(cfg, ref):
    jax, jnp = _jax()
    check_fwd, check_grad = _elementwise_checks()
    f = lambda x: jnp.tanh(1.5 * x + 0.2)  # noqa: E731
    forward = jax.jit(f)
    gradient = jax.jit(lambda x, gy: jax.vjp(f, x)[1](gy)[0])
    x = jnp.asarray(ref["x"])
    gy = jnp.ones_like(x)
    out = {}

    def run_forward():
        out["y"] = forward(x)

    def run_gradient():
        out["g"] = gradient(x, gy)

    sync = lambda: jax.block_until_ready(out)  # noqa: E731
    return [Op("forward", run_forward, sync, check=lambda: check_fwd(_numpy(out["y"]), ref)),
            Op("gradient", run_gradient, sync, check=lambda: check_grad(_numpy(out["g"]), ref))]


def _elementwise_torch(cfg, ref, compiled=False):
    torch = _torch()
    check_fwd, check_grad = _elementwise_checks()
    (x,), out, run_forward, run_gradient = _torch_runs(torch, lambda x: torch.tanh(1.5 * x + 0.2), (ref["x"],),
                                                       compiled)
    y = torch.empty_like(x, requires_grad=False)

    def run_copy():
        with torch.no_grad():
            y.copy_(x)

    sync = _torch_sync(torch)
    return [Op("forward", run_forward, sync, check=lambda: check_fwd(_numpy(out["y"]), ref)),
            Op("gradient", run_gradient, sync, check=lambda: check_grad(_numpy(x.grad), ref)),
            Op("d2d copy", run_copy, sync, check=lambda: check_copy(y.detach().cpu().numpy(), ref))]


ELEMENTWISE_CUDA = r"""
extern "C" __global__ void forward(const float4* x, float4* y, unsigned n4) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i];
    y[i] = make_float4(tanhf(1.5f * v.x + 0.2f), tanhf(1.5f * v.y + 0.2f), tanhf(1.5f * v.z + 0.2f),
                       tanhf(1.5f * v.w + 0.2f));
}
__device__ float dtanh(float x, float g) { float t = tanhf(1.5f * x + 0.2f); return g * 1.5f * (1.0f - t * t); }
extern "C" __global__ void gradient(const float4* x, float4* gy, float4* gx, unsigned n4) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i], g = gy[i], a = gx[i];
    gx[i] = make_float4(a.x + dtanh(v.x, g.x), a.y + dtanh(v.y, g.y), a.z + dtanh(v.z, g.z), a.w + dtanh(v.w, g.w));
    gy[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
"""


def _elementwise_cuda(cfg, ref):
    cp = _cupy()
    check_fwd, check_grad = _elementwise_checks()
    n = cfg["n"]
    module = cp.RawModule(code=ELEMENTWISE_CUDA, options=("-use_fast_math",))
    fwd, grad = module.get_function("forward"), module.get_function("gradient")
    x = cp.asarray(ref["x"])
    y, gy, gx = (cp.zeros(n, cp.float32) for _ in range(3))
    grid, block = _blocks(n // 4)

    def seed():
        gx.fill(0.0)
        gy.fill(1.0)

    sync = cp.cuda.Device().synchronize
    copy = cp.zeros(n, cp.float32)
    return [Op("forward", lambda: fwd(grid, block, (x, y, np.uint32(n // 4))), sync,
               check=lambda: check_fwd(cp.asnumpy(y), ref)),
            Op("gradient", lambda: grad(grid, block, (x, gy, gx, np.uint32(n // 4))), sync, setup=seed,
               check=lambda: check_grad(cp.asnumpy(gx), ref)),
            Op("d2d copy", lambda: cp.copyto(copy, x), sync, check=lambda: check_copy(cp.asnumpy(copy), ref))]


# ---- mass-spring: the whole simulation and its loss, forward and forward + reverse (a Tape's work) ---------
def _mass_spring_constants():
    from . import mass_spring as ms
    return ms


def _mass_spring_jax(cfg, ref):
    jax, jnp = _jax()
    ms = _mass_spring_constants()
    steps, n = cfg["steps"], cfg["grid"] ** 2
    a, b, rest, free, target = (jnp.asarray(ref[key]) for key in ("a", "b", "rest", "free", "target"))
    gravity = jnp.asarray([0.0, ms.GRAVITY], jnp.float32)

    def loss_of(k, p0):
        def step(state, _):
            x, v = state
            d = x[b] - x[a]
            length = jnp.sqrt(jnp.sum(d * d, axis=1))
            fs = (k * (length - rest) / length)[:, None] * d
            f = jnp.zeros_like(x).at[a].add(fs).at[b].add(-fs)
            v = free[:, None] * (v * ms.DAMPING + ms.DT * (f + gravity))
            return (x + ms.DT * v, v), None
        (x, _), _ = jax.lax.scan(step, (p0, jnp.zeros_like(p0)), None, length=steps)
        return jnp.sum((x - target) ** 2) / n

    forward = jax.jit(loss_of)
    both = jax.jit(jax.value_and_grad(loss_of, argnums=(0, 1)))
    k, p0 = jnp.asarray(ref["k"]), jnp.asarray(ref["p0"])
    out = {}

    def run_forward():
        out["loss"] = forward(k, p0)

    def run_tape():
        out["loss"], out["g"] = both(k, p0)

    sync = lambda: jax.block_until_ready(out)  # noqa: E731
    return [Op("forward", run_forward, sync, check=lambda: ms._check_forward(float(out["loss"]), ref)),
            Op("tape fwd+bwd", run_tape, sync,
               check=lambda: ms._check_gradient(_numpy(out["g"][0]), _numpy(out["g"][1]), ref))]


def _mass_spring_torch(cfg, ref, compiled=False):
    torch = _torch()
    ms = _mass_spring_constants()
    steps, n, dev = cfg["steps"], cfg["grid"] ** 2, _torch_device(torch)
    a, b = (torch.tensor(ref[key], dtype=torch.int64, device=dev) for key in ("a", "b"))
    rest, free, target = (torch.tensor(ref[key], device=dev) for key in ("rest", "free", "target"))
    gravity = torch.tensor([0.0, ms.GRAVITY], device=dev)

    def loss_of(k, p0):
        x, v = p0, torch.zeros_like(p0)
        for _ in range(steps):
            d = x[b] - x[a]
            length = torch.sqrt(torch.sum(d * d, dim=1))
            fs = (k * (length - rest) / length)[:, None] * d
            f = torch.zeros_like(x).index_add(0, a, fs).index_add(0, b, -fs)
            v = free[:, None] * (v * ms.DAMPING + ms.DT * (f + gravity))
            x = x + ms.DT * v
        return torch.sum((x - target) ** 2) / n

    (k, p0), out, run_forward, run_tape = _torch_runs(torch, loss_of, (ref["k"], ref["p0"]), compiled)
    sync = _torch_sync(torch)
    return [Op("forward", run_forward, sync, check=lambda: ms._check_forward(float(out["y"]), ref)),
            Op("tape fwd+bwd", run_tape, sync,
               check=lambda: ms._check_gradient(_numpy(k.grad), _numpy(p0.grad), ref))]


MASS_SPRING_CUDA = r"""
// The GLSL limit's kernels (benchmarks/limit/mass_spring_*.comp) in CUDA C: positions of every step kept in xs
// (T+1, n, 2); v, f and their gradients single (n, 2) arrays updated in place; the reverse hand-derived.
extern "C" __global__ void forces(const float* xs, float* f, const int* a, const int* b, const float* k,
                                  const float* rest, unsigned ns, unsigned n, unsigned t) {
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= ns) return;
    unsigned i = a[s], j = b[s], xt = 2 * t * n;
    float dx = xs[xt + 2 * j] - xs[xt + 2 * i], dy = xs[xt + 2 * j + 1] - xs[xt + 2 * i + 1];
    float len = sqrtf(dx * dx + dy * dy);
    float c = k[s] * (len - rest[s]) / len;
    atomicAdd(&f[2 * i], c * dx); atomicAdd(&f[2 * i + 1], c * dy);
    atomicAdd(&f[2 * j], -c * dx); atomicAdd(&f[2 * j + 1], -c * dy);
}
extern "C" __global__ void advance(float* xs, float* v, float* f, const float* free_, unsigned n, unsigned t) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float fr = free_[i];
    float vx = fr * (v[2 * i] * DAMPING + DT * f[2 * i]);
    float vy = fr * (v[2 * i + 1] * DAMPING + DT * (f[2 * i + 1] + GRAVITY));
    v[2 * i] = vx; v[2 * i + 1] = vy;
    f[2 * i] = 0.0f; f[2 * i + 1] = 0.0f;
    unsigned p = 2 * t * n + 2 * i, q = p + 2 * n;
    xs[q] = xs[p] + DT * vx;
    xs[q + 1] = xs[p + 1] + DT * vy;
}
extern "C" __global__ void final_loss(const float* xs, const float* target, float* loss, unsigned n, unsigned t) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned p = 2 * t * n + 2 * i;
    float dx = xs[p] - target[2 * i], dy = xs[p + 1] - target[2 * i + 1];
    atomicAdd(loss, (dx * dx + dy * dy) / (float)n);
}
extern "C" __global__ void loss_grad(const float* xs, const float* target, float* gx, float* gv, float* gk,
                                     unsigned n, unsigned ns, unsigned t) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned p = 2 * t * n + 2 * i;
        gx[2 * i] = 2.0f * (xs[p] - target[2 * i]) / (float)n;
        gx[2 * i + 1] = 2.0f * (xs[p + 1] - target[2 * i + 1]) / (float)n;
        gv[2 * i] = 0.0f; gv[2 * i + 1] = 0.0f;
    }
    if (i < ns) gk[i] = 0.0f;
}
extern "C" __global__ void advance_grad(const float* gx, float* gv, float* gf, const float* free_, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float fr = free_[i];
    float ux = gv[2 * i] + DT * gx[2 * i], uy = gv[2 * i + 1] + DT * gx[2 * i + 1];
    gv[2 * i] = fr * DAMPING * ux; gv[2 * i + 1] = fr * DAMPING * uy;
    gf[2 * i] = fr * DT * ux; gf[2 * i + 1] = fr * DT * uy;
}
extern "C" __global__ void forces_grad(const float* xs, const float* gf, float* gx, float* gk, const int* a,
                                       const int* b, const float* k, const float* rest, unsigned ns, unsigned n,
                                       unsigned t) {
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= ns) return;
    unsigned i = a[s], j = b[s], xt = 2 * t * n;
    float dx = xs[xt + 2 * j] - xs[xt + 2 * i], dy = xs[xt + 2 * j + 1] - xs[xt + 2 * i + 1];
    float len = sqrtf(dx * dx + dy * dy), r = rest[s], ks = k[s];
    float c = ks * (len - r) / len;
    float gdx = gf[2 * i] - gf[2 * j], gdy = gf[2 * i + 1] - gf[2 * j + 1];
    float gd = gdx * dx + gdy * dy;
    gk[s] += gd * (len - r) / len;
    float q = gd * ks * r / (len * len * len);
    float ddx = c * gdx + q * dx, ddy = c * gdy + q * dy;
    atomicAdd(&gx[2 * j], ddx); atomicAdd(&gx[2 * j + 1], ddy);
    atomicAdd(&gx[2 * i], -ddx); atomicAdd(&gx[2 * i + 1], -ddy);
}
"""


def _mass_spring_cuda(cfg, ref):
    """The limit's launch sequence (mass_spring.prepare_limit) with CUDA kernels: forward, then the reverse
    from the loss back through the steps; each kernel 64-wide blocks, as the limit's."""
    cp = _cupy()
    ms = _mass_spring_constants()
    steps, n, ns = cfg["steps"], cfg["grid"] ** 2, len(ref["a"])
    defines = tuple(f"-D{name}={float(getattr(ms, name))!r}f" for name in ("DT", "DAMPING", "GRAVITY"))
    module = cp.RawModule(code=MASS_SPRING_CUDA, options=defines)
    fn = {name: module.get_function(name) for name in
          ("forces", "advance", "final_loss", "loss_grad", "advance_grad", "forces_grad")}
    xs0 = np.zeros((steps + 1, n, 2), np.float32)
    xs0[0] = ref["p0"]
    xs = cp.asarray(xs0)
    a, b, k, rest, free, target = (cp.asarray(ref[key]) for key in ("a", "b", "k", "rest", "free", "target"))
    v, f, gx, gv, gf = (cp.zeros(2 * n, cp.float32) for _ in range(5))
    loss, gk = cp.zeros(1, cp.float32), cp.zeros(ns, cp.float32)
    u = np.uint32

    def launch(name, threads, *args):
        fn[name](((threads + 63) // 64,), (64,), args)

    def forward():
        for t in range(steps):
            launch("forces", ns, xs, f, a, b, k, rest, u(ns), u(n), u(t))
            launch("advance", n, xs, v, f, free, u(n), u(t))
        launch("final_loss", n, xs, target, loss, u(n), u(steps))

    def tape():
        forward()
        launch("loss_grad", max(n, ns), xs, target, gx, gv, gk, u(n), u(ns), u(steps))
        for t in reversed(range(steps)):
            launch("advance_grad", n, gx, gv, gf, free, u(n))
            launch("forces_grad", ns, xs, gf, gx, gk, a, b, k, rest, u(ns), u(n), u(t))

    def reset():
        for buf in (v, f, loss):
            buf.fill(0.0)

    sync = cp.cuda.Device().synchronize
    return [Op("forward", forward, sync, setup=reset, check=lambda: ms._check_forward(float(loss.get()[0]), ref)),
            Op("tape fwd+bwd", tape, sync, setup=reset,
               check=lambda: ms._check_gradient(cp.asnumpy(gk), cp.asnumpy(gx).reshape(n, 2), ref))]

"""The hand-written CUDA C of benchmarks/workloads/frameworks.py, checked where there is no GPU: each kernel is
compiled as C++ by g++ with a few lines standing in for CUDA's builtins (one thread per call, atomics as plain
adds), run thread by thread over small inputs, and compared with the workloads' float64 references, so a wrong
hand-derived reverse is found here and not first on a GPU machine."""
import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from workloads import elementwise, frameworks, integrator, mass_spring  # noqa: E402

sys.path.pop(0)

SHIM = r"""
#include <math.h>
#define __global__
#define __device__
struct D3 { unsigned x, y, z; };
static D3 blockIdx, blockDim = {1, 1, 1}, threadIdx;
struct float4 { float x, y, z, w; };
static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }
static float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
extern "C" void set_thread(unsigned i) { blockIdx.x = i; }
"""
U = ctypes.c_uint


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def build(tmp_path, source, **defines):
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing (ci/setup.sh installs it)")
    text = SHIM + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + source
    lib = tmp_path / "kernels.so"
    p = subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(lib)], input=text,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return ctypes.CDLL(str(lib))


def run(lib, name, threads, *args):
    fn = getattr(lib, name)
    for i in range(threads):
        lib.set_thread(U(i))
        fn(*args)


def test_integrator(tmp_path):
    cfg = {"threads": 64, "steps": 16}
    ref = integrator.reference(cfg)
    lib = build(tmp_path, frameworks.INTEGRATOR_CUDA, CAP=16)
    n = cfg["threads"]
    y, gy, gx, gw = (np.zeros(n, np.float32) for _ in range(4))
    gy[:] = 1.0
    steps = ctypes.c_int(cfg["steps"])
    run(lib, "forward", n, ptr(ref["x"]), ptr(ref["w"]), ptr(y), U(n), steps)
    run(lib, "gradient", n, ptr(ref["x"]), ptr(ref["w"]), ptr(gy), ptr(gx), ptr(gw), U(n), steps)
    assert integrator._check_forward(y, ref)[0]
    ok, detail = integrator._check_gradient(gx, gw, ref)
    assert ok, detail
    assert not gy.any()                       # y.grad consumed, as spvad's gradient does


def test_elementwise(tmp_path):
    ref = elementwise.reference({"n": 256})
    lib = build(tmp_path, frameworks.ELEMENTWISE_CUDA)
    y, gy, gx = (np.zeros(256, np.float32) for _ in range(3))
    gy[:] = 1.0
    run(lib, "forward", 64, ptr(ref["x"]), ptr(y), U(64))
    run(lib, "gradient", 64, ptr(ref["x"]), ptr(gy), ptr(gx), U(64))
    assert elementwise._check_forward(y, ref)[0]
    ok, detail = elementwise._check_gradient(gx, ref)
    assert ok, detail


def test_mass_spring(tmp_path):
    cfg = {"grid": 6, "steps": 16}
    ref = mass_spring.reference(cfg)
    lib = build(tmp_path, frameworks.MASS_SPRING_CUDA, DT=f"{mass_spring.DT}f", DAMPING=f"{mass_spring.DAMPING}f",
                GRAVITY=f"{mass_spring.GRAVITY}f")
    steps, n, ns = cfg["steps"], cfg["grid"] ** 2, len(ref["a"])
    xs = np.zeros((steps + 1, n, 2), np.float32)
    xs[0] = ref["p0"]
    a, b = (ref[key].astype(np.int32) for key in ("a", "b"))
    k, rest, free, target = (np.ascontiguousarray(ref[key], np.float32) for key in ("k", "rest", "free", "target"))
    v, f, gx, gv, gf = (np.zeros(2 * n, np.float32) for _ in range(5))
    loss, gk = np.zeros(1, np.float32), np.zeros(ns, np.float32)
    for t in range(steps):
        run(lib, "forces", ns, ptr(xs), ptr(f), ptr(a), ptr(b), ptr(k), ptr(rest), U(ns), U(n), U(t))
        run(lib, "advance", n, ptr(xs), ptr(v), ptr(f), ptr(free), U(n), U(t))
    run(lib, "final_loss", n, ptr(xs), ptr(target), ptr(loss), U(n), U(steps))
    run(lib, "loss_grad", max(n, ns), ptr(xs), ptr(target), ptr(gx), ptr(gv), ptr(gk), U(n), U(ns), U(steps))
    for t in reversed(range(steps)):
        run(lib, "advance_grad", n, ptr(gx), ptr(gv), ptr(gf), ptr(free), U(n))
        run(lib, "forces_grad", ns, ptr(xs), ptr(gf), ptr(gx), ptr(gk), ptr(a), ptr(b), ptr(k), ptr(rest), U(ns),
            U(n), U(t))
    assert mass_spring._check_forward(float(loss[0]), ref)[0]
    ok, detail = mass_spring._check_gradient(gk, gx.reshape(n, 2), ref)
    assert ok, detail

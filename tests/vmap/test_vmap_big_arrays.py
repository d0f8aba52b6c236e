"""sp.vmap's arrays past the device's largest storage binding (the batch workload's (1024, 129, 256, 2) states
are 270 MB, lavapipe binds 128 MiB): reached by address (spirv/lower_addressed.py), in one memory block or
in several. A batched scatter of spring forces, its per-instance gradients and the shared stiffnesses'
gradient summed over the batch, against float64 numpy, on both backends (the interpreter has no addressed
arrays: it is the oracle). Limits are shrunk so that small arrays take the path (tests/launch/test_big_arrays.py
does the same for plain kernels)."""
import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.spirv import tools

pytestmark = pytest.mark.backends
B, M, S = 8, 300, 1200            # instances, particles, springs: x is 9.6 KB, k 4.8 KB
RANGE = 1 << 12                   # bytes: arrays past 4 KiB are addressed
BLOCKS = {"one block": 1 << 20, "many blocks": 1 << 12}


@sp.kernel
def spring_scatter(x: sp.Array, f: sp.Array, a: sp.Array, k: sp.Array):
    for s in range(a.shape[0]):
        i = a[s]
        d = x[i + 1] - x[i]
        e = k[s] * d * d
        f[i] += e
        f[i + 1] -= e


batched = sp.vmap(spring_scatter, in_axes=(0, 0, None, None))


def addressed_limits(monkeypatch, block):
    """On Vulkan: arrays past RANGE bytes are addressed, in blocks of `block` bytes (the interpreter: no-op)."""
    rt = runtime.get()
    if rt.backend != "vulkan":
        return False
    monkeypatch.setitem(rt.device.info["limits"], "max_storage_buffer_range", RANGE)
    monkeypatch.setattr(rt.device, "address_chunk_bytes", block)
    return True


def reference(xh, ah, kh, fbar):
    """f (B, M), and d sum(fbar * f) / d x (B, M), d / d k (S,) in float64."""
    x, k, fbar = xh.astype(np.float64), kh.astype(np.float64), fbar.astype(np.float64)
    d = x[:, ah + 1] - x[:, ah]
    e = k * d * d
    f = np.zeros_like(x)
    np.add.at(f, (slice(None), ah), e)
    np.add.at(f, (slice(None), ah + 1), -e)
    g = fbar[:, ah] - fbar[:, ah + 1]              # d loss / d e, per instance and spring
    gx = np.zeros_like(x)
    np.add.at(gx, (slice(None), ah + 1), g * 2 * k * d)
    np.add.at(gx, (slice(None), ah), -g * 2 * k * d)
    return f, gx, np.sum(g * d * d, axis=0)


@pytest.mark.parametrize("blocks", BLOCKS)
def test_batched_scatter_and_shared_gradient_through_addresses(monkeypatch, rng, blocks):
    addressed = addressed_limits(monkeypatch, BLOCKS[blocks])
    xh = rng.uniform(-1.0, 1.0, (B, M)).astype(np.float32)
    ah = rng.integers(0, M - 1, S).astype(np.int32)
    kh = rng.uniform(0.5, 1.5, S).astype(np.float32)
    fbar = rng.uniform(0.5, 1.5, (B, M)).astype(np.float32)
    x, f = sp.from_numpy(xh, needs_grad=True), sp.ndarray(sp.f32, (B, M), needs_grad=True)
    a, k = sp.from_numpy(ah), sp.from_numpy(kh, needs_grad=True)
    if addressed:
        assert x.buffer.addressed and f.grad.buffer.addressed and k.grad.buffer.addressed
        assert (len(x.buffer._blocks) == 1) == (blocks == "one block")
    batched(x, f, a, k)
    f.grad.from_numpy(fbar)
    batched.grad(x, f, a, k)
    want_f, want_gx, want_gk = reference(xh, ah, kh, fbar)
    np.testing.assert_allclose(f.to_numpy(), want_f, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), want_gx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(k.grad.to_numpy(), want_gk, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["vulkan"])   # (addressed arrays are Vulkan's)
@pytest.mark.parametrize("blocks", BLOCKS)
def test_an_access_reads_the_address_table_only_for_arrays_in_several_blocks(monkeypatch, rng, backend, blocks):
    """An array of one block has its address read once per table at the top of main, and its accesses index it
    directly; an array in several blocks reads its element's block (i >> shift) from the table per access (a
    module variant of its own): lavapipe reads a table entry lane by lane, ~30% of such an access's time in
    the batch workload."""
    addressed_limits(monkeypatch, BLOCKS[blocks])
    x = sp.from_numpy(rng.uniform(-1.0, 1.0, (B, M)).astype(np.float32), needs_grad=True)
    f = sp.ndarray(sp.f32, (B, M), needs_grad=True)
    a, k = sp.from_numpy(rng.integers(0, M - 1, S).astype(np.int32)), sp.from_numpy(np.ones(S, np.float32))
    batched(x, f, a, k)
    specs, _, _ = batched._bind((x, f, a, k))
    (task,) = batched._compiled(specs).tasks
    several = blocks == "many blocks"   # (the compiled kernel is shared: both tests' variants are kept)
    variants = [low for key, low in task.variants.items()
                if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], frozenset) and key[1]
                and any(k[0] == "several blocks" for k in key[1]) == several]
    assert len(variants) == 1, "no such addressed variant, or more than one, was lowered"
    text = tools.disassemble(variants[0].spirv)
    tables = {line.split()[0] for line in text.splitlines() if "_addresses = OpVariable" in line}
    reads = [line for line in text.splitlines() if "OpAccessChain" in line and "_addresses %int_2" in line]
    entry_reads = sum(line.endswith("%uint_0") for line in reads)
    # x, f, a and k are all past 4 KiB: a[s], x[i + 1], x[i], k[s] and the two atomic adds into f
    assert len(tables) == 4
    if blocks == "one block":
        assert entry_reads == len(reads) == 4
    else:
        assert entry_reads == 0 and len(reads) == 6

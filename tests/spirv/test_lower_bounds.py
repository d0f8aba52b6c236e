"""What debug bounds checks cost and change: nothing without debug (same SPIR-V, no flag buffer where a kernel
had none); under debug the flag buffer and every axis's shape are bound, in-bounds programs give identical
results, and debug and non-debug builds never share a compile-cache entry (in memory or on disk)."""
import sys

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.ir import nodes as N
from spvad.frontend import ArraySpec, build_kernel
from spvad.spirv import tools
from spvad.spirv.lower import lower_task
from spvad.spirv.lower_bounds import record_words
from tests import common_kernels

kernel_module = sys.modules["spvad.kernel"]   # `spvad.kernel` the attribute is the decorator


@pytest.fixture
def debug_off_then_on():
    """Yields a function switching to a debug runtime; the default runtime is back afterwards."""
    def switch():
        runtime.get().sync()
        sp.init(debug=True)
    yield switch
    rt = runtime.current()
    try:
        rt.sync()
        msgs = rt.device.validation_messages()
        assert not msgs, "Vulkan validation messages:\n" + "\n".join(msgs)
    finally:
        sp.init()


@sp.kernel
def saxpy(x: sp.Array, y: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@sp.kernel
def blur_rows(a: sp.Array, b: sp.Array):
    for i, j in sp.ndrange(a.shape[0], a.shape[1] - 2):
        b[i, j + 1] = (a[i, j] + a[i, j + 1] + a[i, j + 2]) / 3.0


@sp.kernel
def histogram(x: sp.Array, hist: sp.Array, total: sp.Array):
    for i in range(x.shape[0]):
        hist[x[i] % hist.shape[0]] += 1
        total[None] += x[i]


@sp.kernel
def scale_vectors(v: sp.Array, s: sp.Array, out: sp.Array):
    for i in range(v.shape[0]):
        out[i] = v[i] * s[i]


integrate = sp.kernel(common_kernels.integrate)
halve_until_small = sp.kernel(common_kernels.halve_until_small)


def programs(rng):
    """Each row: one in-bounds program (forward, gradient, forward-mode) -> the arrays it leaves."""
    x0 = rng.uniform(0.3, 1.5, 37).astype(np.float32)
    a0 = rng.uniform(-1, 1, (5, 9)).astype(np.float32)
    v0 = rng.uniform(-1, 1, (6, 3)).astype(np.float32)

    def forward():
        x, y = sp.from_numpy(x0), sp.from_numpy(x0[::-1].copy())
        saxpy(x, y, 1.5)
        a, b = sp.from_numpy(a0), sp.ndarray(sp.f32, (5, 9))
        blur_rows(a, b)
        ints = sp.from_numpy((x0 * 100).astype(np.int32))
        hist, total = sp.ndarray(sp.i32, (7,)), sp.ndarray(sp.i32, ())
        histogram(ints, hist, total)
        v, out = sp.from_numpy(v0, dtype=sp.vec3), sp.ndarray(sp.vec3, (6,))
        scale_vectors(v, sp.from_numpy(v0[:, 0].copy()), out)
        return [y, b, hist, total, out]

    def gradient():
        x, w = sp.from_numpy(x0, needs_grad=True), sp.from_numpy(x0[::-1].copy(), needs_grad=True)
        y = sp.ndarray(sp.f32, (37,), needs_grad=True)
        integrate(x, w, y, 20)
        y.grad.fill(1.0)
        integrate.grad(x, w, y, 20)
        h, z = sp.from_numpy(x0 * 4, needs_grad=True), sp.ndarray(sp.f32, (37,), needs_grad=True)
        halve_until_small(h, z)
        z.grad.fill(1.0)
        halve_until_small.grad(h, z)
        return [y, x.grad, w.grad, z, h.grad]

    def forward_mode():
        x, w = sp.from_numpy(x0, needs_dual=True), sp.from_numpy(x0[::-1].copy(), needs_dual=True)
        x.dual.fill(1.0)
        w.dual.fill(0.5)
        y = sp.ndarray(sp.f32, (37,), needs_dual=True)
        integrate.fwd(x, w, y, 20)
        return [y, y.dual]

    return [forward, gradient, forward_mode]


def test_in_bounds_programs_give_identical_results(rng, debug_off_then_on):
    plain = [[a.to_numpy() for a in run()] for run in programs(rng)]
    debug_off_then_on()
    checked = [[a.to_numpy() for a in run()] for run in programs(np.random.default_rng(1234))]
    for want, got in zip(plain, checked):
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)


# ---- the lowering ----------------------------------------------------------------------------------------
def lowered(fn, *specs, bounds_check):
    kernel, _, _ = build_kernel(fn, list(specs))
    return lower_task(kernel, kernel.tasks[0], bounds_check=bounds_check)


F32_1D, F32_2D = ArraySpec(sp.f32, 1), ArraySpec(sp.f32, 2)


def test_without_checks_the_module_is_unchanged():
    """No flag buffer, no extra push constant, no compare-exchange: the module is the default lowering's."""
    kernel, _, _ = build_kernel(saxpy.fn, [F32_1D, F32_1D, sp.f32])
    default = lower_task(kernel, kernel.tasks[0])
    off = lower_task(kernel, kernel.tasks[0], bounds_check=False)
    assert off.spirv == default.spirv
    assert off.flag_binding is None and off.num_buffers == len(off.bindings) == 2
    assert off.bounds_sites == () and off.bounds_word is None and off.flag_words == N.FLAG_WORDS_HEADER + 1
    assert "OpAtomicCompareExchange" not in tools.disassemble(off.spirv)


def test_checks_bind_the_flag_buffer_and_push_every_axis():
    off = lowered(blur_rows.fn, F32_2D, F32_2D, bounds_check=False)
    on = lowered(blur_rows.fn, F32_2D, F32_2D, bounds_check=True)
    # the header reads a's shape; addressing b needs b.shape[1]; checking b needs b.shape[0] too
    assert {f[1:3] for f in off.push_fields if f[0] == "shape"} == {(0, 0), (0, 1), (1, 1)}
    assert {f[1:3] for f in on.push_fields if f[0] == "shape"} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert on.bindings == off.bindings and on.flag_binding == len(on.bindings) == 2
    assert [(what, name, axes) for what, name, _, axes, _ in on.bounds_sites] == \
        [("load", "a", 2)] * 3 + [("store", "b", 2)]
    assert all(loc.lineno > 0 and "a[i, j" in loc.source or "b[i, j + 1]" in loc.source
               for *_, loc in on.bounds_sites)
    # no adstacks: overflow bits, loop-cut word, then the site word, 2 index and 2 shape words
    assert on.bounds_word == N.FLAG_WORDS_HEADER + 1 and on.bounds_axes == 2
    assert on.flag_words == on.bounds_word + record_words(2) == 7
    text = tools.disassemble(on.spirv)
    # each check folds into the thread's record (no branch); the thread's end writes it: one compare-exchange
    assert text.count("OpAtomicCompareExchange") == 1 and "OpDecorate %adstack_flags Binding 2" in text
    assert "OpName %oob_site" in text
    tools.validate(on.spirv)


def test_zero_d_arrays_are_not_checked():
    on = lowered(histogram.fn, ArraySpec(sp.i32, 1), ArraySpec(sp.i32, 1), ArraySpec(sp.i32, 0),
                 bounds_check=True)
    assert [(what, name) for what, name, *_ in on.bounds_sites] == [("load", "x"), ("atomic add", "hist"),
                                                                      ("load", "x")]


# ---- the compile caches ----------------------------------------------------------------------------------
def test_debug_and_default_builds_never_share_a_cache_entry(rng, debug_off_then_on, monkeypatch):
    x, y = sp.from_numpy(rng.uniform(size=8).astype(np.float32)), sp.ndarray(sp.f32, (8,))
    saxpy(x, y, 2.0)
    specs = saxpy._bind((x, y, 2.0))[0]
    assert saxpy._compiled(specs).tasks[0].lowered.bounds_sites == ()
    debug_off_then_on()   # a new runtime (in-memory key: its serial); the disk key holds rt.debug
    x, y = sp.from_numpy(rng.uniform(size=8).astype(np.float32)), sp.ndarray(sp.f32, (8,))
    saxpy(x, y, 2.0)
    assert len(saxpy._compiled(specs).tasks[0].lowered.bounds_sites) == 3
    saxpy._cache.clear()   # as in a fresh process: the debug build now comes from the disk cache

    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the disk cache holds this kernel")
    monkeypatch.setattr(kernel_module, "compile_kernel", refuse)
    assert len(saxpy._compiled(specs).tasks[0].lowered.bounds_sites) == 3
    short = sp.ndarray(sp.f32, (4,))
    saxpy(x, short, 2.0)   # the cached build still checks
    with pytest.raises(sp.DeviceError, match=r"kernel saxpy .*: out-of-bounds load: y\[[4-7]\]"):
        sp.sync()

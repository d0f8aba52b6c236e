"""Workgroup widths on a CPU driver: the one whose busiest worker thread runs fewest lanes (launch/group_width.py)."""
import os

import numpy as np
import pytest

import spvad as sp
from spvad import runtime
from spvad.launch.group_width import group_width
from spvad.spirv.lower import LOCAL_SIZE_SPEC_ID


@pytest.mark.parametrize("threads, workers, want", [
    (1 << 20, 2, 512), (4096, 2, 512), (2304, 2, 128), (1024, 2, 512), (930, 2, 512), (300, 2, 64),
    (256, 2, 64), (1, 2, 64), (2304, 16, 64), (1 << 20, 16, 512), (1 << 20, 32, 512), (5000, 1, 512)])
def test_the_width_whose_busiest_worker_runs_fewest_lanes(threads, workers, want):
    assert group_width(512, threads, workers) == want


def test_a_module_narrower_than_the_choices_keeps_its_width():
    assert group_width(64, 10, 2) == 64 and group_width(32, 1 << 20, 2) == 32


@sp.kernel
def scaled(x: sp.Array, y: sp.Array, a: sp.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + sp.f32(i)


@pytest.mark.parametrize("n", [1, 255, 300, 1023, 2304, 4096, 5000, 70_001])
def test_every_width_covers_every_element(n, rng):
    """Launches of one kernel at sizes that take each width (and a group's last, partial one)."""
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = sp.ndarray(sp.f32, n)
    scaled(sp.from_numpy(x), y, 1.5)
    np.testing.assert_allclose(y.to_numpy(), 1.5 * x.astype(np.float64) + np.arange(n), rtol=1e-6, atol=1e-6)
    rt = runtime.get()
    if rt.device.info.get("workers", 1) > 1 and rt.device.info["features"].get("adaptive_local_size"):
        widths = {dict(key[-1] or {}).get(LOCAL_SIZE_SPEC_ID) for dt in rt.tasks.values()
                  if dt.ct.kernel_name == scaled.name for key in dt.pipelines}
        assert widths <= {None, 128, 64}


@pytest.mark.parametrize("env, want", [("3", 3), ("100", 32), ("0", 1), ("many", None)])
def test_the_worker_count_follows_mesas_setting(env, want, monkeypatch):
    from spvad.rhi.vulkan.device import cpu_workers
    monkeypatch.setenv("LP_NUM_THREADS", env)
    assert cpu_workers() == (want or min(os.cpu_count() or 1, 32))

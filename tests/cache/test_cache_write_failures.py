"""A compile-cache write that fails (a full disk, an I/O error) leaves no temporary file behind, and the launch
that wanted to store its kernel still runs (the cache is an optimisation)."""
import errno
import os

import numpy as np
import pytest

import spvad as sp
from spvad.cache import entries as cache_entries


@sp.kernel
def scaled(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 3.0 - 0.25


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh cache folder, and a kernel that starts as in a fresh process."""
    d = tmp_path / "cache"
    monkeypatch.setenv("SPVAD_CACHE_DIR", str(d))
    monkeypatch.delenv("SPVAD_CACHE_MAX_MB", raising=False)
    scaled._cache.clear()
    yield d
    scaled._cache.clear()


def launch_and_check(rng):
    x_np = rng.uniform(-1, 1, 33).astype(np.float32)
    x, y = sp.from_numpy(x_np), sp.ndarray(sp.f32, x_np.shape)
    scaled(x, y)
    np.testing.assert_allclose(y.to_numpy(), x_np * 3.0 - 0.25, rtol=1e-6)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_leaves_no_temporary_file(folder, rng, monkeypatch):
    """Every write of an entry fails with ENOSPC (/dev/full): no *.tmp stays, no entry either."""
    real, made = cache_entries._new_file, []

    def new_file_on_a_full_disk(d):
        fd, tmp = real(d)   # the temporary file exists, as on a real full disk
        os.close(fd)
        made.append(tmp)
        return os.open("/dev/full", os.O_WRONLY), tmp

    monkeypatch.setattr(cache_entries, "_new_file", new_file_on_a_full_disk)
    launch_and_check(rng)
    assert made, "no cache entry was written"
    assert sorted(p.name for p in folder.iterdir()) == []


def test_a_failed_rename_leaves_no_temporary_file(folder, rng, monkeypatch):
    """The write went through but the rename into place fails (EIO): the temporary file is removed."""
    real, failed = os.replace, []

    def replace(src, dst, **kw):
        if str(dst).startswith(str(folder)) and str(dst).endswith(cache_entries.SUFFIX):
            failed.append(dst)
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    launch_and_check(rng)
    assert failed, "no cache entry was written"
    assert sorted(p.name for p in folder.iterdir()) == []

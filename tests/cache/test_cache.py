"""The on-disk compile cache: a fresh specialisation is loaded instead of compiled, and anything that
changes the kernel (its code, a constant it reads, its argument types) or spvad's own sources misses it."""
import os
import sys
import time

import numpy as np
import pytest

import spvad as sp
from spvad import cache, runtime
from spvad.cache import source_stamp

kernel_module = sys.modules["spvad.kernel"]   # `spvad.kernel` the attribute is the decorator

SCALE = 2.0


@sp.func
def twice(v):
    return v * SCALE


@sp.kernel
def scaled(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = twice(x[i]) + 1.0


def run(x_np):
    x, y = sp.from_numpy(x_np), sp.ndarray(sp.f32, x_np.shape)
    scaled(x, y)
    return y.to_numpy()


@pytest.fixture
def no_compiler(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the disk cache holds this kernel")
    return lambda: monkeypatch.setattr(kernel_module, "compile_kernel", refuse)


def test_a_second_compile_loads_from_disk(rng, no_compiler):
    x = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    first = run(x)
    scaled._cache.clear()          # as in a fresh process
    no_compiler()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(run(x), first)


def test_changing_a_constant_the_kernel_reads_misses_the_cache(rng, monkeypatch):
    global SCALE
    x = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    run(x)
    key_before = cache.fingerprint(scaled.fn)
    SCALE = 3.0
    try:
        assert cache.fingerprint(scaled.fn) != key_before
        scaled._cache.clear()          # as a new process would find it (in this one, a constant changed after
        scaled._globals_seen = None    # the first compile is refused: tests/kernel/test_changed_globals.py)
        np.testing.assert_allclose(run(x), x * 3.0 + 1.0, rtol=1e-6)
    finally:
        SCALE = 2.0
        scaled._cache.clear()          # compiled with 3.0: the next test starts as a new process would
        scaled._globals_seen = None


def test_cache_off(monkeypatch, rng):
    monkeypatch.setenv("SPVAD_CACHE", "0")
    assert cache.cache_dir() is None
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    scaled._cache.clear()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)


def test_a_corrupt_entry_is_recompiled(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("SPVAD_CACHE_DIR", str(tmp_path))
    x = rng.uniform(0.5, 1.5, 8).astype(np.float32)
    scaled._cache.clear()
    run(x)
    for entry in tmp_path.iterdir():
        entry.write_bytes(b"not a pickle")
    scaled._cache.clear()
    np.testing.assert_allclose(run(x), x * 2.0 + 1.0, rtol=1e-6)


def _sources(root):
    (root / "sub").mkdir()
    (root / "a.py").write_text("A = 1\n")
    (root / "sub" / "b.py").write_text("B = 2\n")
    (root / "notes.txt").write_text("not a source\n")
    return root / "sub" / "b.py"


def _rewrite_keeping_size_and_mtime(path, text):
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_a_same_size_edit_with_its_mtime_put_back_changes_the_source_hash(tmp_path):
    """spvad's source hash (part of every key) is taken from file stats once no file changed in the last
    seconds: the ctime, which every write sets and nothing sets back, still tells an edit apart."""
    b = _sources(tmp_path)
    time.sleep(0.05)   # past the file system's timestamp tick
    before = source_stamp.source_hash(tmp_path, racy_s=0)
    assert source_stamp.source_hash(tmp_path, racy_s=0) == before                  # nothing changed: same key
    time.sleep(0.05)
    _rewrite_keeping_size_and_mtime(b, "B = 3\n")
    assert source_stamp.source_hash(tmp_path, racy_s=0) != before
    (tmp_path / "notes.txt").write_text("other notes\n")                    # not a source: no change
    stats = source_stamp.source_hash(tmp_path, racy_s=0)
    assert source_stamp.source_hash(tmp_path, racy_s=0) == stats
    (tmp_path / "sub" / "c.py").write_text("")                              # a new source: a new key
    assert source_stamp.source_hash(tmp_path, racy_s=0) != stats


def test_a_tree_written_within_the_racy_window_is_hashed_by_contents(tmp_path):
    """A rewrite within one tick of the clock can leave every stat as it was: files written in the last
    seconds are read instead, so even such an edit changes the hash."""
    b = _sources(tmp_path)
    before = source_stamp.source_hash(tmp_path, racy_s=3600)
    _rewrite_keeping_size_and_mtime(b, "B = 4\n")
    after = source_stamp.source_hash(tmp_path, racy_s=3600)
    assert after != before
    _rewrite_keeping_size_and_mtime(b, "B = 2\n")
    assert source_stamp.source_hash(tmp_path, racy_s=3600) == before                # the contents decide




@pytest.fixture
def no_stamp_yet(monkeypatch):
    """source_stamp as in a process that has not hashed spvad yet (restored afterwards)."""
    monkeypatch.setattr(source_stamp, "_hash", None)
    monkeypatch.setattr(source_stamp, "_worker", None)


def test_the_hash_taken_meanwhile_is_the_one_taken_in_place(no_stamp_yet):
    with source_stamp.taken_meanwhile():
        pass
    assert source_stamp._worker is not None and not source_stamp._worker.is_alive()   # joined at the end
    assert source_stamp.package_hash() == source_stamp.source_hash(source_stamp.ROOT)


def test_a_failed_hash_thread_leaves_it_to_the_caller(no_stamp_yet, monkeypatch):
    def unreadable(root, racy_s=0):
        raise PermissionError(f"{root}: unreadable")
    monkeypatch.setattr(source_stamp, "source_hash", unreadable)
    with source_stamp.taken_meanwhile():
        pass
    assert source_stamp._hash is None
    with pytest.raises(PermissionError, match="unreadable"):   # where the launch that needs it sees it
        source_stamp.package_hash()


def test_no_thread_without_a_cache(no_stamp_yet):
    with source_stamp.taken_meanwhile(False):
        pass
    assert source_stamp._worker is None and source_stamp._hash is None
    runtime.Runtime("interp")   # (the interpreter runs IR made afresh: no disk cache, no hash)
    assert source_stamp._worker is None and source_stamp._hash is None

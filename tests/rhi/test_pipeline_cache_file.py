"""The VkPipelineCache file (rhi/vulkan/pipeline_cache.py) is written through a new private temporary file: a
link planted in the cache folder never redirects the write, and a failed write or rename (a full disk) leaves
no temporary file behind."""
import builtins
import errno
import os
import stat

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

from spvad import rhi  # noqa: E402
from spvad.rhi.vulkan import pipeline_cache  # noqa: E402


def open_and_close(folder):
    """Open a Vulkan device keeping its pipeline cache in `folder`, and close it (which saves the cache);
    returns the cache file's path."""
    device = rhi.open_device("vulkan", pipeline_cache_dir=str(folder))
    try:
        return pipeline_cache.cache_file(device._props, str(folder))
    finally:
        device.close()


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    return d


def test_the_cache_file_is_written_private(folder):
    path = open_and_close(folder)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_size > 0
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert [p.name for p in folder.iterdir()] == [os.path.basename(path)]   # no temporary file left


def test_a_planted_link_never_redirects_the_write(folder, tmp_path):
    """A link at the temporary name older versions wrote to (<file>.<pid>.tmp): its target stays as it was,
    and the cache file is still written, as a file of its own."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = open_and_close(folder)   # (the cache file's name: device and driver)
    os.unlink(path)
    os.symlink(victim, f"{path}.{os.getpid()}.tmp")
    open_and_close(folder)
    assert victim.read_bytes() == b"precious"
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_size > 0


@pytest.mark.skipif(not (os.path.exists("/dev/full") and os.path.isdir("/proc/self/fd")),
                    reason="needs /dev/full and /proc (Linux)")
@pytest.mark.parametrize("failing", ["write", "rename"])
def test_a_failed_save_leaves_no_temporary_file(folder, monkeypatch, failing):
    """Writes into the folder go to /dev/full (ENOSPC), or the rename into place fails (EIO): the close still
    succeeds, and nothing is left in the folder."""
    full, failed = os.open("/dev/full", os.O_WRONLY), []
    real_fdopen, real_replace = os.fdopen, os.replace

    def in_folder(fd):
        return os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(folder)

    def to_full_disk(fd):
        if in_folder(fd):
            os.dup2(full, fd)   # the same descriptor now writes to a full disk
            failed.append(fd)

    def fdopen(fd, *args, **kw):
        to_full_disk(fd)
        return real_fdopen(fd, *args, **kw)

    def open_(file, mode="r", *args, **kw):   # (a plain open() in the module, as older versions had)
        f = builtins.open(file, mode, *args, **kw)
        if "w" in mode:
            to_full_disk(f.fileno())
        return f

    def replace(src, dst, **kw):
        if os.path.dirname(str(dst)) == str(folder):
            failed.append(dst)
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real_replace(src, dst, **kw)

    if failing == "write":
        monkeypatch.setattr(os, "fdopen", fdopen)
        monkeypatch.setattr(pipeline_cache, "open", open_, raising=False)
    else:
        monkeypatch.setattr(os, "replace", replace)
    try:
        open_and_close(folder)
    finally:
        os.close(full)
    assert failed, f"the {failing} never failed"
    assert sorted(p.name for p in folder.iterdir()) == []


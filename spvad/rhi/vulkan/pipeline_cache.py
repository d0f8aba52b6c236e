"""The VkPipelineCache, persisted across runs in spvad's cache folder (one file per device and driver)."""
import os

from ...errors import DeviceError
from .vkapi import call, ffi, lib, vk


def cache_file(props, folder):
    if not folder:
        return None
    uuid = bytes(props.pipelineCacheUUID).hex()
    return os.path.join(folder, f"vk-pipelines-{props.vendorID:x}-{props.deviceID:x}-{uuid}.bin")


def create(device, props, folder):
    """A VkPipelineCache seeded from the last run's data (drivers ignore data of another version)."""
    data = b""
    path = cache_file(props, folder)
    if path and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                if not hasattr(os, "getuid") or os.fstat(f.fileno()).st_uid == os.getuid():
                    data = f.read()   # another user's file never reaches the driver
        except OSError:
            data = b""
    if data:
        keep = ffi.from_buffer(data)   # alive until the call returns
        try:
            return call(vk.vkCreatePipelineCache, device,
                        vk.VkPipelineCacheCreateInfo(initialDataSize=len(data), pInitialData=keep), None)
        except DeviceError:   # refused data: start empty
            pass
    return call(vk.vkCreatePipelineCache, device, vk.VkPipelineCacheCreateInfo(), None)


def save(device, cache, props, folder):
    path = cache_file(props, folder)
    if path is None:
        return
    try:
        size = ffi.new("size_t *")
        if lib.vkGetPipelineCacheData(device, cache, size, ffi.NULL) < 0 or not size[0]:
            return
        buf = ffi.new("char[]", size[0])
        if lib.vkGetPipelineCacheData(device, cache, size, buf) < 0:
            return
        os.makedirs(folder, mode=0o700, exist_ok=True)
        _write_through_new_file(path, ffi.buffer(buf, size[0]))
    except OSError:
        pass   # a cache: never fail a close because of it


def _write_through_new_file(path, data):
    """Write `path` by renaming a new temporary file beside it into place (atomic: concurrent processes never
    read half a file). The temporary file has a random name and is created 0600 with O_EXCL|O_NOFOLLOW, so a
    file or link planted in the folder is never written through; it is removed when the write or rename fails
    (a full disk). spvad/cache/entries.py's _new_file does the same for the compile cache; rhi may not import
    the cache (a layer above), hence these few lines here."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    tmp = f"{path}.{os.urandom(12).hex()}.tmp"   # *.tmp: the cache's eviction deletes those of dead writers
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

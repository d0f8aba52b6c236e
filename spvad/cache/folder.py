"""Where the on-disk caches live: $SPVAD_CACHE_DIR, else ~/.cache/spvad (0700). SPVAD_CACHE=0 turns them
off; SPVAD_CACHE_MAX_MB bounds them. Used by the compile cache (entries.py) and Vulkan's pipeline cache."""
import os
import stat

DEFAULT_MAX_MB = 256


def cache_dir():
    """The cache folder, or None when the cache is off or the folder is not safe to use."""
    if os.environ.get("SPVAD_CACHE", "1") in ("0", "", "off"):
        return None
    custom = os.environ.get("SPVAD_CACHE_DIR")
    d = custom or os.path.join(os.path.expanduser("~"), ".cache", "spvad")
    return d if _safe_folder(d, ours_to_fix=not custom) else None


def _safe_folder(d, ours_to_fix):
    """Create `d` (0700) if missing. Anyone who can write into the folder decides what the next launch
    loads, so it must belong to this user and be writable by nobody else; the default folder, when this user
    owns it, is tightened (older versions created it 0755/0775), a folder the user chose is not touched."""
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
        if not stat.S_ISDIR(st.st_mode) or not ours(st):
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            if not ours_to_fix:
                return False
            os.chmod(d, 0o700)
        return True
    except OSError:
        return False


def ours(st):
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def max_bytes():
    try:
        return int(max(float(os.environ.get("SPVAD_CACHE_MAX_MB", DEFAULT_MAX_MB)), 0.0) * (1 << 20))
    except (ValueError, OverflowError):   # not a number, nan, inf
        return DEFAULT_MAX_MB << 20

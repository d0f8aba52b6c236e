"""Which spvad this is, for the compile cache's keys: a hash of its source files (their stats, or their
contents while any was written in the last seconds), so a changed compiler never loads an old entry. Taken
once per process, while sp.init waits on the driver (a stat per file: most of a warm first launch's key)."""
import hashlib
import os
import threading
import time

RACY_S = 2.0   # a file written this recently may be written again within its timestamps' granularity
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the spvad package: every source

_hash = None      # spvad's, once known
_worker = None    # the thread taking it during sp.init, if one was started


def package_hash():
    """spvad's own source hash (waits for the thread sp.init started, if any)."""
    global _hash
    if _hash is None:
        worker = _worker
        if worker is not None:
            worker.join()
        if _hash is None:   # no thread, or it failed: here, where an error reaches the caller
            _hash = source_hash(ROOT)
    return _hash


class taken_meanwhile:
    """`with taken_meanwhile(wanted): <driver calls>` hashes spvad's sources in a thread during the block
    (if `wanted` and not done yet): the stats and the driver's calls both release the GIL, so on a second
    core the hash costs no time. The block waits for the thread at its end, so no thread outlives it (a
    later fork copies no half-done one)."""

    def __init__(self, wanted=True):
        self.wanted = wanted

    def __enter__(self):
        global _worker
        if self.wanted and _hash is None and _worker is None:
            _worker = threading.Thread(target=_take, name="spvad-source-hash", daemon=True)
            _worker.start()
        return self

    def __exit__(self, *exc):
        if _worker is not None:
            _worker.join()
        return False


def _take():
    global _hash
    try:
        _hash = source_hash(ROOT)
    except Exception:   # (package_hash takes it again in the caller's thread, and raises there)
        pass


def source_hash(root, racy_s=RACY_S):
    """A hash of the .py files under `root`, from their path, size, mtime, ctime and inode: a stat each
    instead of reading them all (~1 MB for spvad). On POSIX every write sets a file's ctime, which no
    program can set back (git's index trusts the same); only while some file's timestamps are within
    `racy_s` of now could another write leave them unchanged (they advance by clock ticks), so then the
    contents are hashed instead."""
    files = sorted(_sources(root))
    now = time.time_ns()
    if any(now - max(mtime, ctime) < racy_s * 1e9 for _, _, mtime, ctime, _ in files):
        h = hashlib.sha256(b"contents\n")
        for rel, *_ in files:
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
            h.update(f"{rel}\0{len(data)}\0".encode() + data)
        return h.hexdigest()
    return hashlib.sha256(b"stats\n" + repr(files).encode()).hexdigest()


def _sources(root):
    """(path relative to `root`, size, mtime, ctime, inode) of every .py file under `root`."""
    out, todo = [], [("", root)]
    while todo:
        rel, folder = todo.pop()
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith(".py") and e.is_file():
                    st = e.stat()
                    out.append((rel + e.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
                elif e.name != "__pycache__" and e.is_dir(follow_symlinks=False):
                    todo.append((rel + e.name + "/", e.path))
    return out

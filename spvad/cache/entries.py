"""The compile cache's entries on disk: a compiled kernel specialisation (IR + validated SPIR-V) stored under
its key (key.py), so a fresh process skips the frontend, the passes, lowering and spirv-val. Entries are data
only (format.py), sealed with a sha256 of key and contents; a bad one is deleted and recompiled, a full
folder trimmed least recently used first.
Location: $SPVAD_CACHE_DIR, else ~/.cache/spvad (0700; SPVAD_CACHE=0: off; SPVAD_CACHE_MAX_MB: bound, LRU).
"""
import copy
import hashlib
import os
import stat
import time

from ..errors import SpirvValidationError
from ..frontend.source import GlobalName
from ..frontend.values import array_type
from ..ir.nodes import ArrayParam
from ..pipeline import CompiledKernel, CompiledTask, Lowering
from ..spirv import tools
from ..spirv.lower import LoweredTask
from . import format as cache_format
from .folder import cache_dir, max_bytes, ours as _ours

FORMAT = 2   # 1: pickle files (*.pkl, never read again); 2: sealed JSON (*.spvad)
SUFFIX = ".spvad"
OLD_SUFFIXES = (".pkl",)          # entries of older formats: deleted when seen
PIPELINE_CACHE_PREFIX = "vk-pipelines-"   # rhi/vulkan/pipeline_cache.py's file: an entry of its own for LRU
EVICT_TO = 0.9                    # a full folder is trimmed to this fraction of the bound
STALE_TMP_S = 3600                # a temporary file this old belongs to a writer that died


# ---- entries: "spvad-cache <FORMAT> <sha256 of key and body>\n" + body ----------------------------------------
def _header(key, body):
    digest = hashlib.sha256(key.encode() + b"\n" + body).hexdigest()
    return f"spvad-cache {FORMAT} {digest}\n".encode()


def load(key):
    """The body stored under `key`, or None. An entry of another user is ignored (left alone); a bad one
    (truncated, edited, from another format or another key) is deleted. Loading marks the entry used."""
    d = cache_dir()
    if d is None or key is None:
        return None
    path = os.path.join(d, key + SUFFIX)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _ours(st):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
        os.utime(fd if os.utime in os.supports_fd else path)   # least recently used goes first
    except OSError:
        return None
    finally:
        os.close(fd)
    header, _, body = data.partition(b"\n")
    if header + b"\n" != _header(key, body):
        discard(key)
        return None
    return body


def discard(key):
    d = cache_dir()
    if d is not None:
        _remove(os.path.join(d, key + SUFFIX))


def _remove(path):
    try:
        st = os.lstat(path)
        if _ours(st):   # never another user's file
            os.unlink(path)
    except OSError:
        pass


def store(key, body):
    d = cache_dir()
    if d is None or key is None:
        return
    path = os.path.join(d, key + SUFFIX)
    try:
        if os.path.lexists(path) and not _ours(os.lstat(path)):
            return   # another user's entry: left alone
        fd, tmp = _new_file(d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_header(key, body) + body)
            os.replace(tmp, path)   # atomic: concurrent processes never see half a file
        except BaseException:
            _remove(tmp)   # a full disk (ENOSPC, EIO) fails every store: leave no temporary file behind
            raise
    except OSError:
        return   # the cache is an optimisation; never fail a launch because of it
    # the folder is scanned once per process, then this process's writes are added up (a scan per store
    # is quadratic in the number of entries); past the bound, it is scanned again and trimmed
    if d not in _usage or _usage[d] + len(body) > max_bytes():
        _usage[d] = evict(d)
    else:
        _usage[d] += len(body)


def _new_file(d):
    """A new file in `d` (mode 0600, never through a link) and its path: tempfile.mkstemp's guarantees,
    without importing tempfile (with shutil and random, ~5 ms of every `import spvad`)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        path = os.path.join(d, os.urandom(12).hex() + ".tmp")
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {d}")


_usage = {}   # folder -> bytes of entries, as of this process's last scan plus its writes since


def evict(d):
    """When the folder is past SPVAD_CACHE_MAX_MB, delete the least recently used entries (by mtime) down to
    EVICT_TO of it (so the next stores do not each rescan); returns the bytes left. The VkPipelineCache file
    counts as an entry (it is rewritten at exit); files of other users are neither counted nor deleted;
    entries of older formats and temporary files of dead writers go in any case."""
    limit, now, files = max_bytes(), time.time(), []
    try:
        with os.scandir(d) as it:
            for e in it:
                name = e.name
                entry = name.endswith(SUFFIX) or (name.startswith(PIPELINE_CACHE_PREFIX) and name.endswith(".bin"))
                stale = name.endswith(OLD_SUFFIXES) or name.endswith(".tmp")
                if not (entry or stale):
                    continue
                st = e.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or not _ours(st):
                    continue
                if entry:
                    files.append((st.st_mtime, st.st_size, e.path))
                elif not name.endswith(".tmp") or now - st.st_mtime > STALE_TMP_S:
                    _remove(e.path)
    except OSError:
        return 0
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return total
    for _, size, path in sorted(files):
        if total <= limit * EVICT_TO:
            break
        _remove(path)
        total -= size
    return total


# ---- compiled kernels -------------------------------------------------------------------------------------------
_TRANSIENT = ("_threads",)   # per-process state of a CompiledTask, never stored
SPIRV_MAGIC = b"\x03\x02\x23\x07"


def store_compiled(key, ck, fn):
    """Store a CompiledKernel; its global ndarray names are stored by name and looked up again on load (in
    kernel `fn`'s namespace: a name only a func in another module reads is not cached). A kernel holding an
    object the format does not store (cache_format.WHITELIST) is just not cached."""
    if key is None or cache_dir() is None:
        return
    if any(GlobalName.of(fn, site.name).key != site.key for _, site, _ in ck.captured):
        return
    shell = copy.copy(ck)   # every field, whatever fields CompiledKernel has
    shell.captured = [(param, site.name, kind) for param, site, kind in ck.captured]
    shell.tasks = []
    for ct in ck.tasks:
        t = copy.copy(ct)
        for name in _TRANSIENT:
            vars(t).pop(name, None)
        shell.tasks.append(t)
    try:
        body = cache_format.dumps(shell)
    except (cache_format.NotStorable, RecursionError, ValueError):
        return
    store(key, body)


def load_compiled(key, kobj, rt):
    body = load(key)
    if body is None:
        return None
    try:
        ck = cache_format.loads(body)
        _check(ck, kobj, rt)
    except (cache_format.BadData, SpirvValidationError, AttributeError, TypeError):
        discard(key)   # sealed but unusable (another writer's bug, a hand-made file): compile afresh
        return None
    names = []
    for param, name, kind in ck.captured:   # the same global names must still hold ndarrays of that kind
        site = GlobalName.of(kobj.fn, name)
        obj = site.get()
        if array_type(obj) != kind or obj._runtime is not rt:
            return None
        names.append((param, site, kind))
    ck.captured = names
    return ck


def _check(ck, kobj, rt):
    """What the launcher relies on: the right classes, well-formed SPIR-V, spirv-val when validation is on
    (every module that reaches the driver is validated then, cached or not)."""
    if type(ck) is not CompiledKernel or type(ck.tasks) is not list or type(ck.captured) is not list:
        raise cache_format.BadData("not a compiled kernel")
    if not all(type(c) is tuple and len(c) == 3 and type(c[0]) is ArrayParam and type(c[1]) is str
               and type(c[2]) is tuple for c in ck.captured):
        raise cache_format.BadData("captured arrays")
    for ct in ck.tasks:
        if type(ct) is not CompiledTask:
            raise cache_format.BadData("not a compiled task")
        modules = [ct.lowered, *ct.variants.values()] + [m for m in (ct.depth_probe, ct.thread_count) if m is not None]
        modules += [low.tail for low in modules if type(low) is LoweredTask and low.tail is not None]
        for low in modules:
            if type(low) is not LoweredTask or type(low.spirv) is not bytes or len(low.spirv) % 4 or \
                    low.spirv[:4] != SPIRV_MAGIC:
                raise cache_format.BadData("malformed SPIR-V")
        if rt.validate_spirv:
            for low in {id(m): m for m in modules}.values():
                tools.validate(low.spirv, kernel_name=f"{kobj.name} ({ct.task.name}, cached)")
            for relower in (ct.relower, ct.probe_relower):   # variants lowered later are validated too
                if isinstance(relower, Lowering):
                    relower.validate = True

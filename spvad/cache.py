"""The on-disk compile cache: a compiled kernel specialisation (IR + validated SPIR-V) keyed by everything
that can change it, so a fresh process skips the frontend, the passes, lowering and spirv-val.

The key hashes the kernel's code and, by value, everything its names resolve to (functions, constants, user
classes and instances, captured ndarrays' types), plus the argument specs, mode, options and device features;
a global it cannot describe exactly makes the kernel uncacheable rather than risk a stale entry. Entries are
data only (cache_format), sealed with a sha256 of key and contents; a bad one is deleted and recompiled.
Location: $SPVAD_CACHE_DIR, else ~/.cache/spvad (0700; SPVAD_CACHE=0: off; SPVAD_CACHE_MAX_MB: bound, LRU).
"""
import copy
import enum
import hashlib
import marshal
import os
import stat
import time
import types

import numpy as np

from . import cache_format
from .cache_folder import cache_dir, max_bytes, ours as _ours
from .errors import SpirvValidationError
from .frontend.source import GlobalName
from .frontend.values import array_type
from .ir.nodes import ArrayParam
from .pipeline import CompiledKernel, CompiledTask, Lowering
from .source_stamp import package_hash
from .spirv import tools
from .spirv.lower import LoweredTask
from .types import DType, Matrix, Vector
from .variable_names import variable_names

FORMAT = 2   # 1: pickle files (*.pkl, never read again); 2: sealed JSON (*.spvad)
TRUSTED_MODULES = {"spvad", "math", "numpy"}   # attributes read through these do not change between runs
SUFFIX = ".spvad"
OLD_SUFFIXES = (".pkl",)          # entries of older formats: deleted when seen
PIPELINE_CACHE_PREFIX = "vk-pipelines-"   # rhi/vulkan/pipeline_cache.py's file: an entry of its own for LRU
EVICT_TO = 0.9                    # a full folder is trimmed to this fraction of the bound
STALE_TMP_S = 3600                # a temporary file this old belongs to a writer that died


# ---- the key ------------------------------------------------------------------------------------------------
def fingerprint(fn, seen=None):
    """A hash of `fn`'s code and of everything its names resolve to (recursively for functions)."""
    seen = {} if seen is None else seen
    h = hashlib.sha256()
    code = fn.__code__
    h.update(marshal.dumps(code))
    names = set(_names(code))
    scope = _scope(fn)
    for default in fn.__defaults__ or ():
        h.update(b"default=" + _describe(default, seen).encode() + b";")
    for name, default in sorted((fn.__kwdefaults__ or {}).items()):
        h.update(f"kwdefault:{name}=".encode() + _describe(default, seen).encode() + b";")
    for name in sorted(names):
        if name not in scope:
            continue
        h.update(name.encode() + b"=" + _describe(scope[name], seen).encode() + b";")
    return h.hexdigest()


def global_values(fn, seen=None):
    """{name: description} of what the names `fn` reads as variables (globals, closure cells; not attribute
    names) and its defaults resolve to now, for telling within this process whether any of it changed since
    an earlier compile: numbers, tuples, lists, dicts and numpy arrays by their values, functions and @sp.funcs
    by their code and what they read in turn, classes by their attributes, other objects (instances included,
    whose other attributes a program may change freely) by identity, ndarrays not at all (their names are
    looked up at each launch)."""
    seen = {_IN_PROCESS: True} if seen is None else seen
    code = fn.__code__
    scope = _scope(fn)
    out = {name: _describe(scope[name], seen) for name in variable_names(code) if name in scope}
    out["(defaults)"] = _describe(tuple(fn.__defaults__ or ()), seen)
    return out


def _scope(fn):
    """What `fn`'s free names resolve to: its module's globals, then its filled closure cells."""
    scope = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:
            pass
    return scope


def _code_and_values(fn, seen):
    digest = hashlib.sha256(marshal.dumps(fn.__code__)).hexdigest()
    return f"{digest}:{sorted(global_values(fn, seen).items())}"


_IN_PROCESS = "in-process"   # a key of `seen`: describe for global_values, not for the disk


def _names(code):
    yield from code.co_names
    yield from code.co_freevars
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _names(c)


def _describe(obj, seen):
    """`obj` as a string that changes whenever anything a kernel can read from it changes; Uncacheable when
    no such string is known (for global_values: its identity). Objects with identity are described once per
    key (then `seen:<n>`)."""
    if _IN_PROCESS not in seen:
        return _describe_value(obj, seen)
    try:
        return _describe_value(obj, seen)
    except Uncacheable:
        return f"object:{type(obj).__name__}:{id(obj)}"


def _describe_value(obj, seen):
    t = type(obj)
    process = _IN_PROCESS in seen
    if t in (bool, int, float, str, type(None)):   # compile-time constants: their values
        return f"{t.__name__}:{obj!r}"
    if t is tuple:
        return "tuple:(" + ",".join(_describe(x, seen) for x in obj) + ")"
    if t in (DType, Vector, Matrix):
        return f"dtype:{obj!r}"
    if not isinstance(obj, type):   # (sp.ndarray the class carries the tag too)
        if getattr(obj, "_spvad_ndarray", False):   # looked up by name again on load
            return "ndarray" if process else \
                f"ndarray:{obj.dtype}:{obj.ndim}:{obj.grad is not None}:{obj.dual is not None}"
        builtin = getattr(obj, "_spvad_builtin", None)
        if builtin is not None:   # the frontend reads nothing else of it
            return f"builtin:{builtin}"
    if isinstance(obj, (np.ndarray, np.generic)):
        if (t is np.ndarray or isinstance(obj, np.generic)) and obj.dtype.kind in "biufc" and obj.size <= 64:
            return f"array:{t.__name__}:{obj.dtype.str}:{obj.shape}:{obj.tobytes().hex()}"
        if process and t is np.ndarray and obj.dtype.kind in "biufc":
            digest = hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()
            return f"array:{obj.dtype.str}:{obj.shape}:{digest}"
        raise Uncacheable(f"numpy {t.__name__} {obj.dtype} of {obj.size} elements")
    if isinstance(obj, types.ModuleType):
        if not _trusted(obj.__name__):
            raise Uncacheable(obj.__name__)   # `mod.CONST` could change without this key seeing it
        return f"module:{obj.__name__}"
    if isinstance(obj, types.BuiltinFunctionType) and _trusted(getattr(obj, "__module__", None) or "builtins"):
        return f"builtin-function:{obj.__module__}.{obj.__qualname__}"   # abs, min, math.sin, ...
    if id(obj) in seen:
        return f"seen:{seen[id(obj)][0]}"
    seen[id(obj)] = (len(seen), obj)   # the object stays alive, so its id is not reused during this key
    if process and t is list:   # (a kernel reads a module-level list as constants)
        return "list:[" + ",".join(_describe(x, seen) for x in obj) + "]"
    if process and t is dict:
        return "dict:{" + ";".join(f"{_describe(k, seen)}={_describe(v, seen)}" for k, v in obj.items()) + "}"
    if isinstance(obj, type):
        return _describe_class(obj, seen)
    if getattr(obj, "_spvad_func", False):
        return "func:" + (_code_and_values(obj.fn, seen) if process else fingerprint(obj.fn, seen))
    if isinstance(obj, types.FunctionType):   # its code, defaults, globals and attributes, as a kernel's
        if process:
            return f"function:{_qualname(obj)}:{_code_and_values(obj, seen)}"
        return f"function:{_qualname(obj)}:{fingerprint(obj, seen)}:{_attributes(vars(obj), seen)}"
    if isinstance(obj, enum.Enum):
        return f"enum:{_describe(t, seen)}.{obj.name}"
    if process:
        return f"instance:{type(obj).__name__}:{id(obj)}"
    return _describe_instance(obj, seen)


def _describe_class(cls, seen):
    """Library classes (sp.Array, float, np.float32) by name; user classes by their plain attributes, base
    classes included (`Params.dt`); an enum by its members' values."""
    if _trusted(cls.__module__):
        return f"class:{_qualname(cls)}"
    if isinstance(cls, enum.EnumMeta):
        members = {name: m.value for name, m in cls.__members__.items()}
        return f"enum-class:{_qualname(cls)}:{_attributes(members, seen)}"
    if type(cls) is not type:   # a metaclass can compute attributes: nothing to describe them by
        raise Uncacheable(f"class {_qualname(cls)} (metaclass {type(cls).__name__})")
    parts = []
    for klass in cls.__mro__[:-1]:   # without `object`
        if _trusted(klass.__module__):
            parts.append(f"base:{_qualname(klass)}")
        else:
            plain = {k: v for k, v in vars(klass).items() if not (k.startswith("__") and k.endswith("__"))}
            parts.append(f"{_qualname(klass)}:{_attributes(plain, seen)}")
    return "class:" + "|".join(parts)


def _describe_instance(obj, seen):
    """An instance of a user class: its class and its attribute values. Not when attribute reads can run
    code (`__getattr__`, properties: the class description refuses those) or bypass `__dict__` (slots), nor
    with a library base class (an int subclass's value is not in its `__dict__`)."""
    cls = type(obj)
    mro = cls.__mro__[:-1]
    if not hasattr(obj, "__dict__") or any(_trusted(c.__module__) for c in mro) or any(
            k in vars(c) for c in mro for k in ("__getattr__", "__getattribute__", "__slots__")):
        raise Uncacheable(f"{_qualname(cls)} instance")
    return f"instance:{_describe(cls, seen)}:{_attributes(vars(obj), seen)}"


def _attributes(mapping, seen):
    if not all(type(k) is str for k in mapping):
        raise Uncacheable("an attribute with a non-string name")
    return "{" + ";".join(f"{k}={_describe(v, seen)}" for k, v in sorted(mapping.items())) + "}"


def _trusted(module):
    return module == "builtins" or module.split(".")[0] in TRUSTED_MODULES


def _qualname(obj):
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


class Uncacheable(Exception):
    """A kernel reads a global this cache cannot fingerprint; it is compiled every process."""


def entry_key(kobj, spec_key, extra):
    """The cache key, or None when the kernel cannot be fingerprinted safely."""
    try:
        fp = fingerprint(kobj.fn)
    except Exception:   # Uncacheable, or an object that fails to be described: compiled every process
        return None
    h = hashlib.sha256()
    h.update(f"spvad-cache-{FORMAT}-{package_hash()}".encode())
    h.update(fp.encode())
    h.update(repr((spec_key, extra)).encode())
    return h.hexdigest()


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
        with os.fdopen(fd, "wb") as f:
            f.write(_header(key, body) + body)
        os.replace(tmp, path)   # atomic: concurrent processes never see half a file
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

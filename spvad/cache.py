"""The on-disk compile cache: a compiled kernel specialisation (IR + validated SPIR-V) keyed by everything
that can change it, so a fresh process skips the frontend, the passes, lowering and spirv-val.

The key hashes the kernel's code object and, transitively, what its names resolve to: `@sp.func`s (their
code), Python scalars (their values, which are compile-time constants), captured ndarrays (dtype, ndim,
needs_grad/dual), plus the argument specs, the mode, the options and the device features.
Location: $SPVAD_CACHE_DIR, else ~/.cache/spvad; SPVAD_CACHE=0 turns it off.
"""
import hashlib
import marshal
import os
import pickle
import tempfile
import types

from .types import DType

FORMAT = 1
TRUSTED_MODULES = {"spvad", "math", "numpy"}   # attributes read through these do not change between runs


def cache_dir():
    if os.environ.get("SPVAD_CACHE", "1") in ("0", "", "off"):
        return None
    return os.environ.get("SPVAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "spvad")


def fingerprint(fn, seen=None):
    """A hash of `fn`'s code and of everything its names resolve to (recursively for @sp.func)."""
    seen = set() if seen is None else seen
    h = hashlib.sha256()
    code = fn.__code__
    h.update(marshal.dumps(code))
    names = set(_names(code))
    scope = dict(fn.__globals__)
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:
            pass
    for default in fn.__defaults__ or ():
        h.update(b"default=" + _describe(default, seen).encode() + b";")
    for name in sorted(names):
        if name not in scope:
            continue
        h.update(name.encode() + b"=" + _describe(scope[name], seen).encode() + b";")
    return h.hexdigest()


def _names(code):
    yield from code.co_names
    yield from code.co_freevars
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _names(c)


def _describe(obj, seen):
    if getattr(obj, "_spvad_func", False):
        if id(obj) in seen:
            return "func:recursive"
        seen.add(id(obj))
        return "func:" + fingerprint(obj.fn, seen)
    if getattr(obj, "_spvad_ndarray", False):
        return f"ndarray:{obj.dtype}:{obj.ndim}:{obj.grad is not None}:{obj.dual is not None}"
    if isinstance(obj, (bool, int, float, str, type(None))):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, DType) or type(obj).__name__ == "Vector":
        return f"dtype:{obj!r}"
    if hasattr(obj, "__array__") and getattr(obj, "size", 1 << 20) <= 64:   # small numpy constants
        import numpy as np
        a = np.asarray(obj)
        return f"array:{a.dtype}:{a.shape}:{a.tobytes().hex()}"
    if isinstance(obj, types.ModuleType):
        if obj.__name__.split(".")[0] not in TRUSTED_MODULES:
            raise Uncacheable(obj.__name__)   # `mod.CONST` could change without this key seeing it
        return f"module:{obj.__name__}"
    if isinstance(obj, tuple) and all(isinstance(x, (bool, int, float)) for x in obj):
        return f"tuple:{obj!r}"
    builtin = getattr(obj, "_spvad_builtin", None)
    if builtin is not None:
        return f"builtin:{builtin}"
    if isinstance(obj, (types.BuiltinFunctionType, type)):   # abs, min, range, float, sp.Array, ...
        return f"object:{obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, types.FunctionType):
        return f"function:{obj.__module__}.{obj.__qualname__}:{hashlib.sha256(marshal.dumps(obj.__code__)).hexdigest()}"
    raise Uncacheable(type(obj).__name__)   # something we cannot describe: never risk a stale entry


class Uncacheable(Exception):
    """A kernel reads a global this cache cannot fingerprint; it is compiled every process."""


_package_hash = None


def package_hash():
    """Hash of spvad's own source files: a changed compiler never reuses old entries."""
    global _package_hash
    if _package_hash is None:
        h = hashlib.sha256()
        root = os.path.dirname(os.path.abspath(__file__))
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), "rb") as f:
                        h.update(name.encode() + f.read())
        _package_hash = h.hexdigest()
    return _package_hash


def entry_key(kobj, spec_key, extra):
    """The cache key, or None when the kernel cannot be fingerprinted safely."""
    try:
        fp = fingerprint(kobj.fn)
    except Uncacheable:
        return None
    h = hashlib.sha256()
    h.update(f"spvad-cache-{FORMAT}-{package_hash()}".encode())
    h.update(fp.encode())
    h.update(repr((spec_key, extra)).encode())
    return h.hexdigest()


def load(key):
    d = cache_dir()
    if d is None or key is None:
        return None
    try:
        with open(os.path.join(d, key + ".pkl"), "rb") as f:
            return f.read()
    except Exception:   # missing, truncated or from another version: recompile
        return None


def store(key, data):
    d = cache_dir()
    if d is None or key is None:
        return
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(d, key + ".pkl"))   # atomic: concurrent processes never see half a file
    except Exception:
        pass   # the cache is an optimisation; never fail a launch because of it


# ---- compiled kernels ------------------------------------------------------------------------------------
_TRANSIENT = ("_threads", "last_spec")   # per-runtime state of a CompiledTask, never stored


def store_compiled(key, ck):
    """Store a CompiledKernel; captured ndarrays are stored by name and looked up again on load."""
    if cache_dir() is None or key is None:
        return
    captured = [(param, param.name) for param, _ in ck.captured]
    tasks = []
    for ct in ck.tasks:
        state = {k: v for k, v in vars(ct).items() if k not in _TRANSIENT}
        tasks.append(state)
    try:
        payload = pickle.dumps((ck.ir, ck.param_bindings, captured, tasks, ck.check_plan, ck.facts),
                               protocol=pickle.HIGHEST_PROTOCOL)
    except (RecursionError, pickle.PicklingError, TypeError, AttributeError):
        return   # an IR too deep or unusual to pickle: just not cached
    store(key, payload)


def load_compiled(key, kobj, rt):
    payload = load(key)
    if payload is None:
        return None
    from .compiler import CompiledKernel, CompiledTask
    from .spirv import tools
    try:
        ir, bindings, captured, tasks, plan, facts = pickle.loads(payload)
    except Exception:
        return None
    objs = []
    for param, name in captured:   # the same global names must still hold matching ndarrays
        obj = _lookup(kobj.fn, name)
        if not getattr(obj, "_spvad_ndarray", False) or obj._runtime is not rt or obj.dtype != param.dtype:
            return None
        objs.append((param, obj))
    cts = []
    for state in tasks:
        ct = CompiledTask.__new__(CompiledTask)
        vars(ct).update(state)
        cts.append(ct)
    if rt.validate_spirv:   # every module handed to the driver is validated when validation is on
        for ct in cts:
            tools.validate(ct.lowered.spirv, kernel_name=f"{kobj.name} ({ct.task.name}, cached)")
    return CompiledKernel(ir, bindings, objs, cts, plan, facts)


def _lookup(fn, name):
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        if var == name:
            try:
                return cell.cell_contents
            except ValueError:
                return None
    return fn.__globals__.get(name)

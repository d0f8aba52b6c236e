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
    if isinstance(obj, DType):
        return f"dtype:{obj.name}"
    if isinstance(obj, types.ModuleType):
        return f"module:{obj.__name__}"
    if isinstance(obj, tuple) and all(isinstance(x, (bool, int, float)) for x in obj):
        return f"tuple:{obj!r}"
    return f"object:{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def entry_key(kobj, spec_key, extra):
    h = hashlib.sha256()
    h.update(f"spvad-cache-{FORMAT}".encode())
    h.update(fingerprint(kobj.fn).encode())
    h.update(repr((spec_key, extra)).encode())
    return h.hexdigest()


def load(key):
    d = cache_dir()
    if d is None:
        return None
    try:
        with open(os.path.join(d, key + ".pkl"), "rb") as f:
            return pickle.load(f)
    except Exception:   # missing, truncated or from another version: recompile
        return None


def store(key, value):
    d = cache_dir()
    if d is None:
        return
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, os.path.join(d, key + ".pkl"))   # atomic: concurrent processes never see half a file
    except Exception:
        pass   # the cache is an optimisation; never fail a launch because of it

"""The compile cache's key: a hash of everything that can change a compiled kernel specialisation. It covers
the kernel's code and, by value, everything its names resolve to (functions, constants, user classes and
instances, captured ndarrays' types), plus the argument specs, mode, options and device features, and the
hash of spvad's own sources. A global it cannot describe exactly makes the kernel uncacheable rather than
risk a stale entry."""
import enum
import hashlib
import marshal
import types

import numpy as np

from ..types import DType, Matrix, Vector
from .entries import FORMAT
from .source_stamp import package_hash
from .variable_names import variable_names

TRUSTED_MODULES = {"spvad", "math", "numpy"}   # attributes read through these do not change between runs


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



"""The compile cache's file format: an object graph (IR, lowered tasks, ...) as JSON data that cannot run code.

Objects with identity (class instances, lists, dicts, sets) are entries of one table and are referred to by
index, so shared references and cycles survive; tuples, frozensets, enum members, bytes and numbers are
values written in place. Loading rebuilds instances with `cls.__new__(cls)` and fills their `__dict__`, for
the whitelisted classes below only: nothing named in a file is ever imported or called.

    file    {"classes": [qualified name, ...], "objects": [entry, ...], "order": [index, ...], "root": value}
    entry   ["o", class, {attribute: value}] | ["l", [value, ...]] | ["d", [[key, value], ...]] | ["s", [value]]
    value   null | true | false | number | string | ["r", entry index] | ["t", value, ...] (tuple)
            | ["f", value, ...] (frozenset) | ["e", class, member name] | ["b", base64] | ["n", dtype, hex]
    order   the order entries are filled in: contents before their holders (post-order), so an object is
            complete before a set or a dict key hashes it.
"""
import base64
import binascii
import enum
import importlib
import json

import numpy as np

# The classes a file may name, as "module.QualName". Add a row when a compiled kernel starts holding a new
# kind of object; until then such kernels are simply not cached (dumps raises NotStorable).
WHITELIST = (
    "spvad.types.DType", "spvad.types.Vector", "spvad.types.Matrix", "spvad.ir.ops.Op",
    "spvad.pipeline.CompiledKernel", "spvad.pipeline.CompiledTask", "spvad.pipeline.Lowering",
    "spvad.pipeline.Target",
    "spvad.spirv.lower.LoweredTask", "spvad.spirv.lower_adstack.StackHeap",
    "spvad.autodiff.adstack.StackSizer", "spvad.autodiff.array_states.ArrayFacts",
    "spvad.autodiff.validation.CheckPlan",
)
# Every class defined in these modules is whitelisted too (IR node kinds are added there all the time).
WHITELIST_MODULES = ("spvad.ir.nodes",)
NUMPY_KINDS = "biuf"   # numpy scalars of these kinds are stored as (dtype, raw bytes)


class NotStorable(Exception):
    """The graph holds an object this format does not store (a class outside the whitelist, a function...)."""


class BadData(Exception):
    """The data is not a well-formed graph of whitelisted objects."""


_classes = {}   # name -> whitelisted class or None, resolved when first named


def whitelisted(name):
    """The whitelisted class called `name` ("module.QualName"), or None. Resolved on first use, a name at a
    time (a process loading one entry asks for a dozen): only our own modules are ever imported."""
    cls = _classes.get(name, False)
    if cls is False:
        module, _, qualname = name.rpartition(".")
        if name not in WHITELIST and module not in WHITELIST_MODULES:
            return None   # (not remembered: a damaged file could name any number of them)
        cls = _classes[name] = _resolve(name, module, qualname)
    return cls


def _resolve(name, module, qualname):
    if name in WHITELIST:
        try:
            cls = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):   # renamed: kernels holding it are not cached (a test says so)
            return None
    else:   # a class defined in a WHITELIST_MODULES module, at its top level
        cls = vars(importlib.import_module(module)).get(qualname)
        if not (isinstance(cls, type) and cls.__module__ == module and cls.__qualname__ == qualname):
            return None
    return cls if _rebuildable(cls) else None


def classes():
    """name -> class of every whitelisted class."""
    names = list(WHITELIST) + [f"{module}.{obj.__qualname__}" for module in WHITELIST_MODULES
                               for obj in vars(importlib.import_module(module)).values()
                               if isinstance(obj, type) and obj.__module__ == module]
    return {name: cls for name in names for cls in [whitelisted(name)] if cls is not None}


def _rebuildable(cls):
    """Enums (members looked up by name), or plain classes whose instances are just a __dict__."""
    if isinstance(cls, enum.EnumMeta):
        return True
    return (cls.__new__ is object.__new__ and not issubclass(cls, BaseException)
            and not any("__slots__" in vars(c) for c in cls.__mro__[:-1]))


def _name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


# ---- writing ------------------------------------------------------------------------------------------------
_CONTAINERS = (list, dict, set)
_PLAIN = {str, int, float, bool, type(None)}   # JSON scalars are values as they are


class _Writer:
    def __init__(self):
        self.index = {}      # id(obj) -> entry index
        self.objects = []    # entry index -> object (kept alive, so ids stay unique while writing)
        self.entries = []
        self.children = []   # entry index -> indices of the entries it refers to
        self.class_ids = {}  # class name -> its index in the file's table
        self.of_class = {}   # class -> the same index, once checked
        self.refs = None     # the children of the entry being written

    def class_id(self, cls):
        k = self.of_class.get(cls)
        if k is None:
            name = _name(cls)
            if whitelisted(name) is not cls:
                raise NotStorable(name)
            k = self.of_class[cls] = self.class_ids[name] = len(self.class_ids)
        return k

    def ref(self, obj):
        k = self.index.get(id(obj))
        if k is None:
            k = self.index[id(obj)] = len(self.objects)
            self.objects.append(obj)
        self.refs.append(k)
        return ["r", k]

    def value(self, v):
        t = type(v)
        if v is None or t is bool or t is int or t is float or t is str:
            return v
        # objects with identity, most of a graph (tuples, enums and numpy scalars have a __new__ of their own)
        if t in _CONTAINERS or t.__new__ is object.__new__ and hasattr(v, "__dict__"):
            return self.ref(v)
        if t is tuple:
            return ["t", *map(self.value, v)]
        if t is frozenset:
            return ["f", *map(self.value, _in_stable_order(v))]
        if t is bytes:
            return ["b", base64.b64encode(v).decode("ascii")]
        if isinstance(v, enum.Enum):
            return ["e", self.class_id(t), v.name]
        if isinstance(v, np.generic) and v.dtype.kind in NUMPY_KINDS:
            return ["n", v.dtype.str, v.tobytes().hex()]
        raise NotStorable(_name(t))

    def entry(self, obj):
        t = type(obj)
        if t is list:
            return ["l", [self.value(x) for x in obj]]
        if t is dict:
            return ["d", [[self.value(k), self.value(x)] for k, x in obj.items()]]
        if t is set:
            return ["s", [self.value(x) for x in _in_stable_order(obj)]]
        cid = self.class_id(t)
        attrs, value, plain = {}, self.value, _PLAIN
        for k, x in vars(obj).items():
            if type(k) is not str:
                raise NotStorable(_name(t))
            attrs[k] = x if type(x) in plain else value(x)
        return ["o", cid, attrs]

    def fill_order(self):
        """Post-order over the references (iterative: IR chains are deeper than Python's recursion limit)."""
        order, state = [], [0] * len(self.entries)   # 0 new, 1 on the path, 2 done
        for root in range(len(self.entries)):
            if state[root]:
                continue
            state[root] = 1
            path = [(root, iter(self.children[root]))]
            while path:
                k, it = path[-1]
                for c in it:
                    if not state[c]:
                        state[c] = 1
                        path.append((c, iter(self.children[c])))
                        break
                else:
                    path.pop()
                    state[k] = 2
                    order.append(k)
        return order


def _in_stable_order(items):
    """A set's elements in an order that does not depend on string hashing (randomised per process), so
    the same graph always gives the same bytes."""
    return sorted(items, key=lambda x: (type(x).__name__, repr(x)))


def dumps(root):
    """The graph under `root` as JSON bytes; NotStorable when it holds an object this format does not store."""
    w = _Writer()
    w.refs = []
    top = w.value(root)
    while len(w.entries) < len(w.objects):
        w.refs = []
        w.entries.append(w.entry(w.objects[len(w.entries)]))
        w.children.append(w.refs)
    names = sorted(w.class_ids, key=w.class_ids.get)
    doc = {"classes": names, "objects": w.entries, "order": w.fill_order(), "root": top}
    return json.dumps(doc, separators=(",", ":")).encode()


# ---- reading ------------------------------------------------------------------------------------------------
_EMPTY = {"l": list, "d": dict, "s": set}


class _Reader:
    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise BadData("not a JSON object")
        self.classes = []
        for name in doc["classes"]:
            cls = whitelisted(name) if type(name) is str else None
            if cls is None:
                raise BadData("names a class outside the whitelist")
            self.classes.append(cls)
        # per class: what an object entry of it is made with (every whitelisted class but an enum takes
        # object.__new__, see _rebuildable), None for an enum
        makers = [None if isinstance(cls, enum.EnumMeta) else cls for cls in self.classes]
        new, empty = object.__new__, _EMPTY
        self.entries = doc["objects"]
        self.objects = objects = []
        for e in self.entries:   # every entry exists (empty) before any is filled: references may point ahead
            if e[0] == "o":
                cls = makers[e[1]]
                if cls is None:
                    raise BadData("an enum is not an object entry")
                objects.append(new(cls))
            else:
                objects.append(empty[e[0]]())
        self.filled = [False] * len(objects)

    def value(self, v):
        if type(v) in _PLAIN:
            return v
        if type(v) is not list:
            raise BadData("a JSON object where a value belongs")
        tag = v[0]
        if tag == "r":
            k = v[1]
            if type(k) is not int or k < 0:
                raise BadData(f"reference {k!r}")
            return self.objects[k]
        if tag == "t":
            return tuple(self.value(x) for x in v[1:])
        if tag == "f":
            return frozenset(self.key(x) for x in v[1:])
        if tag == "e":
            cls = self.classes[v[1]]
            if not isinstance(cls, enum.EnumMeta):
                raise BadData(f"{_name(cls)} is not an enum")
            return cls.__members__[v[2]]
        if tag == "b":
            return base64.b64decode(v[1], validate=True)
        if tag == "n":
            dt = np.dtype(str(v[1]))
            if dt.kind not in NUMPY_KINDS:
                raise BadData(f"numpy dtype {dt}")
            return np.frombuffer(bytes.fromhex(v[2]), dtype=dt)[0]
        raise BadData(f"unknown tag {tag!r}")

    def key(self, v):
        """A value that is about to be hashed: the objects it holds must be complete, or hashes are wrong."""
        if type(v) is list and v[0] in ("r", "t"):
            for r in _refs_in(v):
                obj = self.objects[_index(r, self.objects)]
                if not self.filled[r] and type(obj).__hash__ is not object.__hash__:
                    raise BadData("an object is hashed before it is filled")
        return self.value(v)

    def fill(self, k):
        e, obj = self.entries[k], self.objects[k]
        tag = e[0]
        if tag == "o":
            attrs = e[2]
            if type(attrs) is not dict:
                raise BadData("object attributes are not a JSON object")
            value, plain = self.value, _PLAIN
            vars(obj).update({a: x if type(x) in plain else value(x) for a, x in attrs.items()})
        elif tag == "l":
            obj.extend(self.value(x) for x in e[1])
        elif tag == "d":
            for kv, x in e[1]:
                obj[self.key(kv)] = self.value(x)
        else:
            obj.update(self.key(x) for x in e[1])
        self.filled[k] = True


def _index(k, table):
    if type(k) is not int or not 0 <= k < len(table):
        raise BadData(f"reference {k!r} out of range")
    return k


def _refs_in(v):
    if v[0] == "r":
        yield v[1]
    elif v[0] == "t":
        for x in v[1:]:
            if type(x) is list and x[0] in ("r", "t"):
                yield from _refs_in(x)


def loads(data):
    """Rebuild the graph written by `dumps`; BadData (never anything else) when `data` is not such a graph."""
    try:
        doc = json.loads(data)
        r = _Reader(doc)
        order = doc["order"]
        if sorted(order) != list(range(len(r.objects))):
            raise BadData("the fill order is not a permutation of the entries")
        for k in order:
            r.fill(k)
        return r.value(doc["root"])
    except BadData:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, binascii.Error,
            UnicodeDecodeError) as e:
        raise BadData(f"{type(e).__name__}: {e}") from None

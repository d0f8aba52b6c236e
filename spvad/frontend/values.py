"""Values the frontend binds names to besides IR statements: argument specs, deferred top-level
expressions, `x.grad`/`x.shape` references, name scopes."""
from .source import FunctionSource


class ArraySpec:
    """What a kernel is specialised on for one ndarray argument."""

    def __init__(self, dtype, ndim, needs_grad=False, needs_dual=False):
        self.dtype, self.ndim, self.needs_grad, self.needs_dual = dtype, ndim, needs_grad, needs_dual


def array_type(a):
    """What a kernel compiled for an ndarray assumes of it (dtype, ndim, whether .grad / .dual exist); None
    for anything else."""
    return (a.dtype, a.ndim, a.grad is not None, a.dual is not None) if getattr(a, "_spvad_ndarray", False) \
        else None


class VectorArgSpec:
    """A vector kernel argument passed by value (one push constant per component). Shaped like ArraySpec
    (ndim None) so a specialisation key can describe either."""
    ndim, needs_grad, needs_dual = None, False, False

    def __init__(self, dtype):
        self.dtype = dtype


class TemplateSpec:
    """A `sp.template()` parameter bound to a Python value at compile time: the kernel is specialised per value
    (`key`: numbers, strings and tuples or lists of them by value, any other object by identity)."""
    ndim, needs_grad, needs_dual = None, False, False

    def __init__(self, value):
        self.value = value
        self.key = ("template", template_key(value))

    @property
    def by_identity(self):
        """Keyed by an object's identity (which another process cannot name: no on-disk cache entry)."""
        return "identity" in repr(self.key)


class TemplateValue:
    """The binding of a sp.template() parameter's name: its value, read where it is used as a global name is
    (an ndarray becomes an array, a small numpy array a constant vector, a number a constant)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Identity:
    """A key equal only for the very same object (which it keeps alive, so its id is not reused)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, Identity) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)

    def __repr__(self):
        return f"identity({id(self.obj):#x})"


def template_key(value):
    if value is None or type(value) in (bool, int, float, str):
        return (type(value).__name__, value)   # 1, 1.0 and True are equal in Python, not in a kernel
    if type(value) in (tuple, list):
        return (type(value).__name__,) + tuple(template_key(v) for v in value)
    return Identity(value)


class Lazy:
    """A pure top-level expression, re-evaluated in each task that uses it (element `index` of it when
    it was unpacked: `n, m = x.shape`)."""

    def __init__(self, node, scope, index=None):
        self.node, self.scope, self.index = node, scope, index


class ArrayRead(Lazy):
    """A top-level value read from arrays (`m = n[None]`, `lo, hi = b[0], b[1]`): `name`, the value of `node`
    (element `index` of it) at the assignment, which stands at `origin` among the kernel's dispatches: the index
    of the first task whose writes come after it, and the ids of the statements that task held before it
    (frontend/array_reads.py)."""

    def __init__(self, node, scope, index, name, origin, loc):
        super().__init__(node, scope, index)
        self.name, self.origin, self.loc = name, origin, loc


class FieldRef:
    """`x.grad` / `x.dual` inside a kernel: the companion buffer of an array."""

    def __init__(self, array, field):
        self.array, self.field = array, field


class ShapeRef:
    def __init__(self, array):
        self.array = array


class EndedLoopIndex:
    """What a loop index name means after its loop: indices are scoped to their loop (as in Taichi), so
    reading one afterwards is an error rather than a silently different value from Python's."""


ENDED = EndedLoopIndex()


class Scope:
    """Names visible in one (inlined) function: locals, then the function's closure and globals."""

    def __init__(self, src: FunctionSource, names=None):
        self.src, self.names = src, dict(names or {})

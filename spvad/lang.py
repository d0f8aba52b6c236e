"""Names users call inside kernels (math, vectors, casts, atomics, static, ndrange) and the `Array` annotation.

Each is an ordinary Python function too (numpy semantics), tagged with `_spvad_builtin` so the frontend
recognises it by identity and compiles it instead of calling it.
"""
import numpy as np


class Array:
    """Annotation for an ndarray kernel argument: `def k(x: sp.Array)`; specialised per dtype and ndim."""


def _builtin(name, fn):
    fn.__name__ = name
    fn._spvad_builtin = name
    return fn


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _round(x):
    """Round half away from zero, as kernels do (np.round rounds half to even)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)[()]


_NUMPY_UNARY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
                "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "exp": np.exp,
                "log": np.log, "log2": np.log2, "exp2": np.exp2, "log10": np.log10, "expm1": np.expm1,
                "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": _rsqrt, "floor": np.floor,
                "ceil": np.ceil, "round": _round, "abs": np.abs, "sign": np.sign}
for _name, _fn in _NUMPY_UNARY.items():
    globals()[_name] = _builtin(_name, lambda x, _f=_fn: _f(x))

atan2 = _builtin("atan2", lambda y, x: np.arctan2(y, x))
hypot = _builtin("hypot", lambda x, y: np.hypot(x, y))
fmod = _builtin("fmod", lambda x, y: np.fmod(x, y))   # C fmod: the sign of x (Python's % takes y's)
pow = _builtin("pow", lambda x, y: np.power(x, y))
min = _builtin("min", lambda *xs: np.minimum.reduce(xs))
max = _builtin("max", lambda *xs: np.maximum.reduce(xs))
clamp = _builtin("clamp", lambda x, lo, hi: np.clip(x, lo, hi))
select = _builtin("select", lambda c, a, b: np.where(c, a, b))
cast = _builtin("cast", lambda v, dtype: dtype.np.type(v))


# vectors (outside kernels: numpy arrays whose last axis holds the components)
def _length(v):
    v = np.asarray(v)
    return np.sqrt(np.sum(v * v, axis=-1))[()]


dot = _builtin("dot", lambda a, b: np.sum(np.asarray(a) * np.asarray(b), axis=-1)[()])
cross = _builtin("cross", lambda a, b: np.cross(a, b))
length = _builtin("length", _length)
normalize = _builtin("normalize", lambda v: np.asarray(v) / np.expand_dims(_length(v), -1))


def _host_only(name):
    def fn(*args, **kwargs):
        raise TypeError(f"sp.{name} can only be used inside a kernel")
    return _builtin(name, fn)


atomic_add = _host_only("atomic_add")
atomic_max = _host_only("atomic_max")
atomic_min = _host_only("atomic_min")


def static(value):
    """Inside kernels: evaluate at compile time (`if sp.static(c)`, `for i in sp.static(range(3))`)."""
    return value


static._spvad_builtin = "static"


def ndrange(*extents):
    """`for i, j in sp.ndrange(n, m)`: a parallel multi-dimensional loop at the top of a kernel."""
    ranges = [range(e) if isinstance(e, int) else range(*e) for e in extents]
    import itertools
    return itertools.product(*ranges)


ndrange._spvad_builtin = "ndrange"

__all__ = ["Array", "dot", "cross", "length", "normalize",
           "atan2", "hypot", "fmod", "pow", "min", "max", "clamp", "select", "cast", "atomic_add", "atomic_max",
           "atomic_min", "static", "ndrange", *_NUMPY_UNARY]

"""Names users call inside kernels (math, vectors, casts, atomics, static, ndrange) and the `Array` annotation.

Each is an ordinary Python function too (numpy semantics), tagged with `_spvad_builtin` so the frontend
recognises it by identity and compiles it instead of calling it.
"""
import math

import numpy as np


class Array:
    """Annotation for an ndarray kernel argument: `def k(x: sp.Array)`; specialised per dtype and ndim."""


class Template:
    """What `sp.template()` returns: the annotation of a parameter bound at compile time (Taichi's
    `ti.template()`). An ndarray passed there is bound as an `sp.Array` argument is; any other value (a
    number, a tuple, a @sp.func, ...) is a compile-time constant of the kernel, specialised per value."""

    def __repr__(self):
        return "sp.template()"


def template():
    """`def k(field: sp.template(), scale: sp.template())`: see Template."""
    return Template()


def _builtin(name, fn):
    fn.__name__ = name
    fn._spvad_builtin = name
    return fn


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _power(x, y):
    """C99 pow, as kernels compute it: numpy's power ufunc on arrays (on scalars, and for a scalar exponent
    0.5, numpy takes sqrt: -0.0 at -0.0, NaN at -inf)."""
    x, y = np.asarray(x), np.asarray(y)
    shape = np.broadcast_shapes(x.shape, y.shape)
    return np.power(np.broadcast_to(x, shape).reshape(-1), np.broadcast_to(y, shape).reshape(-1)).reshape(shape)[()]


_NUMPY_UNARY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
                "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "exp": np.exp,
                "log": np.log, "log2": np.log2, "exp2": np.exp2, "log10": np.log10, "expm1": np.expm1,
                "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": _rsqrt, "floor": np.floor,
                "ceil": np.ceil, "round": np.rint, "abs": np.abs, "sign": np.sign}
for _name, _fn in _NUMPY_UNARY.items():
    globals()[_name] = _builtin(_name, lambda x, _f=_fn: _f(x))

atan2 = _builtin("atan2", lambda y, x: np.arctan2(y, x))
hypot = _builtin("hypot", lambda x, y: np.hypot(x, y))
fmod = _builtin("fmod", lambda x, y: np.fmod(x, y))   # C fmod: the sign of x (Python's % takes y's)
pow = _builtin("pow", _power)
min = _builtin("min", lambda *xs: np.minimum.reduce(xs))
max = _builtin("max", lambda *xs: np.maximum.reduce(xs))
clamp = _builtin("clamp", lambda x, lo, hi: np.clip(x, lo, hi))
select = _builtin("select", lambda c, a, b: np.where(c, a, b))
cast = _builtin("cast", lambda v, dtype: dtype.np.type(v))


# the math library (kernels: ir/math_functions.py's expansions); numpy's functions, or these definitions
def _float(x):
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _math_ufunc(fn):
    """Python's math.<fn> per element (numpy has no erf), in the input's float dtype."""
    def per_element(x):
        x = _float(x)
        return np.vectorize(fn, otypes=[np.float64])(x).astype(x.dtype)[()]
    return per_element


def _sigmoid(x):
    x = _float(x)
    q = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + q), q / (1 + q))[()]


def _smoothstep(e0, e1, x):
    t = np.clip((np.asarray(x) - e0) / (np.asarray(e1) - e0), 0, 1)
    return t * t * (3 - 2 * t)


def _lerp(a, b, t):
    return np.asarray(a) * (1 - np.asarray(t)) + np.asarray(b) * t


_LIBRARY = {"asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt, "trunc": np.trunc,
            "exp10": lambda x: np.power(_float(x).dtype.type(10), x), "erf": _math_ufunc(math.erf),
            "erfc": _math_ufunc(math.erfc), "sigmoid": _sigmoid, "softplus": lambda x: np.logaddexp(_float(x), 0),
            "log_sigmoid": lambda x: -np.logaddexp(-_float(x), 0), "square": np.square, "degrees": np.degrees,
            "radians": np.radians, "copysign": np.copysign, "logaddexp": np.logaddexp, "where": np.where,
            "lerp": _lerp, "mix": _lerp, "smoothstep": _smoothstep}
for _name, _fn in _LIBRARY.items():
    globals()[_name] = _builtin(_name, lambda *a, _f=_fn: _f(*a))


# vectors (outside kernels: numpy arrays whose last axis holds the components)
def _length(v):
    v = np.asarray(v)
    return np.sqrt(np.sum(v * v, axis=-1))[()]


def _cross(a, b):
    """3-vectors: the cross product; 2-vectors: the scalar a0 b1 - a1 b0 (as in kernels and Taichi)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape[-1] == b.shape[-1] == 2:
        return (a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0])[()]
    return np.cross(a, b)


dot = _builtin("dot", lambda a, b: np.sum(np.asarray(a) * np.asarray(b), axis=-1)[()])
cross = _builtin("cross", _cross)
length = _builtin("length", lambda v, eps=0: np.sqrt(np.sum(np.asarray(v) * np.asarray(v), axis=-1) + eps)[()])
normalize = _builtin("normalize", lambda v, eps=0: np.asarray(v) / np.expand_dims(_length(v) + eps, -1))


# matrices (outside kernels: numpy arrays whose last two axes hold the rows and columns)
def _svd(a):
    """Taichi's convention: A = U @ S @ V.T with U, V rotations; the last singular value takes det's sign."""
    a = np.asarray(a, dtype=np.result_type(a, np.float32))
    u, s, vt = np.linalg.svd(a)
    v = np.swapaxes(vt, -1, -2).copy()
    for m, flip in ((u, np.linalg.det(u) < 0), (v, np.linalg.det(v) < 0)):
        m[..., :, -1] = np.where(flip[..., None], -m[..., :, -1], m[..., :, -1])
        s[..., -1] = np.where(flip, -s[..., -1], s[..., -1])
    sigma = np.zeros_like(a)
    idx = np.arange(a.shape[-1])
    sigma[..., idx, idx] = s
    return u, sigma, v


def _polar_decompose(a):
    """A = R @ S with R a rotation and S symmetric."""
    u, sigma, v = _svd(a)
    vt = np.swapaxes(v, -1, -2)
    return u @ vt, v @ sigma @ vt


transpose = _builtin("transpose", lambda a: np.swapaxes(np.asarray(a), -1, -2))
trace = _builtin("trace", lambda a: np.trace(np.asarray(a), axis1=-2, axis2=-1)[()])
determinant = _builtin("determinant", lambda a: np.linalg.det(np.asarray(a))[()])
inverse = _builtin("inverse", lambda a: np.linalg.inv(np.asarray(a)))
outer = _builtin("outer", lambda u, v: np.einsum("...i,...j->...ij", np.asarray(u), np.asarray(v)))
svd = _builtin("svd", _svd)
polar_decompose = _builtin("polar_decompose", _polar_decompose)


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

__all__ = ["Array", "template", "dot", "cross", "length", "normalize", "transpose", "trace", "determinant", "inverse",
           "outer", "svd", "polar_decompose",
           "atan2", "hypot", "fmod", "pow", "min", "max", "clamp", "select", "cast", "atomic_add", "atomic_max",
           "atomic_min", "static", "ndrange", *_NUMPY_UNARY, *_LIBRARY]

# random numbers (frontend/random_numbers.py): inside kernels only, where sp.init's random_seed and the launch
# decide them
random = _host_only("random")
randn = _host_only("randn")
__all__ += ["random", "randn"]

# derivatives of @sp.func functions inside kernels (frontend/derivatives.py); sp.stop_gradient also
# stops kernel-level derivatives, and is the identity on the host
class _Transform:
    """What `sp.grad(f, argnums)` & co give outside a kernel (`dsdf = sp.grad(sdf)` at module level):
    kernels may call it, as they call sp.grad(sdf)(...) itself; Python code may not."""

    def __init__(self, name, f, argnums):
        self._spvad_transform = (name, f, argnums)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"sp.{self._spvad_transform[0]}(f)(...) can only be called inside a kernel or @sp.func")


def _transform(name):
    return _builtin(name, lambda f, argnums=0: _Transform(name, f, argnums))


grad = _transform("grad")
value_and_grad = _transform("value_and_grad")
jacobian = _transform("jacobian")
hessian = _transform("hessian")
jvp = _host_only("jvp")
vjp = _host_only("vjp")
stop_gradient = _builtin("stop_gradient", lambda v: v)
__all__ += ["grad", "value_and_grad", "jacobian", "hessian", "jvp", "vjp", "stop_gradient"]

# quaternions, as Warp's: q = (x, y, z, w) a 4-vector, w the real part (conventions: frontend/quaternions.py);
# outside kernels, numpy arrays whose last axis holds the components
def _quat(v, w):
    return np.concatenate([v, np.expand_dims(w, -1)], axis=-1)


def _quat_mul(p, q):
    p, q = np.asarray(p), np.asarray(q)
    pv, pw, qv, qw = p[..., :3], p[..., 3], q[..., :3], q[..., 3]
    return _quat(pw[..., None] * qv + qw[..., None] * pv + np.cross(pv, qv), pw * qw - np.sum(pv * qv, -1))


def _quat_rotate(q, v, sign=1.0):
    q, v = np.asarray(q), np.asarray(v)
    qv, w = q[..., :3], q[..., 3:]
    return v * (2 * w * w - 1) + sign * np.cross(qv, v) * w * 2 + qv * np.sum(qv * v, -1, keepdims=True) * 2


def _quat_conjugate(q):
    q = np.asarray(q)
    return _quat(-q[..., :3], q[..., 3])


def _quat_to_axis_angle(q):
    q = np.asarray(q)
    v, w = q[..., :3], q[..., 3]
    norm = np.sqrt(np.sum(v * v, -1))
    scale = np.where(w < 0, -1.0, 1.0) / np.where(norm > 0, norm, 1.0)
    return v * scale[..., None].astype(v.dtype), 2 * np.arctan2(norm, np.abs(w))


def _quat_from_matrix(m):
    """Shepperd's method (Warp's): the trace's branch where tr >= 0, else the largest diagonal's."""
    m = np.asarray(m)
    a = [[m[..., i, j] for j in range(3)] for i in range(3)]
    tr = a[0][0] + a[1][1] + a[2][2]
    h = np.sqrt(np.maximum(tr + 1, 1e-30))
    q = np.stack([(a[2][1] - a[1][2]) * 0.5 / h, (a[0][2] - a[2][0]) * 0.5 / h, (a[1][0] - a[0][1]) * 0.5 / h,
                  0.5 * h], -1)
    by_diagonal = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        h = np.sqrt(np.maximum(a[i][i] - (a[j][j] + a[k][k]) + 1, 1e-30))
        c = [None] * 4
        c[i], c[j], c[k], c[3] = 0.5 * h, (a[i][j] + a[j][i]) * 0.5 / h, (a[k][i] + a[i][k]) * 0.5 / h, \
            (a[k][j] - a[j][k]) * 0.5 / h
        by_diagonal.append(np.stack(c, -1))
    first = a[1][1] > a[0][0]
    second = a[2][2] > np.where(first, a[1][1], a[0][0])
    pick = np.where(second[..., None], by_diagonal[2], np.where(first[..., None], by_diagonal[1], by_diagonal[0]))
    q = np.where((tr >= 0)[..., None], q, pick)
    return q / np.sqrt(np.sum(q * q, -1, keepdims=True))


def _quat_slerp(q0, q1, t):
    axis, angle = _quat_to_axis_angle(_quat_mul(quat_inverse(q0), q1))
    return _quat_mul(q0, quat_from_axis_angle(axis, np.asarray(t) * angle))


def _quat_rpy(roll, pitch, yaw):
    """q_z(yaw) q_y(pitch) q_x(roll)."""
    (cr, sr), (cp, sp), (cy, sy) = [(np.cos(np.asarray(a) * 0.5), np.sin(np.asarray(a) * 0.5))
                                    for a in (roll, pitch, yaw)]
    return np.stack([cy * sr * cp - sy * cr * sp, cy * cr * sp + sy * sr * cp, sy * cr * cp - cy * sr * sp,
                     cy * cr * cp + sy * sr * sp], -1)


quat_identity = _builtin("quat_identity", lambda dtype=None: np.array(
    [0, 0, 0, 1], dtype=np.float32 if dtype is None else dtype.np))
quat_mul = _builtin("quat_mul", _quat_mul)
quat_conjugate = _builtin("quat_conjugate", _quat_conjugate)
quat_inverse = _builtin("quat_inverse", lambda q: _quat_conjugate(q) / np.sum(np.asarray(q) ** 2, -1, keepdims=True))
quat_rotate = _builtin("quat_rotate", _quat_rotate)
quat_rotate_inv = _builtin("quat_rotate_inv", lambda q, v: _quat_rotate(q, v, -1.0))
quat_from_axis_angle = _builtin("quat_from_axis_angle", lambda axis, angle: _quat(
    np.asarray(axis) * np.sin(np.asarray(angle) * 0.5)[..., None], np.cos(np.asarray(angle) * 0.5)))
quat_to_matrix = _builtin("quat_to_matrix", lambda q: np.stack([_quat_rotate(q, e) for e in np.eye(3)], -1))
quat_from_matrix = _builtin("quat_from_matrix", _quat_from_matrix)
quat_slerp = _builtin("quat_slerp", _quat_slerp)
quat_rpy = _builtin("quat_rpy", _quat_rpy)
quat_to_axis_angle = _builtin("quat_to_axis_angle", _quat_to_axis_angle)
__all__ += ["quat_identity", "quat_mul", "quat_conjugate", "quat_inverse", "quat_rotate", "quat_rotate_inv",
            "quat_from_axis_angle", "quat_to_matrix", "quat_from_matrix", "quat_slerp", "quat_rpy",
            "quat_to_axis_angle"]

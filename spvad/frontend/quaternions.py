"""Quaternions in kernels, as Warp's: q = (x, y, z, w) is a 4-vector, w its real part. Each sp.quat_* row
expands into vector and scalar operations (operators.py), so both autodiff modes differentiate through it.

Conventions (Warp's): quat_mul is the Hamilton product; quat_rotate(q, v) = v (2w^2 - 1) + 2w (q.v x v) +
2 q.v (q.v . v) and quat_to_matrix's columns rotate the unit axes (both assume |q| = 1); quat_inverse is
conj(q) / |q|^2 (Warp's conj(q): equal for unit q); quat_from_axis_angle does not normalise the axis;
quat_from_matrix is Shepperd's branch on the trace, then normalised; quat_rpy(roll, pitch, yaw) =
q_z(yaw) q_y(pitch) q_x(roll); quat_to_axis_angle(q) -> (axis, angle), angle = 2 atan2(|q.v|, |w|) in
[0, pi] and the axis flipped where w < 0 (a zero axis for q.v = 0); quat_slerp(q0, q1, t) = q0 *
from_axis_angle(to_axis_angle(q0^-1 q1) scaled by t): the shortest path, q0 itself where q1 = +-q0.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS
from ..ir.ops import Op
from .linalg import TINY, add, sub
from .rows import positional, with_keywords
from .vectors import MatValue, VecValue, is_vector

# quat_slerp takes sin(t theta) / |v| as its limit t / |w| where |v|^2 is below this: there the two differ
# by O(theta^2) relative, below the dtype's rounding (and no transcendental sees a vanishing argument)
SMALL_ANGLE = {T.f32: 1e-8, T.f64: 1e-16}


# ---- arguments ----
def vector_of(b, name, v, n, what):
    if not is_vector(v) or v.n != n:
        got = getattr(v, "name", type(v).__name__)
        b.error(f"sp.{name}: {what} must be a {n}-vector, got {got}")
    return VecValue(b.to_float(c) for c in v.comps)


def scalar_of(b, name, v, what):
    if isinstance(v, VecValue) or not isinstance(v, (N.Stmt,) + PY_SCALARS):
        b.error(f"sp.{name}: {what} must be a scalar, got {getattr(v, 'name', type(v).__name__)}")
    return b.to_float(v)


def count(b, name, args, n, words):
    if len(args) != n:
        b.error(f"sp.{name}({words}) takes {n} argument{'s' * (n > 1)}, got {len(args)}")
    return args


def quat_of(b, name, v, what="q"):
    return vector_of(b, name, v, 4, f"the quaternion {what}")


# ---- the expansions, on VecValues ----
def split(q):
    """(vector part, real part) of q = (x, y, z, w)."""
    return VecValue(q.comps[:3]), q.comps[3]


def join(v, w):
    return VecValue(v.comps + (w,))


def cross(b, u, v):
    return VecValue(b.cross_comps(u.comps, v.comps))


def mul(b, p, q):
    """The Hamilton product: (p.w q.v + q.w p.v + p.v x q.v, p.w q.w - p.v . q.v)."""
    pv, pw = split(p)
    qv, qw = split(q)
    v = b.binop("+", b.binop("+", b.binop("*", qv, pw), b.binop("*", pv, qw)), cross(b, pv, qv))
    return join(v, b.binop("-", b.binop("*", pw, qw), b.dot(pv, qv)))


def conjugate(b, q):
    v, w = split(q)
    return join(b.unary("-", v), w)


def inverse(b, q):
    return b.binop("*", conjugate(b, q), b.binop("/", 1.0, b.dot(q, q)))


def rotate(b, q, v, sign="+"):
    """v (2w^2 - 1) +- 2w (q.v x v) + 2 q.v (q.v . v); sign "-" rotates by the inverse of a unit q."""
    qv, w = split(q)
    c = b.binop("-", b.binop("*", b.binop("*", 2.0, w), w), 1.0)
    turned = b.binop("*", cross(b, qv, v), b.binop("*", w, 2.0))
    along = b.binop("*", qv, b.binop("*", b.dot(qv, v), 2.0))
    return b.binop("+", b.binop(sign, b.binop("*", v, c), turned), along)


def from_axis_angle(b, axis, angle):
    half = b.binop("*", angle, 0.5)
    return join(b.binop("*", axis, b.math1(Op.SIN, half)), b.math1(Op.COS, half))


def to_matrix(b, q):
    """Columns quat_rotate(q, e_k), written out: c + 2x^2, 2xy - 2wz, ... with c = 2w^2 - 1."""
    x, y, z, w = q.comps
    c = b.binop("-", b.binop("*", b.binop("*", 2.0, w), w), 1.0)

    def two(p, r):
        return b.binop("*", b.binop("*", 2.0, p), r)

    return MatValue([add(b, c, two(x, x)), sub(b, two(x, y), two(w, z)), add(b, two(x, z), two(w, y)),
                     add(b, two(x, y), two(w, z)), add(b, c, two(y, y)), sub(b, two(y, z), two(w, x)),
                     sub(b, two(x, z), two(w, y)), add(b, two(y, z), two(w, x)), add(b, c, two(z, z))], 3, 3)


def from_matrix(b, m):
    """Shepperd's method as Warp's: the trace's branch where tr >= 0, else the largest diagonal's; then
    normalised. Every branch is computed and one selected (their sqrt guarded: no NaN leaks into
    derivatives through the branches not taken)."""
    a = [[m.at(i, j) for j in range(3)] for i in range(3)]

    def half_and_scale(arg):
        h = b.math1(Op.SQRT, b.minmax(Op.MAX, add(b, arg, 1.0), TINY))
        return b.binop("*", 0.5, h), b.binop("/", 0.5, h)

    tr = add(b, add(b, a[0][0], a[1][1]), a[2][2])
    big, s = half_and_scale(tr)
    by_trace = [b.binop("*", sub(b, a[2][1], a[1][2]), s), b.binop("*", sub(b, a[0][2], a[2][0]), s),
                b.binop("*", sub(b, a[1][0], a[0][1]), s), big]
    by_diagonal = []
    for i in range(3):   # q_i = h / 2 from 1 + a_ii - a_jj - a_kk; the others from sums and differences
        j, k = (i + 1) % 3, (i + 2) % 3
        big, s = half_and_scale(sub(b, a[i][i], add(b, a[j][j], a[k][k])))
        q = [None] * 4
        q[i], q[j], q[k] = big, b.binop("*", add(b, a[i][j], a[j][i]), s), b.binop("*", add(b, a[k][i], a[i][k]), s)
        q[3] = b.binop("*", sub(b, a[k][j], a[j][k]), s)
        by_diagonal.append(VecValue(q))
    first = b.binop(">", a[1][1], a[0][0])
    second = b.binop(">", a[2][2], b.select(first, a[1][1], a[0][0]))
    pick = b.select(second, by_diagonal[2], b.select(first, by_diagonal[1], by_diagonal[0]))
    q = b.select(b.binop(">=", tr, 0.0), VecValue(by_trace), pick)
    return b.binop("*", q, b.math1(Op.RSQRT, b.dot(q, q)))


def to_axis_angle(b, q):
    """(axis, angle): axis = +-q.v / |q.v| (the sign of w; zero where q.v = 0), angle = 2 atan2(|q.v|, |w|)."""
    v, w = split(q)
    ok, norm = vector_norm(b, v)
    inv = b.binop("/", b.select(b.binop("<", w, 0.0), -1.0, 1.0), norm)
    zero = b.const(0.0, norm.dtype)
    axis = b.select(ok, b.binop("*", v, inv), VecValue([zero] * 3))
    angle = b.binop("*", 2.0, b.compute(Op.ATAN2, *b.unify(b.select(ok, norm, zero), b.math1(Op.ABS, w))))
    return axis, angle


def vector_norm(b, v):
    """(|v| > 0, |v| or 1 where v = 0): no infinite derivative of sqrt at 0 reaches a branch not taken."""
    square = b.dot(v, v)
    ok = b.binop(">", square, 0.0)
    return ok, b.math1(Op.SQRT, b.select(ok, square, 1.0))


def slerp(b, q0, q1, t):
    """q0 (axis sin(t angle / 2), cos(t angle / 2)) with (axis, angle) = quat_to_axis_angle(q0^-1 q1), as
    Warp's; written as q0 (+-v sin(t theta) / |v|, cos(t theta)), theta = atan2(|v|, |w|), whose factor
    sin(t theta) / |v| is t / |w| where v (nearly) vanishes (its limit; the factor is even in |v|, so its
    derivatives are right too): q0 itself where q1 = +-q0, with finite derivatives."""
    v, w = split(mul(b, inverse(b, q0), q1))
    square = b.dot(v, v)
    ok = b.binop(">", square, SMALL_ANGLE[square.dtype])
    norm = b.math1(Op.SQRT, b.select(ok, square, 1.0))
    abs_w = b.math1(Op.ABS, w)
    sign = b.select(b.binop("<", w, 0.0), -1.0, 1.0)
    t_theta = b.binop("*", t, b.compute(Op.ATAN2, *b.unify(b.select(ok, norm, 0.0), abs_w)))
    factor = b.select(ok, b.binop("/", b.math1(Op.SIN, t_theta), norm),
                      b.binop("/", t, b.minmax(Op.MAX, abs_w, TINY)))
    return mul(b, q0, join(b.binop("*", v, b.binop("*", sign, factor)), b.math1(Op.COS, t_theta)))


def rpy(b, roll, pitch, yaw):
    """q_z(yaw) q_y(pitch) q_x(roll), multiplied out (Warp's formula)."""
    (cr, sr), (cp, sp), (cy, sy) = [(b.math1(Op.COS, h), b.math1(Op.SIN, h))
                                    for h in (b.binop("*", a, 0.5) for a in (roll, pitch, yaw))]

    def prod(p, q, r):
        return b.binop("*", b.binop("*", p, q), r)

    return VecValue([b.binop("-", prod(cy, sr, cp), prod(sy, cr, sp)),
                     b.binop("+", prod(cy, cr, sp), prod(sy, sr, cp)),
                     b.binop("-", prod(sy, cr, cp), prod(cy, sr, sp)),
                     b.binop("+", prod(cy, cr, cp), prod(sy, sr, sp))])


# ---- the rows ----
def identity_row(b, args, kw):
    """`sp.quat_identity()` (f32) or `sp.quat_identity(sp.f64)` / `(dtype=sp.f64)`, as Warp's."""
    given = list(args) + ([kw.pop("dtype")] if "dtype" in kw else [])
    dtype = given[0] if given else None
    if kw or len(given) > 1 or not (dtype is None or isinstance(dtype, T.DType) and dtype.is_float):
        b.error("sp.quat_identity takes at most a float dtype (sp.f32, sp.f64)")
    consts = [b.const(x, dtype) for x in (0.0, 0.0, 0.0, 1.0)]
    return VecValue(b.strong(c) for c in consts) if dtype is not None else VecValue(consts)


def mul_row(b, args):
    p, q = count(b, "quat_mul", args, 2, "p, q")
    return mul(b, quat_of(b, "quat_mul", p, "p"), quat_of(b, "quat_mul", q))


def conjugate_row(b, args):
    return conjugate(b, quat_of(b, "quat_conjugate", *count(b, "quat_conjugate", args, 1, "q")))


def inverse_row(b, args):
    return inverse(b, quat_of(b, "quat_inverse", *count(b, "quat_inverse", args, 1, "q")))


def rotate_row(name, sign):
    def body(b, args):
        q, v = count(b, name, args, 2, "q, v")
        return rotate(b, quat_of(b, name, q), vector_of(b, name, v, 3, "v"), sign)
    return body


def from_axis_angle_row(b, args):
    axis, angle = count(b, "quat_from_axis_angle", args, 2, "axis, angle")
    return from_axis_angle(b, vector_of(b, "quat_from_axis_angle", axis, 3, "axis"),
                           scalar_of(b, "quat_from_axis_angle", angle, "angle"))


def to_matrix_row(b, args):
    return to_matrix(b, quat_of(b, "quat_to_matrix", *count(b, "quat_to_matrix", args, 1, "q")))


def from_matrix_row(b, args):
    m, = count(b, "quat_from_matrix", args, 1, "m")
    if not isinstance(m, MatValue) or m.shape != (3, 3):
        b.error(f"sp.quat_from_matrix takes a 3x3 matrix, got {getattr(m, 'name', type(m).__name__)}")
    return from_matrix(b, m.with_comps(b.to_float(c) for c in m.comps))


def to_axis_angle_row(b, args):
    return to_axis_angle(b, quat_of(b, "quat_to_axis_angle", *count(b, "quat_to_axis_angle", args, 1, "q")))


def slerp_row(b, args):
    q0, q1, t = count(b, "quat_slerp", args, 3, "q0, q1, t")
    return slerp(b, quat_of(b, "quat_slerp", q0, "q0"), quat_of(b, "quat_slerp", q1, "q1"),
                 scalar_of(b, "quat_slerp", t, "t"))


def rpy_row(b, args):
    angles = count(b, "quat_rpy", args, 3, "roll, pitch, yaw")
    return rpy(b, *(scalar_of(b, "quat_rpy", a, w) for a, w in zip(angles, ("roll", "pitch", "yaw"))))


CALLS = {"quat_identity": with_keywords(identity_row), "quat_mul": positional(mul_row),
         "quat_conjugate": positional(conjugate_row), "quat_inverse": positional(inverse_row),
         "quat_rotate": positional(rotate_row("quat_rotate", "+")),
         "quat_rotate_inv": positional(rotate_row("quat_rotate_inv", "-")),
         "quat_from_axis_angle": positional(from_axis_angle_row), "quat_to_matrix": positional(to_matrix_row),
         "quat_from_matrix": positional(from_matrix_row), "quat_to_axis_angle": positional(to_axis_angle_row),
         "quat_slerp": positional(slerp_row), "quat_rpy": positional(rpy_row)}

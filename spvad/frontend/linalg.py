"""Linear algebra of small matrices in kernels (functions of the kernel builder `b`), built from scalar ops so
both autodiff modes differentiate through it: determinant and inverse (cofactors, n <= 4), svd and polar
decomposition (2x2 and 3x3).

svd(A) = (U, S, V), A = U @ S @ V.T, as Taichi: U and V are rotations (det +1), S is diagonal with the
singular values in decreasing order of magnitude, the last one carrying the sign of det(A). The method:
a fixed number of cyclic Jacobi sweeps diagonalise A^T A = V L V^T (rotations chosen with |angle| <= pi/4,
so V is a smooth function of A), a compare-swap network sorts L (negating a column per swap keeps
det V = +1), then U's columns come from A V by Gram-Schmidt and a cross product. Derivatives are those
of the exact decomposition wherever the singular values are distinct (and, for U, at most the last one
is zero); at repeated singular values the decomposition is not differentiable and gradients are not
meaningful (they may be huge or NaN).
polar_decompose(A) = (R, S), A = R @ S with R a rotation and S symmetric: 2x2 in closed form (as Taichi),
3x3 as R = U V^T, S = V S V^T.
"""
from .. import types as T
from ..ir import nodes as N
from .vectors import MatValue
from ..ir.ops import Op

# 3x3 cyclic Jacobi converges quadratically: 4 sweeps left off-diagonals below 2e-16 relative on 2,000 random
# matrices in float64 (3 sweeps: 2e-6); one more lets the derivatives converge too
JACOBI_SWEEPS = {T.f32: 5, T.f64: 6}
TINY = 1e-30                          # guards divisions in degenerate cases (a zero matrix)


# ---- determinant and inverse by cofactors ----
def det(b, rows):
    n = len(rows)
    if n == 1:
        return rows[0][0]
    if n == 2:
        return sub(b, mul(b, rows[0][0], rows[1][1]), mul(b, rows[0][1], rows[1][0]))
    acc = None
    for j in range(n):
        term = mul(b, rows[0][j], det(b, minor(rows, 0, j)))
        acc = term if acc is None else (add(b, acc, term) if j % 2 == 0 else sub(b, acc, term))
    return acc


def inverse(b, a):
    """inverse = adjugate / det: entry (i, j) is the cofactor (j, i) over det(A)."""
    rows = [[a.at(i, j) for j in range(a.cols)] for i in range(a.rows)]
    n = a.rows
    inv_det = b.binop("/", 1.0, det(b, rows))
    if n == 1:
        return MatValue([inv_det], 1, 1)
    comps = []
    for i in range(n):
        for j in range(n):
            c = det(b, minor(rows, j, i))
            c = c if (i + j) % 2 == 0 else b.binop("-", 0.0, c)   # -x as 0 - x keeps it one op
            comps.append(mul(b, c, inv_det))
    return MatValue(comps, n, n)


# ---- svd ----
def svd(b, a):
    """(columns of U, singular values, columns of V) of a 2x2 or 3x3 float matrix."""
    n = a.rows
    ata = [[dot_list(b, [a.at(k, i) for k in range(n)], [a.at(k, j) for k in range(n)])
            for j in range(n)] for i in range(n)]
    lam, vcols = symmetric_eigen(b, ata, a.comps[0].dtype)
    av = [[dot_list(b, [a.at(i, k) for k in range(n)], v) for i in range(n)] for v in vcols]
    s1 = norm(b, av[0])
    u1 = safe_unit(b, av[0], s1, axis(n, 0))
    if n == 2:
        u2 = [b.binop("-", 0.0, u1[1]), u1[0]]   # u1 turned by +90 degrees: U is a rotation
        return [u1, u2], [s1, dot_list(b, u2, av[1])], vcols
    proj = dot_list(b, u1, av[1])
    w = [sub(b, x, mul(b, proj, y)) for x, y in zip(av[1], u1)]
    s2 = norm(b, w)
    # rank 1: any unit vector orthogonal to u1 (from the axis u1 is least aligned with)
    far = [b.select(b.binop("<", abs_(b, u1[0]), 0.9), c0, c1)
           for c0, c1 in zip(axis(3, 0), axis(3, 1))]
    fallback = b.cross_comps(u1, far)
    u2 = safe_unit(b, w, s2, unit(b, fallback))
    u3 = b.cross_comps(u1, u2)
    return [u1, u2, u3], [s1, s2, dot_list(b, u3, av[2])], vcols


def symmetric_eigen(b, m, dtype):
    """Eigenvalues (decreasing) and eigenvector columns (a rotation) of a symmetric 2x2 / 3x3 matrix
    given as rows of IR values: cyclic Jacobi with a fixed number of sweeps, then a sorting network."""
    n = len(m)
    m = [row[:] for row in m]
    v = [[b.const(1.0 if i == j else 0.0, dtype) for j in range(n)] for i in range(n)]   # rows of V
    pivots = [(0, 1)] if n == 2 else [(0, 1), (0, 2), (1, 2)] * JACOBI_SWEEPS[dtype]
    for p, q in pivots:   # 2x2: one rotation diagonalises exactly
        jacobi_rotation(b, m, v, p, q)
    lam = [m[i][i] for i in range(n)]
    cols = [[v[k][i] for k in range(n)] for i in range(n)]
    for i, j in [(0, 1)] if n == 2 else [(0, 1), (1, 2), (0, 1)]:
        swap = b.binop("<", lam[i], lam[j])
        lam[i], lam[j] = b.select(swap, lam[j], lam[i]), b.select(swap, lam[i], lam[j])
        neg_i = [b.binop("-", 0.0, c) for c in cols[i]]   # swap with a sign: det V stays +1
        cols[i], cols[j] = ([b.select(swap, y, x) for x, y in zip(cols[i], cols[j])],
                            [b.select(swap, y, x) for x, y in zip(cols[j], neg_i)])
    return lam, cols


def jacobi_rotation(b, m, v, p, q):
    """M <- J^T M J and V <- V J, with J the rotation in the (p, q) plane that zeroes M[p][q]:
    t = tan(angle) = 2 m_pq sign(d) / (|d| + sqrt(d^2 + 4 m_pq^2)), d = m_qq - m_pp (|t| <= 1)."""
    mpq, mpp, mqq = m[p][q], m[p][p], m[q][q]
    d = sub(b, mqq, mpp)
    sign = b.select(b.binop(">=", d, 0.0), 1.0, -1.0)
    root = b.math1(Op.SQRT, add(b, mul(b, d, d), mul(b, 4.0, mul(b, mpq, mpq))))
    den = b.minmax(Op.MAX, add(b, abs_(b, d), root), TINY)
    t = b.binop("/", mul(b, mul(b, 2.0, mpq), sign), den)
    c = b.math1(Op.RSQRT, add(b, 1.0, mul(b, t, t)))
    s = mul(b, t, c)
    cc, ss, cs2 = mul(b, c, c), mul(b, s, s), mul(b, 2.0, mul(b, c, mul(b, s, mpq)))
    new_pp = add(b, sub(b, mul(b, cc, mpp), cs2), mul(b, ss, mqq))
    new_qq = add(b, add(b, mul(b, ss, mpp), cs2), mul(b, cc, mqq))
    for r in range(len(m)):
        if r in (p, q):
            continue
        mrp, mrq = m[r][p], m[r][q]
        m[r][p] = m[p][r] = sub(b, mul(b, c, mrp), mul(b, s, mrq))
        m[r][q] = m[q][r] = add(b, mul(b, s, mrp), mul(b, c, mrq))
    zero = b.const(0.0, d.dtype)
    m[p][p], m[q][q], m[p][q], m[q][p] = new_pp, new_qq, zero, zero
    for row in v:
        vp, vq = row[p], row[q]
        row[p] = sub(b, mul(b, c, vp), mul(b, s, vq))
        row[q] = add(b, mul(b, s, vp), mul(b, c, vq))


# ---- polar decomposition ----
def polar(b, a):
    if a.rows == 2:   # closed form: the rotation by atan2(a10 - a01, a00 + a11) makes R^T A symmetric
        x = add(b, a.at(0, 0), a.at(1, 1))
        y = sub(b, a.at(1, 0), a.at(0, 1))
        r2 = add(b, mul(b, x, x), mul(b, y, y))
        scale = b.math1(Op.RSQRT, b.minmax(Op.MAX, r2, TINY))
        ok = b.binop(">", r2, TINY)   # x = y = 0: A is symmetric already, R = I
        c, s = b.select(ok, mul(b, x, scale), 1.0), b.select(ok, mul(b, y, scale), 0.0)
        r = MatValue([c, b.binop("-", 0.0, s), s, c], 2, 2)
        return r, b.matmul(b.transposed(r), a)
    u, sig, v = svd(b, a)
    uu, vv = from_columns(u), from_columns(v)
    r = b.matmul(uu, b.transposed(vv))
    s = b.matmul(b.matmul(vv, diagonal(b, sig, 3)), b.transposed(vv))
    return r, s


# ---- small helpers on lists of IR values ----
def add(b, x, y):
    return b.binop("+", x, y)


def sub(b, x, y):
    return b.binop("-", x, y)


def mul(b, x, y):
    return b.binop("*", x, y)


def dot_list(b, x, y):
    return b.sum_of([mul(b, p, q) for p, q in zip(x, y)])


def norm(b, x):
    return b.math1(Op.SQRT, dot_list(b, x, x))


def unit(b, x):
    inv = b.binop("/", 1.0, b.minmax(Op.MAX, norm(b, x), TINY))
    return [mul(b, c, inv) for c in x]


def safe_unit(b, x, length, fallback):
    """x / length, or `fallback` where the length vanishes (a rank-deficient matrix)."""
    ok = b.binop(">", length, TINY)
    inv = b.binop("/", 1.0, b.minmax(Op.MAX, length, TINY))
    return [b.select(ok, mul(b, c, inv), f) for c, f in zip(x, fallback)]


def axis(n, k):
    return [1.0 if i == k else 0.0 for i in range(n)]


def from_columns(cols):
    n = len(cols)
    return MatValue([cols[j][i] for i in range(n) for j in range(n)], n, n)


def diagonal(b, values, n):
    dt = next(v.dtype for v in values if isinstance(v, N.Stmt))
    zero = b.const(0.0, dt)
    return MatValue([b.cast(values[i], dt) if i == j else zero for i in range(n) for j in range(n)], n, n)


def minor(rows, i, j):
    """`rows` without row i and column j."""
    return [[x for c, x in enumerate(r) if c != j] for k, r in enumerate(rows) if k != i]


def abs_(b, x):
    return b.math1(Op.ABS, x)


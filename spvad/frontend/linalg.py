"""Linear algebra of small matrices in kernels, built from scalar ops so both autodiff modes differentiate
through it: determinant and inverse (cofactors, n <= 4), svd and polar decomposition (2x2 and 3x3).

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


class LinalgMixin:
    def linalg(self, name, a):
        a = self.float_matrix(a)
        if name == "determinant":
            self.require_square(name, a, (1, 2, 3, 4))
            return self.det([[a.at(i, j) for j in range(a.cols)] for i in range(a.rows)])
        if name == "inverse":
            self.require_square(name, a, (1, 2, 3, 4))
            return self.inverse(a)
        self.require_square(name, a, (2, 3))
        if name == "svd":
            u, sig, v = self.svd(a)
            return (self.from_columns(u), self.diagonal(sig, a.rows), self.from_columns(v))
        return self.polar(a)

    # ---- determinant and inverse by cofactors ----
    def det(self, rows):
        n = len(rows)
        if n == 1:
            return rows[0][0]
        if n == 2:
            return self.sub(self.mul(rows[0][0], rows[1][1]), self.mul(rows[0][1], rows[1][0]))
        acc = None
        for j in range(n):
            term = self.mul(rows[0][j], self.det(minor(rows, 0, j)))
            acc = term if acc is None else (self.add(acc, term) if j % 2 == 0 else self.sub(acc, term))
        return acc

    def inverse(self, a):
        """inverse = adjugate / det: entry (i, j) is the cofactor (j, i) over det(A)."""
        rows = [[a.at(i, j) for j in range(a.cols)] for i in range(a.rows)]
        n = a.rows
        inv_det = self.binop("/", 1.0, self.det(rows))
        if n == 1:
            return MatValue([inv_det], 1, 1)
        comps = []
        for i in range(n):
            for j in range(n):
                c = self.det(minor(rows, j, i))
                c = c if (i + j) % 2 == 0 else self.binop("-", 0.0, c)   # -x as 0 - x keeps it one op
                comps.append(self.mul(c, inv_det))
        return MatValue(comps, n, n)

    # ---- svd ----
    def svd(self, a):
        """(columns of U, singular values, columns of V) of a 2x2 or 3x3 float matrix."""
        n = a.rows
        ata = [[self.dot_list([a.at(k, i) for k in range(n)], [a.at(k, j) for k in range(n)])
                for j in range(n)] for i in range(n)]
        lam, vcols = self.symmetric_eigen(ata, a.comps[0].dtype)
        av = [[self.dot_list([a.at(i, k) for k in range(n)], v) for i in range(n)] for v in vcols]
        s1 = self.norm(av[0])
        u1 = self.safe_unit(av[0], s1, self.axis(n, 0))
        if n == 2:
            u2 = [self.binop("-", 0.0, u1[1]), u1[0]]   # u1 turned by +90 degrees: U is a rotation
            return [u1, u2], [s1, self.dot_list(u2, av[1])], vcols
        proj = self.dot_list(u1, av[1])
        w = [self.sub(x, self.mul(proj, y)) for x, y in zip(av[1], u1)]
        s2 = self.norm(w)
        # rank 1: any unit vector orthogonal to u1 (from the axis u1 is least aligned with)
        far = [self.select(self.binop("<", abs_(self, u1[0]), 0.9), c0, c1)
               for c0, c1 in zip(self.axis(3, 0), self.axis(3, 1))]
        fallback = self.cross_comps(u1, far)
        u2 = self.safe_unit(w, s2, self.unit(fallback))
        u3 = self.cross_comps(u1, u2)
        return [u1, u2, u3], [s1, s2, self.dot_list(u3, av[2])], vcols

    def symmetric_eigen(self, b, dtype):
        """Eigenvalues (decreasing) and eigenvector columns (a rotation) of a symmetric 2x2 / 3x3 matrix
        given as rows of IR values: cyclic Jacobi with a fixed number of sweeps, then a sorting network."""
        n = len(b)
        b = [row[:] for row in b]
        v = [[self.const(1.0 if i == j else 0.0, dtype) for j in range(n)] for i in range(n)]   # rows of V
        pivots = [(0, 1)] if n == 2 else [(0, 1), (0, 2), (1, 2)] * JACOBI_SWEEPS[dtype]
        for p, q in pivots:   # 2x2: one rotation diagonalises exactly
            self.jacobi_rotation(b, v, p, q)
        lam = [b[i][i] for i in range(n)]
        cols = [[v[k][i] for k in range(n)] for i in range(n)]
        for i, j in [(0, 1)] if n == 2 else [(0, 1), (1, 2), (0, 1)]:
            swap = self.binop("<", lam[i], lam[j])
            lam[i], lam[j] = self.select(swap, lam[j], lam[i]), self.select(swap, lam[i], lam[j])
            neg_i = [self.binop("-", 0.0, c) for c in cols[i]]   # swap with a sign: det V stays +1
            cols[i], cols[j] = ([self.select(swap, y, x) for x, y in zip(cols[i], cols[j])],
                                [self.select(swap, y, x) for x, y in zip(cols[j], neg_i)])
        return lam, cols

    def jacobi_rotation(self, b, v, p, q):
        """B <- J^T B J and V <- V J, with J the rotation in the (p, q) plane that zeroes B[p][q]:
        t = tan(angle) = 2 b_pq sign(d) / (|d| + sqrt(d^2 + 4 b_pq^2)), d = b_qq - b_pp (|t| <= 1)."""
        bpq, bpp, bqq = b[p][q], b[p][p], b[q][q]
        d = self.sub(bqq, bpp)
        sign = self.select(self.binop(">=", d, 0.0), 1.0, -1.0)
        root = self.math1(Op.SQRT, self.add(self.mul(d, d), self.mul(4.0, self.mul(bpq, bpq))))
        den = self.minmax(Op.MAX, self.add(abs_(self, d), root), TINY)
        t = self.binop("/", self.mul(self.mul(2.0, bpq), sign), den)
        c = self.math1(Op.RSQRT, self.add(1.0, self.mul(t, t)))
        s = self.mul(t, c)
        cc, ss, cs2 = self.mul(c, c), self.mul(s, s), self.mul(2.0, self.mul(c, self.mul(s, bpq)))
        new_pp = self.add(self.sub(self.mul(cc, bpp), cs2), self.mul(ss, bqq))
        new_qq = self.add(self.add(self.mul(ss, bpp), cs2), self.mul(cc, bqq))
        for r in range(len(b)):
            if r in (p, q):
                continue
            brp, brq = b[r][p], b[r][q]
            b[r][p] = b[p][r] = self.sub(self.mul(c, brp), self.mul(s, brq))
            b[r][q] = b[q][r] = self.add(self.mul(s, brp), self.mul(c, brq))
        zero = self.const(0.0, d.dtype)
        b[p][p], b[q][q], b[p][q], b[q][p] = new_pp, new_qq, zero, zero
        for row in v:
            vp, vq = row[p], row[q]
            row[p] = self.sub(self.mul(c, vp), self.mul(s, vq))
            row[q] = self.add(self.mul(s, vp), self.mul(c, vq))

    # ---- polar decomposition ----
    def polar(self, a):
        if a.rows == 2:   # closed form: the rotation by atan2(a10 - a01, a00 + a11) makes R^T A symmetric
            x = self.add(a.at(0, 0), a.at(1, 1))
            y = self.sub(a.at(1, 0), a.at(0, 1))
            r2 = self.add(self.mul(x, x), self.mul(y, y))
            scale = self.math1(Op.RSQRT, self.minmax(Op.MAX, r2, TINY))
            ok = self.binop(">", r2, TINY)   # x = y = 0: A is symmetric already, R = I
            c, s = self.select(ok, self.mul(x, scale), 1.0), self.select(ok, self.mul(y, scale), 0.0)
            r = MatValue([c, self.binop("-", 0.0, s), s, c], 2, 2)
            return r, self.matmul(self.transposed(r), a)
        u, sig, v = self.svd(a)
        uu, vv = self.from_columns(u), self.from_columns(v)
        r = self.matmul(uu, self.transposed(vv))
        s = self.matmul(self.matmul(vv, self.diagonal(sig, 3)), self.transposed(vv))
        return r, s

    # ---- small helpers on lists of IR values ----
    def add(self, x, y):
        return self.binop("+", x, y)

    def sub(self, x, y):
        return self.binop("-", x, y)

    def mul(self, x, y):
        return self.binop("*", x, y)

    def dot_list(self, x, y):
        return self.sum_of([self.mul(a, b) for a, b in zip(x, y)])

    def norm(self, x):
        return self.math1(Op.SQRT, self.dot_list(x, x))

    def unit(self, x):
        inv = self.binop("/", 1.0, self.minmax(Op.MAX, self.norm(x), TINY))
        return [self.mul(c, inv) for c in x]

    def safe_unit(self, x, length, fallback):
        """x / length, or `fallback` where the length vanishes (a rank-deficient matrix)."""
        ok = self.binop(">", length, TINY)
        inv = self.binop("/", 1.0, self.minmax(Op.MAX, length, TINY))
        return [self.select(ok, self.mul(c, inv), f) for c, f in zip(x, fallback)]

    def axis(self, n, k):
        return [1.0 if i == k else 0.0 for i in range(n)]

    def from_columns(self, cols):
        n = len(cols)
        return MatValue([cols[j][i] for i in range(n) for j in range(n)], n, n)

    def diagonal(self, values, n):
        dt = next(v.dtype for v in values if isinstance(v, N.Stmt))
        zero = self.const(0.0, dt)
        return MatValue([self.cast(values[i], dt) if i == j else zero for i in range(n) for j in range(n)], n, n)


def minor(rows, i, j):
    """`rows` without row i and column j."""
    return [[x for c, x in enumerate(r) if c != j] for k, r in enumerate(rows) if k != i]


def abs_(builder, x):
    return builder.math1(Op.ABS, x)


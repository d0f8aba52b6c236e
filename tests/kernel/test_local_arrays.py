"""Vectors and matrices as per-thread local arrays: `sp.Vector(n, dtype).zero()` up to 144 components, list
literals, Taichi-style `sp.Vector([...])` / `sp.Matrix([[...]])`, and element reads and writes with runtime
indices (selects over the scalarised components), checked against plain Python references."""
import numpy as np
import pytest

import spvad as sp


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


def close(got, want, rtol=2e-5):
    want = np.asarray(want, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol,
                               atol=rtol * max(float(np.max(np.abs(want))), 1e-30))


def sorting_kernel(n):
    """An insertion sort of n values per thread in a local array (runtime indices in a while loop); the
    outputs weighted 1, 1.1, 1.2, ... (so a gradient shows where each value went)."""
    @sp.kernel
    def insertion_sort(x: sp.Array, out: sp.Array):
        for i in range(x.shape[0]):
            buf = sp.Vector(n, sp.f32).zero()
            for k in range(n):
                buf[k] = x[i, k]
            for k in range(1, n):
                key = buf[k]
                j = k - 1
                while j >= 0 and buf[j] > key:
                    buf[j + 1] = buf[j]
                    j -= 1
                buf[j + 1] = key
            for k in range(n):
                out[i, k] = buf[k] * (1.0 + 0.1 * k)
    return insertion_sort


insertion_sort = sorting_kernel(8)


def test_insertion_sort(rng):
    X = rand(rng, (9, 8))
    out = sp.ndarray(sp.f32, (9, 8))
    insertion_sort(sp.from_numpy(X), out)
    np.testing.assert_allclose(out.to_numpy(), np.sort(X, axis=1) * (1.0 + 0.1 * np.arange(8)), rtol=1e-6)


@sp.kernel
def local_programs(x: sp.Array, idx: sp.Array, out: sp.Array, counts: sp.Array, n: sp.i32):
    for i in range(x.shape[0]):
        acc = sp.Vector(16, sp.f32).zero()       # a prefix sum of n values
        run = 0.0
        for k in range(n):
            run += x[i, k]
            acc[k] = run
        best = [1e30, 1e30, 1e30]                # a list literal: the 3 smallest values
        for k in range(n):
            v = x[i, k]
            if v < best[2]:
                best[2] = v
                if best[2] < best[1]:
                    best[1], best[2] = best[2], best[1]
                if best[1] < best[0]:
                    best[0], best[1] = best[1], best[0]
        hist = [0] * 4                            # list repetition: an i32 histogram
        M = sp.Matrix([[0.0, 0.0], [0.0, 0.0]])
        for k in range(n):
            b = idx[i, k]
            hist[b] += 1
            M[b % 2, b // 2] -= x[i, k]          # runtime matrix indices, augmented
            M[k % 2][0] += 1.0                   # nested subscripts
        M[b // 2] = M[b // 2] * 2.0              # a runtime row
        for k in range(16):
            out[i, k] = acc[k]
        out[i, 16], out[i, 17], out[i, 18] = best[0], best[1], best[2]
        for k in range(4):
            counts[i, k] = hist[k]
            out[i, 19 + k] = M[k // 2, k % 2]


def local_programs_ref(X, I, n):
    out = np.zeros((len(X), 23))
    counts = np.zeros((len(X), 4), np.int32)
    for i in range(len(X)):
        out[i, :n] = np.cumsum(X[i, :n])
        out[i, 16:19] = np.sort(X[i, :n])[:3]
        M = np.zeros((2, 2))
        for k in range(n):
            b = I[i, k]
            counts[i, b] += 1
            M[b % 2, b // 2] -= X[i, k]
            M[k % 2][0] += 1
        M[b // 2] *= 2
        out[i, 19:] = M.reshape(-1)
    return out, counts


@pytest.mark.parametrize("n", [5, 16])
def test_prefix_sum_min3_histogram_matrix(n, rng):
    X, I = rand(rng, (6, 16)), rng.integers(0, 4, (6, 16)).astype(np.int32)
    out, counts = sp.ndarray(sp.f32, (6, 23)), sp.ndarray(sp.i32, (6, 4))
    local_programs(sp.from_numpy(X), sp.from_numpy(I), out, counts, n)
    want, want_counts = local_programs_ref(X.astype(np.float64), I, n)
    close(out.to_numpy(), want, 1e-5)
    assert np.array_equal(counts.to_numpy(), want_counts)


@sp.kernel
def out_of_range(k: sp.Array, out: sp.Array):
    for i in range(k.shape[0]):
        v = sp.Vector([1.0, 2.0, 3.0])
        M = sp.mat2(1.0, 2.0, 3.0, 4.0)
        j = k[i]
        r = v[j] + M[j, 1] * 10.0 + M[j][0] * 100.0   # reads: component 0 (row 0) when out of range
        v[j] = -1.0                                   # writes: nothing when out of range
        M[1, j] = -1.0
        out[i] = r + 1000.0 * (v[0] + v[1] + v[2] + M[1, 0] + M[1, 1])


def test_runtime_index_out_of_range(rng):
    K = np.array([0, 1, 2, 3, -1, 7], np.int32)
    out = sp.ndarray(sp.f32, (6,))
    out_of_range(sp.from_numpy(K), out)
    want = []
    for j in K:
        v, M = [1.0, 2.0, 3.0], [[1.0, 2.0], [3.0, 4.0]]
        jr = j if 0 <= j < 3 else 0
        jm = j if 0 <= j < 2 else 0
        r = v[jr] + M[jm][1] * 10 + M[jm][0] * 100
        if 0 <= j < 3:
            v[j] = -1.0
        if 0 <= j < 2:
            M[1][j] = -1.0
        want.append(r + 1000 * (sum(v) + M[1][0] + M[1][1]))
    assert out.to_numpy().tolist() == want


def test_large_local_vector_and_constant_indices():
    @sp.kernel
    def k(out: sp.Array):
        for i in range(out.shape[0]):
            buf = sp.Vector(64, sp.f32).zero()
            for j in sp.static(range(64)):
                buf[j] = float(j) * 0.5
            buf[-1] += 1.0
            out[i] = buf[63] + buf[i] + buf[i + 1]   # constant and runtime indices

    out = sp.ndarray(sp.f32, (8,))
    k(out)
    assert out.to_numpy().tolist() == [32.5 + 0.5 * i + 0.5 * (i + 1) for i in range(8)]


def test_taichi_style_constructors(rng):
    @sp.kernel
    def k(x: sp.Array, out: sp.Array):
        for i in range(x.shape[0]):
            v = sp.Vector([x[i], 2, 3], dt=sp.f32)      # ints become f32 components
            w = sp.Vector([1, 2, 3])                     # an i32 vector
            M = sp.Matrix([[x[i], 1.0], [2.0, 3.0]])
            c = sp.Matrix([x[i], 2.0])                   # a list of scalars: a 2x1 column
            rows = [v, v * 2.0]                          # a list of vectors: a 2x3 matrix
            out[i] = v[0] + float(w[2]) + (M @ c)[1, 0] + rows[1, 2] + float(len(rows))

    X = rand(rng, 5)
    out = sp.ndarray(sp.f32, (5,))
    k(sp.from_numpy(X), out)
    X64 = X.astype(np.float64)
    close(out.to_numpy(), X64 + 3 + (2 * X64 + 6) + 6 + 2)


def _k_mixed_list(a: sp.Array):
    for i in range(a.shape[0]):
        x = [1.0, sp.vec2(1.0, 2.0)]


def _k_float_index(a: sp.Array):
    for i in range(a.shape[0]):
        v = [1.0, 2.0]
        v[a[i]] = 1.0


def _k_too_long(a: sp.Array):
    for i in range(a.shape[0]):
        v = sp.Vector(145, sp.f32).zero()


def _k_too_many_indices(a: sp.Array):
    for i in range(a.shape[0]):
        v = [1.0, 2.0]
        v[i, i] = 1.0


def _k_row_width(a: sp.Array):
    for i in range(a.shape[0]):
        M = sp.mat2.identity()
        M[i] = sp.vec3(1.0)


def _k_int_local_float(a: sp.Array):
    for i in range(a.shape[0]):
        h = [0, 0]
        h[i] = 0.5


ERRORS = [
    (_k_mixed_list, "must hold scalars", "[1.0, sp.vec2"),
    (_k_float_index, "index must be an integer", "v[a[i]]"),
    (_k_too_long, "1..144", "sp.Vector(145"),
    (_k_too_many_indices, "takes 1 index", "v[i, i]"),
    (_k_row_width, "a row of a mat2", "M[i] ="),
    (_k_int_local_float, "would truncate", "h[i] = 0.5"),
]


@pytest.mark.parametrize("fn,fragment,source", ERRORS, ids=[e[0].__name__[3:] for e in ERRORS])
def test_compile_errors(fn, fragment, source):
    with pytest.raises(sp.CompileError) as e:
        sp.kernel(fn)(sp.ndarray(sp.f32, (4,)))
    assert fragment in e.value.message and source in e.value.source
    assert e.value.filename.endswith("test_local_arrays.py") and e.value.lineno > 0


# ---- found by probing: element writes into a func's vector / matrix parameter, vectors into elements -----
@sp.func
def _zero_diagonal(M, v):
    M[0, 0] = 0.0        # the parameters are copies: the caller's values do not change
    v[1] += 10.0
    return M, v


@sp.kernel
def _param_writes(A: sp.Array, out: sp.Array, w: sp.Array):
    for i in range(A.shape[0]):
        M = A[i]
        v = sp.vec2(1.0, 2.0)
        Z, u = _zero_diagonal(M, v)
        out[i] = Z + M          # M itself is unchanged
        w[i] = u + v


def test_func_parameters_are_written_as_copies(rng):
    A = rand(rng, (3, 2, 2))
    out, w = sp.ndarray(sp.mat2, (3,)), sp.ndarray(sp.vec2, (3,))
    _param_writes(sp.from_numpy(A, dtype=sp.mat2), out, w)
    Z = A.copy()
    Z[:, 0, 0] = 0.0
    np.testing.assert_allclose(out.to_numpy(), Z + A, rtol=1e-6)
    np.testing.assert_allclose(w.to_numpy(), np.tile([2.0, 14.0], (3, 1)), rtol=1e-6)


@pytest.mark.parametrize("body", ["M = sp.mat2.identity()\n        M[0, 1] = sp.vec2(5.0, 7.0)",
                                  "M = sp.mat2.identity()\n        M[1, 0] += sp.vec2(5.0, 7.0)",
                                  "b = [1.0, 2.0, 3.0]\n        b[1] = sp.vec2(8.0, 9.0)",
                                  "b = [1.0, 2.0, 3.0]\n        b[int(x[i])] = sp.vec2(8.0, 9.0)"])
def test_a_vector_into_an_element_is_a_compile_error(body, tmp_path):
    path = tmp_path / "k.py"
    path.write_text(f"import spvad as sp\n@sp.kernel\ndef k(x: sp.Array):\n    for i in range(x.shape[0]):\n"
                    f"        {body}\n")
    import runpy
    k = runpy.run_path(str(path))["k"]
    with pytest.raises(sp.CompileError, match="cannot store a vec2 into an element"):
        k(sp.ndarray(sp.f32, (2,)))

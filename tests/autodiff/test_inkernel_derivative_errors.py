"""Misuse of derivatives inside kernels (`sp.grad` & co): an `sp.CompileError` naming the file, the line
and what is wrong, never a silently wrong number."""
import pytest

import spvad as sp


@sp.func
def sphere(p, r):
    return sp.length(p) - r


@sp.func
def warp(p, r):
    return p * sp.exp(-r * sp.dot(p, p))


# ---- what cannot be differentiated: a CompileError naming the file and the line -----------------------------
@sp.func
def writes_array(p, r):
    scratch[0] = r   # a store inside a differentiated function
    return p.x * r


scratch = None   # an ndarray, bound in the test (creating one needs a runtime)


def bad_kernels():
    """name -> (kernel, the message's pattern); each kernel's offending call (`# bad`) is two lines below
    its `def`."""
    @sp.kernel
    def vector_result(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.grad(warp)(pts[i], 1.0)   # bad
    @sp.kernel
    def argnums_range(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.grad(sphere, argnums=2)(pts[i], 1.0)   # bad
    @sp.kernel
    def int_argument(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.grad(sphere, argnums=1)(pts[i], 1)   # bad
    @sp.kernel
    def not_a_func(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.grad(sp.sin)(pts[i])   # bad
    @sp.kernel
    def hessian_of_vector(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.hessian(warp)(pts[i], 1.0)   # bad
    @sp.kernel
    def cotangent_shape(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.vjp(warp, (pts[i], 1.0), 1.0)[1][1]   # bad
    @sp.kernel
    def int_primal(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.jvp(sphere, (pts[i], 1), (pts[i], 1.0))[1]   # bad
    return {"vector_result": (vector_result, "needs warp to return a scalar, but it returns a 3-vector"),
            "argnums_range": (argnums_range, "argnums 2 is out of range for sphere"),
            "int_argument": (int_argument, r"argument 1 \('r'\) of sp.grad\(sphere\) is i32"),
            "not_a_func": (not_a_func, "differentiates @sp.func functions; got sin"),
            "hessian_of_vector": (hessian_of_vector, "needs warp to return a scalar"),
            "cotangent_shape": (cotangent_shape, "the cotangent is a scalar but warp returns a 3-vector"),
            "int_primal": (int_primal, "primal 1 of sp.jvp is i32: only float values have derivatives")}


def line_of(marker):
    with open(__file__) as f:
        return next(k for k, line in enumerate(f, 1) if marker in line)


@pytest.mark.parametrize("name", sorted(bad_kernels()))
def test_errors_name_file_and_line(name):
    kernel, pattern = bad_kernels()[name]
    pts, out = sp.ndarray(sp.vec3, (2,)), sp.ndarray(sp.f32, (2,))
    with pytest.raises(sp.CompileError, match=pattern) as e:
        kernel(pts, out)
    assert e.value.filename == __file__
    assert e.value.lineno == line_of(f"def {name}(") + 2


def test_array_store_inside_is_an_error():
    global scratch
    scratch = sp.ndarray(sp.f32, (1,))

    @sp.kernel
    def store_inside(pts: sp.Array, out: sp.Array):
        for i in range(pts.shape[0]):
            out[i] = sp.grad(writes_array, argnums=1)(pts[i], 2.0)
    with pytest.raises(sp.CompileError, match="writes into array 'scratch'") as e:
        store_inside(sp.ndarray(sp.vec3, (2,)), sp.ndarray(sp.f32, (2,)))
    assert (e.value.filename, e.value.lineno) == (__file__, line_of("scratch[0] = r"))

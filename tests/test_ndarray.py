"""`sp.ndarray` from the host: shapes, dtypes, numpy I/O, fill, element access, errors, and the runtime
functions around it (device_info, sync, reset)."""
import numpy as np
import pytest

import spvad as sp
from spvad import types as T

NP = {sp.f32: np.float32, sp.f64: np.float64, sp.i32: np.int32, sp.u32: np.uint32, sp.u1: np.bool_}
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (2, 3, 2, 3)]


def sample(rng, dtype, shape):
    if dtype == sp.u1:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        lo = 1 if dtype == sp.u32 else -1000
        return rng.integers(lo, 1000, shape).astype(NP[dtype])
    return (rng.uniform(0.1, 2.0, shape) * np.where(rng.random(shape) < 0.5, -1, 1)).astype(NP[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [sp.f32, sp.f64, sp.i32, sp.u32, sp.u1], ids=str)
def test_round_trip_every_shape_and_dtype(rng, dtype, shape):
    data = sample(rng, dtype, shape)
    a = sp.from_numpy(data)
    assert a.dtype == dtype and a.shape == shape and a.ndim == len(shape)
    out = a.to_numpy()
    assert out.dtype == NP[dtype] and out.shape == shape
    assert (out == data).all()
    b = sp.ndarray(dtype, shape)
    assert (b.to_numpy() == 0).all()                     # new arrays are zeroed
    b.from_numpy(data)
    assert (b.to_numpy() == data).all()
    out[...] = 0                                         # to_numpy returns a copy
    assert (a.to_numpy() == data).all()


@pytest.mark.parametrize("spec,want", [(sp.f32, sp.f32), (float, sp.f32), (int, sp.i32), (bool, sp.u1),
                                       (np.float64, sp.f64), (np.int32, sp.i32), (np.dtype("uint32"), sp.u32),
                                       (np.bool_, sp.u1)], ids=str)
def test_dtype_spellings(spec, want):
    assert sp.ndarray(spec, 2).dtype == want


@pytest.mark.parametrize("np_dtype,want", [(np.float32, sp.f32), (np.float64, sp.f64), (np.int32, sp.i32),
                                           (np.int64, sp.i32), (np.uint8, sp.i32), (np.int16, sp.i32),
                                           (np.uint32, sp.u32), (np.bool_, sp.u1)], ids=str)
def test_from_numpy_dtype_inference(np_dtype, want):
    data = np.array([1, 0, 3, 2], np_dtype) if np_dtype != np.bool_ else np.array([True, False, True, True])
    a = sp.from_numpy(data)
    assert a.dtype == want
    assert (a.to_numpy() == data).all()


def test_from_numpy_lists_scalars_and_non_contiguous():
    assert sp.from_numpy([1.5, 2.5]).dtype == sp.f64      # Python floats are float64 in numpy
    assert sp.from_numpy([1, 2]).dtype == sp.i32
    s = sp.from_numpy(np.float32(3.25))
    assert s.shape == () and s[()] == 3.25 and s[None] == 3.25
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[::2, 1::2]                               # non-contiguous: copied in logical order
    assert (sp.from_numpy(view).to_numpy() == view).all()
    t = sp.from_numpy(base.T)
    assert t.shape == (6, 4) and (t.to_numpy() == base.T).all()


@pytest.mark.parametrize("bad,match", [
    (np.arange(3, dtype=np.float16), "float16"),
    (np.array(["a", "b"]), "dtype"),
    (np.array([1 + 2j]), "complex"),
    (np.array([2**40, 1], np.int64), "i32"),
    (np.array([-2**31 - 1], np.int64), "i32"),
], ids=["float16", "str", "complex", "int64 too large", "int64 too small"])
def test_from_numpy_rejects(bad, match):
    with pytest.raises(sp.SpvadError, match=match):
        sp.from_numpy(bad)


@pytest.mark.parametrize("shape,match", [((-1,), "negative"),
                                         ((2, -3), "negative")], ids=str)
def test_bad_shapes(shape, match):
    with pytest.raises(sp.SpvadError, match=match):
        sp.ndarray(sp.f32, shape)


def test_shape_spellings():
    assert sp.ndarray(sp.f32, 3).shape == (3,)
    assert sp.ndarray(sp.f32, np.int64(3)).shape == (3,)
    assert sp.ndarray(sp.f32, [2, 3]).shape == (2, 3)
    assert sp.ndarray(sp.f32, ()).shape == ()
    assert sp.ndarray(sp.f32, (0, 3)).to_numpy().shape == (0, 3)


@pytest.mark.backends
@pytest.mark.parametrize("dtype,shape", [(sp.f32, (2, 1, 3, 2, 2)), (sp.i32, (1, 2) * 4), (sp.f64, (2,) * 12),
                                         (sp.vec3, (2, 1, 2, 3, 1)), (sp.mat2, (1, 2, 1, 2, 1, 2))])
def test_any_number_of_dimensions(rng, dtype, shape):
    """Host I/O of arrays past four dimensions (vector and matrix elements add axes to the storage)."""
    a = sp.ndarray(dtype, shape)
    assert a.shape == shape and a.ndim == len(shape) and a.storage_shape == shape + T.element_shape(dtype)
    data = rng.integers(-50, 50, a.storage_shape) if a.element_dtype.is_int else rng.uniform(0.5, 2, a.storage_shape)
    a.from_numpy(data)
    np.testing.assert_allclose(a.to_numpy(), data, rtol=1e-6)
    last = tuple(n - 1 for n in shape)
    np.testing.assert_allclose(a[last], data[last], rtol=1e-6)
    a[last] = np.ones(a.element_shape) * 3 if a.width else 3
    assert (a.to_numpy()[last] == 3).all() and (a.to_numpy()[(0,) * len(shape)] == a[(0,) * len(shape)]).all()
    b = sp.from_numpy(data)
    assert b.shape == data.shape and (b.to_numpy() == data.astype(b.to_numpy().dtype)).all()


def test_unsupported_dtype():
    with pytest.raises(sp.SpvadError, match="dtype"):
        sp.ndarray(np.complex64, 3)


def test_from_numpy_method_errors_leave_contents_unchanged():
    a = sp.from_numpy(np.array([1, 2, 3], np.int32))
    with pytest.raises(sp.SpvadError, match="shape"):
        a.from_numpy(np.ones(4, np.int32))
    with pytest.raises(sp.SpvadError, match="shape"):
        a.from_numpy(np.ones((3, 1), np.int32))
    with pytest.raises(sp.SpvadError, match="fraction"):
        a.from_numpy(np.array([1.5, 2.5, 3.5], np.float32))
    f = sp.from_numpy(np.array([1.0, 2.0], np.float32))
    with pytest.raises(sp.SpvadError):
        f.from_numpy(np.array(["1", "2"]))
    assert (a.to_numpy() == [1, 2, 3]).all() and (f.to_numpy() == [1, 2]).all()
    f.from_numpy(np.array([3, 4], np.int64))             # ints into a float array are fine
    assert (f.to_numpy() == [3.0, 4.0]).all()
    d = sp.ndarray(sp.f32, 2).from_numpy(np.array([0.1, 0.2]))   # float64 data rounds to f32
    assert (d.to_numpy() == np.array([0.1, 0.2], np.float32)).all()


def test_fill_and_element_access(rng):
    a = sp.ndarray(sp.f32, (3, 4))
    a.fill(1.5)
    assert (a.to_numpy() == 1.5).all()
    a[1, 2] = -2.25
    a[-1, -1] = 7.0
    assert a[1, 2] == -2.25 and a[2, 3] == 7.0 and a[0, 0] == 1.5
    assert isinstance(a[0, 0], float)
    expect = np.full((3, 4), 1.5, np.float32)
    expect[1, 2], expect[2, 3] = -2.25, 7.0
    assert (a.to_numpy() == expect).all()
    i = sp.ndarray(sp.i32, 4).fill(-3)
    i[0] = 2**31 - 1
    assert i.to_numpy().tolist() == [2**31 - 1, -3, -3, -3] and isinstance(i[1], int)
    b = sp.ndarray(sp.u1, 3).fill(True)
    b[1] = False
    assert b.to_numpy().tolist() == [True, False, True] and b[0] is True and b[1] is False
    d = sp.ndarray(sp.f64, 2).fill(0.1)
    assert d[0] == 0.1                                     # full double precision
    z = sp.ndarray(sp.f32, ())
    z[None] = 3.5
    assert z[()] == 3.5 and z[None] == 3.5 and z.to_numpy().shape == ()
    z[()] = 4.5
    assert z.to_numpy() == 4.5


@pytest.mark.parametrize("key,match", [((3,), "out of range"), ((-4,), "out of range"), ((0, 0), "entries"),
                                       ((1.0,), "range"), ((), "entries")], ids=str)
def test_bad_element_index(key, match):
    a = sp.from_numpy(np.array([1, 2, 3], np.int32))
    with pytest.raises(sp.SpvadError, match=match):
        a[key]
    with pytest.raises(sp.SpvadError, match=match):
        a[key] = 5
    assert (a.to_numpy() == [1, 2, 3]).all()


def test_grad_and_dual_companions():
    a = sp.from_numpy(np.ones((2, 3), np.float32), needs_grad=True)
    assert a.grad is not None and a.grad.shape == (2, 3) and a.grad.dtype == sp.f32
    assert (a.grad.to_numpy() == 0).all() and a.grad.grad is None
    a.grad.fill(2.0)
    assert (a.to_numpy() == 1).all()                      # separate buffers
    b = sp.ndarray(sp.f64, 4, needs_dual=True)
    assert b.dual.shape == (4,) and b.dual.dtype == sp.f64 and b.grad is None
    assert sp.ndarray(sp.f32, 3).grad is None and sp.ndarray(sp.f32, 3).dual is None


def test_writes_from_kernels_are_visible_to_the_host():
    @sp.kernel
    def ramp(x: sp.Array):
        for i, j in sp.ndrange(x.shape[0], x.shape[1]):
            x[i, j] = i * 10 + j

    a = sp.ndarray(sp.i32, (3, 5))
    ramp(a)
    assert a[2, 4] == 24            # element access synchronises
    assert (a.to_numpy() == np.arange(3)[:, None] * 10 + np.arange(5)).all()
    a.fill(0)
    ramp(a)
    sp.sync()
    assert a.to_numpy().sum() == (np.arange(3)[:, None] * 10 + np.arange(5)).sum()


def test_device_info():
    info = sp.device_info()
    for key in ("backend", "name", "driver", "limits", "features"):
        assert key in info, key
    assert info["backend"] in ("vulkan", "metal")
    assert isinstance(info["name"], str) and info["name"]
    assert info["limits"]["max_workgroup_count"][0] >= 65535
    assert isinstance(info["features"].get("float64"), bool)
    info["name"] = "changed"                 # a copy: the runtime's info is not modified
    assert sp.device_info()["name"] != "changed"


def test_sync_and_reset():
    sp.sync()
    a = sp.from_numpy(np.arange(4, dtype=np.float32))
    sp.reset()
    sp.sync()                                 # nothing to do, no error
    with pytest.raises(sp.SpvadError, match="reset"):
        a.to_numpy()
    with pytest.raises(sp.SpvadError):
        a.fill(1.0)
    b = sp.from_numpy(np.arange(4, dtype=np.float32) * 2)   # a new runtime starts on demand
    assert (b.to_numpy() == [0, 2, 4, 6]).all()
    sp.reset()
    sp.init()
    c = sp.ndarray(sp.i32, 2).fill(5)
    assert c.to_numpy().tolist() == [5, 5]


# ---- values the dtype cannot hold, and malformed dtypes/shapes --------------------------------------------
@pytest.mark.parametrize("dtype,values", [(sp.i32, [2**40, 1]), (sp.u32, [-1, 2])], ids=str)
def test_from_numpy_method_rejects_out_of_range_integers(dtype, values):
    a = sp.ndarray(dtype, 2)
    with pytest.raises(sp.SpvadError):
        a.from_numpy(np.array(values, np.int64))
    assert (a.to_numpy() == 0).all()


@pytest.mark.parametrize("dtype,shape", [("f32", 3), (sp.f32, "abc"), (sp.f32, (2.5,))],
                         ids=["dtype 'f32'", "shape 'abc'", "shape (2.5,)"])
def test_string_dtype_or_shape_is_an_spvad_error(dtype, shape):
    with pytest.raises(sp.SpvadError):
        sp.ndarray(dtype, shape)


def test_fill_out_of_range_is_an_spvad_error():
    a = sp.ndarray(sp.u32, 2)
    with pytest.raises(sp.SpvadError):
        a.fill(-1)


# ---- conversions and sizes that would lose data silently --------------------------------------------------
@pytest.mark.parametrize("data", [np.array([1.0, 1e40, 2.0]), np.array([-3e39, 0.5])])
def test_from_numpy_refuses_values_that_overflow_to_inf(data):
    a = sp.ndarray(sp.f32, data.shape)
    a.fill(7.0)
    with pytest.raises(sp.ArgumentError, match="out of range.*inf"):
        a.from_numpy(data)
    np.testing.assert_array_equal(a.to_numpy(), 7.0)   # nothing changed
    with pytest.raises(sp.ArgumentError, match="out of range"):
        sp.from_numpy(data, dtype=sp.f32)
    b = sp.ndarray(sp.f32, (3,))
    b.from_numpy(np.array([np.inf, -np.inf, 1.0]))     # infinities stay infinities
    assert np.isinf(b.to_numpy()[:2]).all()


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_from_numpy_refuses_complex_data(dtype):
    data = np.array([1 + 2j, 3 - 1j], dtype)
    with pytest.raises(sp.ArgumentError, match="complex"):
        sp.ndarray(sp.f32, (2,)).from_numpy(data)
    with pytest.raises(sp.ArgumentError):
        sp.from_numpy(data)
    with pytest.raises(sp.ArgumentError, match="complex"):
        sp.from_numpy(data, dtype=sp.f64 if sp.device_info()["features"].get("float64") else sp.f32)


@pytest.mark.parametrize("shape", [(2**31,), (2**16, 2**16), (2**20, 2**11, 2)])
def test_shapes_past_32_bit_indices_are_refused(shape):
    with pytest.raises(sp.ArgumentError, match="at most 2\\*\\*31 - 1"):
        sp.ndarray(sp.f32, shape)
    with pytest.raises(sp.ArgumentError, match="at most"):
        sp.ndarray(sp.vec4, (2**29 + 1,))   # 4 scalars per element

"""An ndarray's data from and to Python: ragged or non-numeric data into from_numpy is an ArgumentError that says
so; pickle, copy.copy and copy.deepcopy go by value into a new, independent array on the current runtime (also
after sp.init() again and in a fresh process); a bool index is refused (numpy reads it as a mask)."""
import copy
import pickle
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import spvad as sp
from spvad import types as T


def has_f64():
    return bool(sp.device_info()["features"].get("float64"))


@sp.kernel
def double(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2.0


@sp.kernel
def square(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i]


def values(rng, dtype, shape):
    """Random values of an ndarray of `dtype` and `shape` (never all zeros), in its storage shape."""
    storage = tuple(shape) + T.element_shape(dtype)
    elem = T.element_dtype(dtype)
    if elem == sp.u1:
        return rng.random(storage) < 0.5
    if elem.is_int:
        return rng.integers(-1000 if elem == sp.i32 else 0, 1000, storage).astype(elem.np)
    return (rng.uniform(0.1, 2.0, storage) * np.where(rng.random(storage) < 0.5, -1, 1)).astype(elem.np)


# ---- ragged and non-numeric data ------------------------------------------------------------------------------
def object_rows(*rows):
    """A dtype=object numpy array of rows (what numpy before 1.24 made of a ragged list)."""
    out = np.empty(len(rows), object)
    for i, row in enumerate(rows):
        out[i] = row
    return out


RAGGED = [
    ([[1.0, 2.0], [3.0]], r"data\[0\] has 2 entries but data\[1\] has 1"),
    ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0, 7.0]], r"data\[0\] has 2 entries but data\[2\] has 3"),
    ([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0]]], r"data\[0\]\[0\] has 2 entries but data\[1\]\[1\] has 1"),
    ([[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]], r"data\[0\] has 1 entries but data\[1\] has 2"),
    ([[1.0, 2.0], 3.0], r"data\[0\] is a row of 2 but data\[1\] is the single value 3.0"),
    ([np.ones(3, np.float32), np.ones(2, np.float32)], r"data\[0\] has 3 entries but data\[1\] has 2"),
    (object_rows([1.0, 2.0], [3.0]), r"data\[0\] has 2 entries but data\[1\] has 1"),
]


@pytest.mark.backends
@pytest.mark.parametrize("data,where", RAGGED, ids=["2-d", "2-d last", "3-d inner", "3-d middle", "row and scalar",
                                                    "numpy rows", "object rows"])
def test_ragged_data_is_an_argument_error(data, where):
    with pytest.raises(sp.ArgumentError, match=r"sp\.from_numpy: the data is ragged \(rows of different lengths: "
                       + where):
        sp.from_numpy(data)
    with pytest.raises(sp.ArgumentError, match="ragged"):
        sp.from_numpy(data, dtype=sp.f32)
    a = sp.from_numpy(np.full((2, 2), 7.0, np.float32))
    with pytest.raises(sp.ArgumentError, match=r"ndarray\.from_numpy: the data is ragged.*" + where):
        a.from_numpy(data)
    np.testing.assert_array_equal(a.to_numpy(), 7.0)   # nothing written


@pytest.mark.backends
@pytest.mark.parametrize("data,what", [([1.0, None], r"data\[1\] is None"), (["a", None], r"data\[0\] is 'a'"),
                                       ([[1, 2], [3, object()]], r"data\[1, 1\] is <object"),
                                       ([2**70, 1], "numbers no numpy dtype holds, e.g. ints past 64 bits")],
                         ids=["None", "str", "object", "big int"])
@pytest.mark.parametrize("dtype", [None, sp.f32, sp.i32, sp.u1], ids=str)
def test_object_data_is_an_argument_error(data, what, dtype):
    with pytest.raises(sp.ArgumentError, match=r"sp\.from_numpy: the data holds values numpy keeps as Python "
                       r"objects \(dtype=object; " + what):
        sp.from_numpy(data, dtype=dtype)
    a = sp.ndarray(dtype or sp.f32, np.shape(np.asarray(data, dtype=object)))
    a.fill(1)
    with pytest.raises(sp.ArgumentError, match=r"ndarray\.from_numpy: .*dtype=object; " + what):
        a.from_numpy(data)
    assert (a.to_numpy() == 1).all()


@pytest.mark.parametrize("data", [np.array(["a", ""]), np.array([b"a", b""]), np.array([1, 0], "timedelta64[s]")],
                         ids=str)
@pytest.mark.parametrize("dtype", [sp.f32, sp.i32, sp.u1], ids=str)
def test_strings_and_dates_into_any_dtype_are_refused(data, dtype):
    """(A u1 ndarray took their truthiness, an f32 one took timedelta counts.)"""
    a = sp.ndarray(dtype, 2).fill(1)
    with pytest.raises(sp.ArgumentError, match=re.escape(f"cannot store {data.dtype} data in a {dtype} ndarray")):
        a.from_numpy(data)
    assert (a.to_numpy() == 1).all()


# ---- pickle ----------------------------------------------------------------------------------------------------
PICKLED = [(sp.f32, (7,)), (sp.f32, (2, 3, 4)), (sp.f32, ()), (sp.f64, (3, 5)), (sp.i32, (4, 2, 3)),
           (sp.u32, (6,)), (sp.u1, (3, 3)), (sp.vec3, (5,)), (sp.vec3, (2, 4)), (sp.mat2, (3,)),
           (sp.mat2, (2, 2, 1)), (sp.Vector(2, sp.i32), (4,)), (sp.Matrix(2, 3), (2,)), (sp.f32, (0, 3))]


@pytest.mark.backends
@pytest.mark.parametrize("protocol", [0, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("dtype,shape", PICKLED, ids=str)
def test_pickle_round_trip(rng, dtype, shape, protocol):
    if T.element_dtype(dtype) == sp.f64 and not has_f64():
        pytest.skip("the device has no float64")
    data = values(rng, dtype, shape)
    a = sp.from_numpy(data, dtype=dtype)
    b = pickle.loads(pickle.dumps(a, protocol=protocol))
    assert type(b) is type(a) and b is not a
    assert b.dtype == dtype and b.shape == tuple(shape) and b.storage_shape == data.shape
    assert b.grad is None and b.dual is None
    out = b.to_numpy()
    assert out.dtype == a.to_numpy().dtype
    np.testing.assert_array_equal(out, data)
    if b.size:                                       # a new array: writing it leaves the original alone
        b.fill(0)
        np.testing.assert_array_equal(a.to_numpy(), data)


@pytest.mark.backends
@pytest.mark.parametrize("dtype,shape", [(sp.f32, (3, 4)), (sp.vec3, (5,)), (sp.mat2, (2, 3))], ids=str)
def test_pickle_keeps_grad_and_dual_with_their_values(rng, dtype, shape):
    data, grad, dual = (values(rng, dtype, shape) for _ in range(3))
    a = sp.from_numpy(data, needs_grad=True, needs_dual=True, dtype=dtype)
    a.grad.from_numpy(grad)
    a.dual.from_numpy(dual)
    b = pickle.loads(pickle.dumps(a))
    assert b.needs_grad and b.needs_dual and b.grad.dtype == dtype and b.dual.shape == tuple(shape)
    np.testing.assert_array_equal(b.to_numpy(), data)
    np.testing.assert_array_equal(b.grad.to_numpy(), grad)
    np.testing.assert_array_equal(b.dual.to_numpy(), dual)
    assert b.grad is not a.grad and b.grad.grad is None
    only_grad = pickle.loads(pickle.dumps(sp.from_numpy(data, needs_grad=True, dtype=dtype)))
    assert only_grad.needs_grad and not only_grad.needs_dual
    np.testing.assert_array_equal(only_grad.grad.to_numpy(), 0)
    sp.clear_all_gradients()                         # the unpickled array is one of the live arrays with grad
    np.testing.assert_array_equal(b.grad.to_numpy(), 0)


@pytest.mark.backends
def test_pickle_waits_for_pending_launches(rng):
    data = values(rng, sp.f32, (64,))
    a = sp.from_numpy(data)
    double(a)
    double(a)                                        # queued; the pickle reads what they leave
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).to_numpy(), data * 4)
    double(a)
    np.testing.assert_array_equal(copy.deepcopy(a).to_numpy(), data * 8)


@pytest.mark.backends
def test_pickled_containers_keep_shared_arrays_shared(rng):
    a = sp.from_numpy(values(rng, sp.f32, (4,)))
    first, second = pickle.loads(pickle.dumps([a, a]))
    assert first is second and first is not a
    first, second = copy.deepcopy([a, a])
    assert first is second and first is not a
    np.testing.assert_array_equal(first.to_numpy(), a.to_numpy())


def test_unpickle_after_init_again_gives_an_array_of_the_new_runtime(rng):
    data = values(rng, sp.f32, (33,))
    x = sp.from_numpy(data, needs_grad=True)
    blob = pickle.dumps(x)
    sp.init()                                        # the old runtime, and x with it, is gone
    with pytest.raises(sp.SpvadError, match="reset"):
        x.to_numpy()
    y = pickle.loads(blob)
    assert y.needs_grad
    double(y)
    np.testing.assert_allclose(y.to_numpy(), data * 2)
    z = sp.from_numpy(data)
    square(y, z)                                     # mixed with an array made afresh
    np.testing.assert_allclose(z.to_numpy(), (data * 2) ** 2, rtol=1e-6)


CHILD = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    with open(sys.argv[1], "rb") as f:
        arrays = pickle.load(f)
    out = {}
    for name, a in arrays.items():
        out[name] = a.to_numpy()
        out[name + ".dtype"] = np.array(repr(a.dtype))
        out[name + ".grad"] = a.grad.to_numpy() if a.needs_grad else np.array("none")
    np.savez(sys.argv[2], **out)
""")


def test_unpickle_in_a_fresh_process(rng, tmp_path):
    arrays = {"f": (sp.f32, (3, 4)), "i": (sp.i32, (5,)), "b": (sp.u1, (2, 2)), "v": (sp.vec3, (4,)),
              "m": (sp.mat2, (2, 1))}
    data = {k: values(rng, d, s) for k, (d, s) in arrays.items()}
    made = {k: sp.from_numpy(data[k], dtype=d, needs_grad=k in "vm") for k, (d, s) in arrays.items()}
    made["v"].grad.from_numpy(data["v"] * 3)
    (tmp_path / "a.pkl").write_bytes(pickle.dumps(made))
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "a.pkl"), str(tmp_path / "out.npz")],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    out = np.load(tmp_path / "out.npz")
    for k, (d, s) in arrays.items():
        np.testing.assert_array_equal(out[k], data[k])
        assert out[k].dtype == data[k].dtype and str(out[k + ".dtype"]) == repr(d)
    np.testing.assert_array_equal(out["v.grad"], data["v"] * 3)
    np.testing.assert_array_equal(out["m.grad"], 0)
    assert str(out["f.grad"]) == "none"


# ---- copy.copy and copy.deepcopy -------------------------------------------------------------------------------
@pytest.mark.backends
@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@pytest.mark.parametrize("dtype,shape", [(sp.f32, (16,)), (sp.i32, (3, 5)), (sp.u1, (4,)), (sp.vec3, (6,)),
                                         (sp.mat2, (2, 3))], ids=str)
def test_copies_are_independent(rng, copier, dtype, shape):
    data = values(rng, dtype, shape)
    a = sp.from_numpy(data, dtype=dtype)
    c = copier(a)
    assert c is not a and c.dtype == dtype and c.shape == a.shape and c.buffer is not a.buffer
    np.testing.assert_array_equal(c.to_numpy(), data)
    first = (0,) * len(shape)
    new = np.logical_not(data[first]) if dtype == sp.u1 else data[first] + 5
    c[first] = new                                   # a write to the copy never reaches the original
    np.testing.assert_array_equal(a.to_numpy(), data)
    assert np.all(c[first] == new)
    a.fill(1)                                        # nor the other way round
    expect = data.copy()
    expect[first] = new
    np.testing.assert_array_equal(c.to_numpy(), expect)


@pytest.mark.backends
@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_copies_take_their_own_grad_and_kernels_see_them_apart(rng, copier):
    data = values(rng, sp.f32, (10,))
    a = sp.from_numpy(data, needs_grad=True)
    a.grad.fill(0.5)
    c = copier(a)
    assert c.grad is not a.grad
    np.testing.assert_array_equal(c.grad.to_numpy(), 0.5)
    c.grad.fill(2.0)
    np.testing.assert_array_equal(a.grad.to_numpy(), 0.5)
    double(c)
    np.testing.assert_allclose(c.to_numpy(), data * 2)
    np.testing.assert_array_equal(a.to_numpy(), data)


@pytest.mark.backends
def test_copy_and_pickle_inside_a_recording_tape(rng):
    data = values(rng, sp.f32, (8,))
    x = sp.from_numpy(data, needs_grad=True)
    y = sp.ndarray(sp.f32, (8,), needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        square(x, y)
        kept = copy.deepcopy(y)                      # reading inside the block is fine
        again = pickle.loads(pickle.dumps(x))
        total(y, loss)
    np.testing.assert_allclose(kept.to_numpy(), data * data, rtol=1e-6)
    np.testing.assert_array_equal(again.to_numpy(), data)
    assert loss[None] == pytest.approx(float(np.sum(data.astype(np.float64) ** 2)), rel=1e-5)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * data, rtol=1e-5)


# ---- bool indices ----------------------------------------------------------------------------------------------
@pytest.mark.backends
@pytest.mark.parametrize("shape,key", [((3,), True), ((3,), False), ((3,), np.bool_(False)), ((3,), np.bool_(True)),
                                       ((2, 3), (0, True)), ((2, 3), (np.bool_(True), 1)), ((), True),
                                       ((2, 3), (True,))], ids=str)
def test_bool_indices_are_refused(rng, shape, key):
    data = values(rng, sp.f32, shape)
    a = sp.from_numpy(data)
    with pytest.raises(sp.ArgumentError, match="indices must be integers, not bools"):
        a[key]
    with pytest.raises(sp.ArgumentError, match="indices must be integers, not bools"):
        a[key] = 9.0
    np.testing.assert_array_equal(a.to_numpy(), data)


@pytest.mark.backends
def test_numpy_integer_indices_still_work(rng):
    data = values(rng, sp.i32, (3, 4))
    a = sp.from_numpy(data)
    v = sp.from_numpy(values(rng, sp.vec3, (3,)), dtype=sp.vec3)
    assert a[np.int64(1), np.uint8(2)] == data[1, 2] and a[np.int32(-1), 0] == data[-1, 0]
    a[np.int64(2), np.int16(3)] = 77
    data[2, 3] = 77
    np.testing.assert_array_equal(a.to_numpy(), data)
    np.testing.assert_array_equal(v[np.int64(1)], v.to_numpy()[1])

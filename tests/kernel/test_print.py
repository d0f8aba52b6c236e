"""`print(...)` in kernels: the text reaches sys.stdout at the next sync, the same on Vulkan and on the
interpreter backend; threads of one launch in any order, launches in order; derivative launches print nothing."""
import numpy as np
import pytest

import spvad as sp
from spvad.launch.prints import CAPACITY_ENV


def lines(capsys):
    sp.sync()
    return capsys.readouterr().out.splitlines()


def f32_array(values, needs_grad=False):
    a = sp.ndarray(sp.f32, (len(values),), needs_grad=needs_grad)
    a.from_numpy(np.asarray(values, np.float32))
    return a


# ---- values and text ---------------------------------------------------------------------------------------
@sp.kernel
def scalars(x: sp.Array, n: sp.i32, u: sp.u32, d: sp.f64, flag: sp.u1):
    print("f32", x[0], "i32", n, "u32", u, "f64", d, "bool", flag, n > 2)
    print(x[1], x[2], 7, 2.5, "const")


@pytest.mark.backends
def test_scalars_of_each_dtype(capsys):
    x = f32_array([0.1, 123456789.0, -1e-5])
    scalars(x, -3, 4000000000, 0.1, True)
    assert lines(capsys) == ["f32 0.1 i32 -3 u32 4000000000 f64 0.1 bool True False",
                             "123456790.0 -1e-05 7 2.5 const"]


@sp.kernel
def formatted(x: sp.Array, n: sp.i32):
    v = sp.vec3(x[0], 2.0, -3.5)
    w = sp.Vector(2, sp.i32)(n, n + 1)
    print("v =", v, w)
    print(x[0], n, sep=", ", end=";\n")
    print("no", "newline", sep="-", end="")
    print(" joined")
    print(f"n={n} x={x[0]:.3f} v={v} hex={n:x}")
    print()


@pytest.mark.backends
def test_vectors_sep_end_and_fstrings(capsys):
    formatted(f32_array([1.25]), 10)
    assert lines(capsys) == ["v = [1.25, 2.0, -3.5] [10, 11]", "1.25, 10;", "no-newline joined",
                             "n=10 x=1.250 v=[1.25, 2.0, -3.5] hex=a", ""]


@sp.kernel
def matrix(x: sp.Array):
    m = sp.mat2(x[0], 2.0, 3.0, 4.0)
    print("m =", m)


@pytest.mark.backends
def test_matrices_print_as_nested_lists(capsys):
    matrix(f32_array([1.5]))
    assert lines(capsys) == ["m = [[1.5, 2.0], [3.0, 4.0]]"]


# ---- threads, launches, control flow ----------------------------------------------------------------------
@sp.kernel
def per_thread(x: sp.Array, tag: sp.i32):
    for i in range(x.shape[0]):
        print("launch", tag, "thread", i, "x", x[i])


@pytest.mark.backends
def test_threads_in_any_order_launches_in_order(capsys):
    x = f32_array(np.arange(40) * 0.5)
    per_thread(x, 0)
    per_thread(x, 1)
    per_thread(x, 2)   # the same dispatches again (a replay): still printed once each
    out = lines(capsys)
    assert len(out) == 120
    for tag in range(3):
        part = out[40 * tag: 40 * (tag + 1)]
        assert sorted(part) == sorted(f"launch {tag} thread {i} x {i * 0.5}" for i in range(40))


@sp.func
def shout(v):
    print("func got", v)
    return v * 2.0


@sp.kernel
def control(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            print("positive", i)
        else:
            print("not positive", i)
        k = 0
        while k < 2:
            print("while", i, k)
            k += 1
        for j in range(i):
            print("for", i, j)
        y[i] = shout(x[i])


@pytest.mark.backends
def test_print_in_branches_loops_and_funcs(capsys):
    x, y = f32_array([1.0, -2.0]), f32_array([0.0, 0.0])
    control(x, y)
    out = lines(capsys)
    assert sorted(out) == sorted(["positive 0", "not positive 1", "while 0 0", "while 0 1", "while 1 0",
                                  "while 1 1", "for 1 0", "func got 1.0", "func got -2.0"])
    threads = [["positive 0", "while 0 0", "while 0 1", "func got 1.0"],
               ["not positive 1", "while 1 0", "while 1 1", "for 1 0", "func got -2.0"]]
    for mine in threads:   # a thread's lines come in program order
        assert [s for s in out if s in mine] == mine
    np.testing.assert_allclose(y.to_numpy(), [2.0, -4.0])


# ---- the buffer filling up ---------------------------------------------------------------------------------
@pytest.fixture
def tiny_print_buffer(monkeypatch):
    monkeypatch.setenv(CAPACITY_ENV, "64")   # 13 words of records
    sp.init()
    yield
    monkeypatch.delenv(CAPACITY_ENV)
    sp.init()


def test_dropped_lines_are_counted(capsys, tiny_print_buffer):
    x = f32_array(np.arange(10))
    per_thread(x, 0)   # records of 3 values: 4 words each, 3 fit
    out = lines(capsys)
    printed = [s for s in out if s.startswith("launch")]
    assert len(printed) == 3
    notice = [s for s in out if s.startswith("[spvad]")]
    assert len(notice) == 1 and "7 kernel print line(s) dropped" in notice[0] and CAPACITY_ENV in notice[0]
    per_thread(x, 1)   # the next sync starts with an empty buffer
    assert len([s for s in lines(capsys) if s.startswith("launch 1")]) == 3


# ---- derivatives ------------------------------------------------------------------------------------------
@sp.kernel
def loss_of(x: sp.Array, loss: sp.Array):
    for i in range(x.shape[0]):
        s = x[i]
        for k in range(3):
            print("step", i, k)
            s = s * x[i]
        print("value", i, s)
        loss[None] += s


@pytest.mark.backends
def test_gradient_launches_print_nothing(capsys):
    x = f32_array([1.0, 2.0], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    loss_of(x, loss)
    assert len(lines(capsys)) == 2 * 4
    loss.grad.fill(1.0)
    loss_of.grad(x, loss)
    assert lines(capsys) == []
    np.testing.assert_allclose(x.grad.to_numpy(), [4.0, 32.0])


@pytest.mark.backends
def test_tape_forward_prints_once(capsys):
    x = f32_array([1.0, 2.0], needs_grad=True)
    loss = sp.ndarray(sp.f32, (), needs_grad=True)
    with sp.Tape(loss=loss):
        loss_of(x, loss)
    out = lines(capsys)
    assert sorted(out) == sorted([f"step {i} {k}" for i in range(2) for k in range(3)] +
                                 ["value 0 1.0", "value 1 16.0"])
    np.testing.assert_allclose(x.grad.to_numpy(), [4.0, 32.0])


@pytest.mark.backends
def test_forward_mode_prints_once(capsys):
    x = sp.ndarray(sp.f32, (2,), needs_dual=True)
    x.from_numpy(np.array([1.0, 2.0], np.float32))
    loss = sp.ndarray(sp.f32, (), needs_dual=True)
    with sp.FwdMode(loss=loss, param=x, seed=[1.0, 0.0]):
        loss_of(x, loss)
    out = lines(capsys)
    assert len(out) == 8 and "value 1 16.0" in out
    assert float(loss.dual.to_numpy()) == pytest.approx(4.0)


# ---- errors -----------------------------------------------------------------------------------------------
@sp.kernel
def prints_an_array(x: sp.Array):
    print("x is", x)


@sp.kernel
def prints_with_file(x: sp.Array):
    print(x[0], file=None)


@pytest.mark.parametrize("k, match", [(prints_an_array, "cannot print a whole ndarray"),
                                      (prints_with_file, "takes sep=, end= and flush=")])
def test_unsupported_print_arguments_name_the_line(k, match):
    with pytest.raises(sp.CompileError, match=match) as info:
        k(f32_array([1.0]))
    assert "test_print.py" in str(info.value) and "print(" in str(info.value)

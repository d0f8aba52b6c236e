"""Errors a user meets: CompileError (file, line, source text), argument errors before anything reaches the
device, SpirvValidationError, PipelineCreationError (after which the runtime still works)."""
import inspect
import re
import sys

import numpy as np
import pytest

import spvad as sp
from driver_refusal import driver_refuses, poison_capability
from spvad import runtime
from spvad.spirv import tools


@pytest.fixture
def device_calls(monkeypatch):
    """Every pipeline creation and launch the device receives during the test."""
    calls = []
    dev = runtime.get().device
    for name in ("launch", "create_pipeline"):
        real = getattr(dev, name)
        monkeypatch.setattr(dev, name, lambda *a, _real=real, _n=name, **kw: calls.append(_n) or _real(*a, **kw))
    return calls


# ---- CompileError ---------------------------------------------------------------------------------------
@sp.func
def recurse(v):
    return recurse(v - 1) if v > 0 else v


@sp.func
def return_in_the_middle(v):
    if v > 0:
        return 1.0
    v = v * 2.0


@sp.kernel
def uses_try(x: sp.Array):
    for i in range(x.shape[0]):
        try:
            x[i] = 1.0
        except ValueError:
            pass


@sp.kernel
def uses_with(x: sp.Array):
    for i in range(x.shape[0]):
        with open("f"):
            x[i] = 1.0


@sp.kernel
def uses_lambda(x: sp.Array):
    for i in range(x.shape[0]):
        f = lambda v: v + 1    # noqa: E731
        x[i] = f(1.0)


@sp.kernel
def uses_listcomp(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = [v for v in range(3)][0]


@sp.kernel
def uses_recursion(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = recurse(x[i])


@sp.kernel
def uses_unknown_name(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = no_such_name * 2   # noqa: F821


@sp.kernel
def uses_fstring(x: sp.Array):
    for i in range(x.shape[0]):
        s = f"{i}"
        x[i] = 1.0


@sp.kernel
def float_into_int_local(x: sp.Array):
    for i in range(x.shape[0]):
        n = 0
        n = x[i] * 2
        x[i] = n


@sp.kernel
def returns_value(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = 1.0
    return x


@sp.kernel
def breaks_parallel_loop(x: sp.Array):
    for i in range(x.shape[0]):
        if x[i] > 0:
            break
        x[i] = 1.0


@sp.kernel
def calls_numpy(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = np.sin(x[i])


@sp.kernel
def wrong_index_count(x: sp.Array):
    for i in range(x.shape[0]):
        x[i, 0] = 1.0


@sp.kernel
def float_index(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[x[i]]


@sp.kernel
def dynamic_step(x: sp.Array, s: sp.i32):
    for i in range(x.shape[0]):
        for j in range(0, 4, s):
            x[i] = 1.0


@sp.kernel
def early_func_return(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = return_in_the_middle(x[i])


@sp.kernel
def loop_index_after_loop(x: sp.Array):
    for i in range(x.shape[0]):
        for k in range(3):
            x[i] += k
        x[i] = k


@sp.kernel
def local_of_other_dispatch(x: sp.Array):
    v = x[0] * 2
    v += 1.0              # assigned twice: a local of the serial task, not a top-level value
    for i in range(x.shape[0]):
        x[i] = v


@sp.kernel
def read_value_rewritten(x: sp.Array):
    v = x[0] * 2          # a top-level value read from x, which the loop writes while its threads read it
    for i in range(x.shape[0]):
        x[i] = v


@sp.kernel
def bitwise_on_float(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = x[i] & 1


@sp.kernel
def assert_statement(x: sp.Array):
    for i in range(x.shape[0]):
        assert x[i] > 0


@sp.kernel
def is_comparison(x: sp.Array):
    for i in range(x.shape[0]):
        x[i] = 1.0 if x[i] is None else 0.0


# (kernel, the offending source text, a fragment of the message); scalar args are appended as needed
COMPILE_ERRORS = [
    (uses_try, "try:", "try/except"),
    (uses_with, 'with open("f"):', "with"),
    (uses_lambda, "f = lambda v: v + 1", "lambda"),
    (uses_listcomp, "x[i] = [v for v in range(3)][0]", "list comprehensions"),
    (uses_recursion, "return recurse(v - 1) if v > 0 else v", "recursion"),
    (uses_unknown_name, "x[i] = no_such_name * 2", "unknown name 'no_such_name'"),
    (uses_fstring, 's = f"{i}"', "f-strings"),
    (float_into_int_local, "n = x[i] * 2", "local 'n' holds i32"),
    (returns_value, "return x", "return is not supported in a kernel"),
    (breaks_parallel_loop, "break", "parallel"),
    (calls_numpy, "x[i] = np.sin(x[i])", "cannot call sin"),
    (wrong_index_count, "x[i, 0] = 1.0", "indexed with 2"),
    (float_index, "x[i] = x[x[i]]", "integers"),
    (dynamic_step, "for j in range(0, 4, s):", "step"),
    (early_func_return, "v = v * 2.0", "returns a value on some paths but None"),
    (loop_index_after_loop, "x[i] = k", "loop index 'k'"),
    (local_of_other_dispatch, "x[i] = v", "another top-level statement"),
    (read_value_rewritten, "x[i] = v", "this loop writes 'x' at line"),
    (bitwise_on_float, "x[i] = x[i] & 1", "needs integers"),
    (assert_statement, "assert x[i] > 0", "assert"),
    (is_comparison, "x[i] = 1.0 if x[i] is None else 0.0", "is / in"),
]


def source_line_of(obj, text):
    """File and absolute line number of the (unique) line of `obj`'s source that is `text`."""
    lines, first = inspect.getsourcelines(obj)
    hits = [first + k for k, line in enumerate(lines) if line.split("  #")[0].strip() == text]
    assert len(hits) == 1, (text, hits)
    return inspect.getsourcefile(obj), hits[0]


@pytest.mark.parametrize("k,text,fragment", COMPILE_ERRORS, ids=[c[0].name for c in COMPILE_ERRORS])
def test_compile_error_names_file_line_and_source(k, text, fragment, device_calls):
    x = sp.from_numpy(np.array([1.5, -2.0, 3.0], np.float32))
    args = (x,) + (1,) * (len(k.params) - 1)
    with pytest.raises(sp.CompileError) as info:
        k(*args)
    e = info.value
    owner = {uses_recursion: recurse.fn, early_func_return: return_in_the_middle.fn}.get(k, k.fn)
    filename, lineno = source_line_of(owner, text)
    assert (e.filename, e.lineno) == (filename, lineno)
    assert text in e.source
    assert fragment in e.message
    assert f"{filename}:{lineno}:" in str(e) and text in str(e)
    assert isinstance(e, sp.SpvadError)
    assert device_calls == [] and k._cache == {}
    assert (x.to_numpy() == [1.5, -2.0, 3.0]).all()


# ---- argument errors -------------------------------------------------------------------------------------
@sp.kernel
def axpy(x: sp.Array, y: sp.Array, a: sp.f32, n: sp.i32):
    for i in range(n):
        y[i] = a * x[i] + y[i]


@sp.kernel
def takes_u32(y: sp.Array, c: sp.u32):
    for i in range(y.shape[0]):
        y[i] = c


def _args(kind):
    x, y = sp.from_numpy(np.ones(4, np.float32)), sp.from_numpy(np.full(4, 2.0, np.float32))
    return {
        "numpy strings instead of ndarray": ((np.array(["a", "b", "c", "d"]), y, 1.0, 4), "'x'"),
        "scalar instead of ndarray": ((1.0, y, 1.0, 4), "'x'"),
        "ndarray for an f32 scalar": ((x, y, x, 4), "'a'"),
        "float for an i32 scalar": ((x, y, 1.0, 2.5), "'n'"),
        "numpy float for an i32 scalar": ((x, y, 1.0, np.float32(2.0)), "'n'"),
        "string for a scalar": ((x, y, "one", 4), "'a'"),
        "too few arguments": ((x, y, 1.0), "takes 4 arguments"),
        "too many arguments": ((x, y, 1.0, 4, 5), "takes 4 arguments"),
    }[kind], y


@pytest.mark.parametrize("kind", ["numpy strings instead of ndarray", "scalar instead of ndarray",
                                  "ndarray for an f32 scalar", "float for an i32 scalar",
                                  "numpy float for an i32 scalar", "string for a scalar",
                                  "too few arguments", "too many arguments"])
def test_argument_errors_before_the_device(kind, device_calls):
    (args, named), y = _args(kind)
    with pytest.raises(sp.SpvadError) as info:
        axpy(*args)
    assert named in str(info.value) and "axpy" in str(info.value)
    assert isinstance(info.value, TypeError)      # ArgumentError is also a TypeError
    assert device_calls == [] and axpy._cache == {}
    assert (y.to_numpy() == 2.0).all()


def test_unsupported_annotation_and_defaults():
    @sp.kernel
    def odd(x: sp.Array, s: str):
        for i in range(x.shape[0]):
            x[i] = 1.0
    with pytest.raises(sp.SpvadError, match="'s'"):
        odd(sp.ndarray(sp.f32, 2), 1)
    with pytest.raises(sp.SpvadError, match="'n'"):
        @sp.kernel
        def with_default(x: sp.Array, n: sp.i32 = 3):
            pass


def test_ndarray_from_before_reset_is_rejected(device_calls):
    old = sp.from_numpy(np.ones(4, np.float32))
    y = sp.from_numpy(np.ones(4, np.float32))
    axpy(old, y, 2.0, 4)
    assert (y.to_numpy() == 3.0).all()
    sp.reset()
    fresh_y = sp.from_numpy(np.ones(4, np.float32))
    with pytest.raises(sp.SpvadError, match="'x'.*reset"):
        axpy(old, fresh_y, 2.0, 4)
    with pytest.raises(sp.SpvadError):
        old.to_numpy()
    axpy(sp.from_numpy(np.ones(4, np.float32)), fresh_y, 2.0, 4)   # the new runtime works
    assert (fresh_y.to_numpy() == 3.0).all()


@pytest.mark.parametrize("k,args", [(axpy, (1.0, 2**40)), (axpy, (1e300, 4)), (takes_u32, (-1,))],
                         ids=["i32 2**40", "f32 1e300", "u32 -1"])
def test_out_of_range_scalar_is_an_argument_error(k, args, device_calls):
    arrays = (sp.ndarray(sp.f32, 4), sp.ndarray(sp.f32, 4))[: len(k.params) - len(args)]
    with pytest.raises(sp.SpvadError):
        k(*arrays, *args)
    assert device_calls == []


# A captured module global, bound at compile time.
CAPTURED = None


@sp.kernel
def read_captured(y: sp.Array):
    for i in range(y.shape[0]):
        y[i] = CAPTURED[i] * 2


def test_captured_global_recreated_after_reset():
    global CAPTURED
    CAPTURED = sp.from_numpy(np.arange(4, dtype=np.float32))
    y = sp.ndarray(sp.f32, 4)
    read_captured(y)
    assert (y.to_numpy() == [0, 2, 4, 6]).all()
    sp.reset()
    CAPTURED = sp.from_numpy(np.arange(4, dtype=np.float32) + 10)   # the global, made again
    y = sp.ndarray(sp.f32, 4)
    read_captured(y)       # binds the new runtime's CAPTURED, not the released one
    assert (y.to_numpy() == [20, 22, 24, 26]).all()


# ---- SPIR-V validation and pipeline creation failures -----------------------------------------------------
@sp.kernel
def triple(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = x[i] * 3


def test_spirv_validation_error_names_kernel():
    x, y = sp.from_numpy(np.ones(3, np.float32)), sp.ndarray(sp.f32, 3)
    good = triple.spirv(x, y)
    tools.validate(good)      # accepted as emitted
    with pytest.raises(sp.SpirvValidationError, match="my_kernel") as info:
        tools.validate(poison_capability(good), kernel_name="my_kernel")
    assert "spirv-val" in str(info.value) and isinstance(info.value, sp.SpvadError)


def test_compile_rejects_a_module_spirv_val_refuses(monkeypatch, device_calls):
    """The compile pipeline runs spirv-val under pytest: a broken lowering never reaches the driver."""
    compiler = sys.modules["spvad.pipeline"]
    real = compiler.lower_task

    def broken_lower(*a, **kw):
        low = real(*a, **kw)
        low.spirv = poison_capability(low.spirv)
        return low
    monkeypatch.setattr(compiler, "lower_task", broken_lower)

    @sp.kernel
    def victim(x: sp.Array):
        for i in range(x.shape[0]):
            x[i] = 1.0
    x = sp.from_numpy(np.full(3, 5.0, np.float32))
    with pytest.raises(sp.SpirvValidationError, match="victim"):
        victim(x)
    assert device_calls == []
    assert (x.to_numpy() == 5.0).all()


def test_pipeline_creation_error_then_runtime_still_works():
    @sp.kernel
    def refused(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = x[i] + 1

    x, y = sp.from_numpy(np.arange(5, dtype=np.float32)), sp.ndarray(sp.f32, 5)
    specs, _, _ = refused._bind((x, y))
    ck = refused._compiled(specs)
    good = ck.tasks[0].lowered.spirv
    # what spirv-val accepted, refused by the driver (lavapipe's real refusal, elsewhere an injected one)
    with driver_refuses(runtime.get().device) as poison, pytest.raises(sp.PipelineCreationError) as info:
        ck.tasks[0].lowered.spirv = poison(good)
        refused(x, y)
    e = info.value
    assert "refused" in str(e) and "vulkan" in str(e)
    assert e.kernel == "refused"
    assert re.search(poison.reason, str(e))         # the driver's reason (Mesa's) travels with the error
    sp.sync()
    assert (y.to_numpy() == 0).all()
    # the runtime stays usable: other kernels, and this one once its module is whole again
    triple(x, y)
    assert (y.to_numpy() == np.arange(5) * 3).all()
    ck.tasks[0].lowered.spirv = good
    refused(x, y)
    assert (y.to_numpy() == np.arange(5) + 1).all()

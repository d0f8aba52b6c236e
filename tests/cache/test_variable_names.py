"""The names a kernel reads as variables (spvad/variable_names.py, for cache.global_values) are read from the
bytecode's load instructions directly on CPython 3.11-3.13: exactly those dis finds, for every function in spvad and
the tests' shared kernels, and for closures, class bodies, comprehensions and arguments past one byte
(EXTENDED_ARG)."""
import importlib
import os
import types

import numpy as np
import pytest

import spvad as sp
from spvad.cache import variable_names as names

pytestmark = pytest.mark.skipif(not names.SCAN_LOADS, reason="this Python's loads are read through dis only")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sp.__file__)))


def code_objects(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from code_objects(c)


def functions_of(module):
    for obj in vars(module).values():
        fn = getattr(obj, "fn", obj)   # @sp.kernel and @sp.func wrap the function
        if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__:
            yield fn
        elif isinstance(obj, type) and obj.__module__ == module.__name__:
            yield from (m for m in vars(obj).values() if isinstance(m, types.FunctionType))


def modules():
    """spvad's modules (all of them imported) and the tests' shared kernels."""
    names = [f"spvad.{os.path.relpath(os.path.join(d, f), os.path.join(ROOT, 'spvad'))[:-3].replace(os.sep, '.')}"
             for d, _, files in os.walk(os.path.join(ROOT, "spvad")) for f in files
             if f.endswith(".py") and "__pycache__" not in d]
    found = []
    for name in sorted(n[:-len(".__init__")] if n.endswith(".__init__") else n for n in names):
        if name in ("spvad.__main__",) or ".rhi.metal" in name:   # (a CLI; a backend of another platform)
            continue
        found.append(importlib.import_module(name))
    return found + [importlib.import_module(m) for m in ("tests.common_kernels", "tests.agreement_kernels")]


def test_every_function_in_spvad_and_the_tests_agrees_with_dis():
    checked = 0
    for module in modules():
        for fn in functions_of(module):
            for code in code_objects(fn.__code__):
                assert names.scanned_loads(code) == names.disassembled_loads(code), code
                checked += 1
    assert checked > 1000   # (the walk really found spvad's functions)


SCALE = 2.0


def closure_and_class():
    cell = 3.0

    def inner(v):
        return v * cell * SCALE + len(str(v))

    class Body:
        factor = cell * SCALE          # LOAD_CLASSDEREF of `cell`, LOAD_NAME... in a class body
        doubled = [cell * k for k in range(3)]   # a comprehension: LOAD_DEREF in its own code

    return inner, Body


def many_globals():
    """A function reading 300 globals: past 255 its name indices need EXTENDED_ARG."""
    namespace = {f"g{k}": float(k) for k in range(300)}
    exec("def wide():\n    return " + " + ".join(f"g{k}" for k in range(300)), namespace)
    return namespace["wide"]


def test_closures_class_bodies_and_wide_arguments_agree_with_dis():
    inner, _ = closure_and_class()
    wide = many_globals()
    for code in (*code_objects(closure_and_class.__code__), inner.__code__, wide.__code__):
        assert names.scanned_loads(code) == names.disassembled_loads(code), code
    assert {"cell", "SCALE", "len", "str"} <= set(names.scanned_loads(inner.__code__))
    assert names.variable_names(wide.__code__) == tuple(sorted(f"g{k}" for k in range(300)))


def test_attribute_names_are_not_variables():
    """`x.shape` reads no variable called `shape`: a global of that name may change freely."""
    @sp.kernel
    def copy(x: sp.Array, y: sp.Array):
        for i in range(x.shape[0]):
            y[i] = sp.sin(x[i]) * SCALE

    read = names.variable_names(copy.fn.__code__)
    assert read == tuple(sorted(set(names.loaded_names(copy.fn.__code__, names.disassembled_loads))))
    assert "shape" not in read and "sin" not in read and {"SCALE", "range", "sp"} <= set(read)
    x_np = np.linspace(0.1, 0.9, 8, dtype=np.float32)
    x, y = sp.from_numpy(x_np), sp.ndarray(sp.f32, (8,))
    copy(x, y)   # (and it compiles and runs as before)
    np.testing.assert_allclose(y.to_numpy(), np.sin(x_np.astype(np.float64)) * SCALE, rtol=1e-5, atol=1e-6)

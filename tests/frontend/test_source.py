"""frontend/source.py: a function's source as inspect would give it, cut by indentation (with inspect's tokenizer
as the fall-back where that cut does not parse): decorators, nested functions, signatures over several
lines, strings and brackets reaching further left than the def."""
import inspect
import textwrap

import pytest

from spvad.frontend.source import FunctionSource, _block_by_indentation

CODE = '''
import functools


def deco(f):
    return f


@deco
@functools.lru_cache(maxsize=None)
def decorated(x):
    return x + 1


def multi_line_signature(
    a,
    b=2,
):
    # a comment
    return a + b
# a comment at the left margin


def left_string(x):
    s = """a string
with lines at the left margin"""
    return x


def left_bracket(x):
    y = (x +
1)
    return y


def outer():
    def inner(x):
        return x * 2
    return inner


after = 1
'''


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "functions.py"
    path.write_text(textwrap.dedent(CODE))
    namespace = {"__name__": "functions"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("name, cut", [("decorated", True), ("multi_line_signature", True),
                                       ("left_string", False), ("left_bracket", False), ("inner", True)])
def test_the_source_is_inspects(module, name, cut):
    fn = module["outer"]() if name == "inner" else module[name]
    fn = getattr(fn, "__wrapped__", fn)
    found = _block_by_indentation(fn)
    assert (found is not None) == cut   # where the cut fails, inspect's answer is used
    if found is not None:
        assert found[:2] == tuple(inspect.getsourcelines(fn))
    tree = FunctionSource.of(fn).tree
    assert tree.name == name


def test_a_lambda_goes_to_inspect():
    f = lambda x: x   # noqa: E731
    assert _block_by_indentation(f) is None

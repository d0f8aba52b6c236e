"""Every ```python block of docs/autodiff.md runs and its asserts hold. Each block is self-contained: it
is written to its own file (kernels need their source on disk) and run as a script, in a fresh runtime."""
import pathlib
import re
import runpy

import pytest

import spvad as sp
from spvad import runtime

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "autodiff.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def _line(block):
    return DOC.read_text()[: DOC.read_text().index(block)].count("\n") + 1


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 7


@pytest.fixture
def fresh_runtime():
    """Each block starts from the default runtime; afterwards whatever runtime it left (a block may call
    sp.init(debug=True)) is checked for validation messages and replaced by the default one."""
    sp.init()
    yield
    rt = runtime.current()
    try:
        if rt is not None:
            rt.sync()
            msgs = rt.device.validation_messages()
            assert not msgs, "Vulkan validation messages:\n" + "\n".join(msgs)
    finally:
        sp.init()


@pytest.mark.parametrize("k", range(len(BLOCKS)), ids=[f"block{k}_line{_line(b)}" for k, b in enumerate(BLOCKS)])
def test_doc_block_runs(k, tmp_path, fresh_runtime):
    path = tmp_path / f"autodiff_md_block{k}.py"
    path.write_text(BLOCKS[k])
    runpy.run_path(str(path), run_name="__main__")

"""Every ```python block of docs/autodiff.md, docs/language.md, docs/from_taichi.md and docs/interop.md runs
and its asserts hold. Each block is self-contained: it is written to its own file (kernels need their source on
disk) and run as a script, in a fresh runtime, in its own folder (a block may save a picture)."""
import pathlib
import re
import runpy

import pytest

import spvad as sp
from spvad import runtime

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
BLOCKS = [(doc, block) for doc in ("autodiff.md", "language.md", "from_taichi.md", "interop.md")
          for block in re.findall(r"^```python\n(.*?)^```", (DOCS / doc).read_text(), flags=re.S | re.M)]


def _line(doc, block):
    text = (DOCS / doc).read_text()
    return text[: text.index(block)].count("\n") + 1


def test_the_guides_have_examples():
    assert sum(doc == "autodiff.md" for doc, _ in BLOCKS) >= 7
    assert sum(doc == "language.md" for doc, _ in BLOCKS) >= 4
    assert sum(doc == "from_taichi.md" for doc, _ in BLOCKS) >= 3
    assert sum(doc == "interop.md" for doc, _ in BLOCKS) >= 5


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


@pytest.mark.parametrize("k", range(len(BLOCKS)),
                         ids=[f"{doc[:-3]}_line{_line(doc, b)}" for doc, b in BLOCKS])
def test_doc_block_runs(k, tmp_path, fresh_runtime, monkeypatch):
    doc, block = BLOCKS[k]
    monkeypatch.chdir(tmp_path)
    path = tmp_path / f"{doc[:-3]}_md_block{k}.py"
    path.write_text(block)
    runpy.run_path(str(path), run_name="__main__")

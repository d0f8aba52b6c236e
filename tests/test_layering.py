"""The layering of DESIGN.md ("imports point down only"), as import-linter contracts in pyproject.toml
([tool.importlinter]): a broken contract fails with the linter's report (importer -> imported, line)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint(folder):
    """Runs the linter on the contracts of `folder`/pyproject.toml (found there, as every version does)."""
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the test extra (bash ci/setup.sh)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=folder, env=env, capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout + r.stderr


def test_imports_follow_the_layering():
    rc, out = lint(ROOT)
    assert rc == 0 and " 0 broken" in out, f"import-linter (pyproject.toml [tool.importlinter]):\n{out}"


def test_a_broken_contract_is_reported(tmp_path):
    """The check can fail: the IR put above the types it imports is a broken layering."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_package = "spvad"\n\n[[tool.importlinter.contracts]]\nname = "inverted"\n'
        'type = "layers"\nlayers = ["spvad.types", "spvad.ir"]\n')
    rc, out = lint(tmp_path)
    assert rc != 0 and "1 broken" in out, out
    assert "spvad.ir is not allowed to import spvad.types" in out, out

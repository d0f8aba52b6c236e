"""tests/interop run against real torch and JAX (CPU builds): ci/setup.sh installs them (the test extra). A
missing one is an error here, never a skip."""
import sys

import pytest

try:
    import jax
    import torch  # noqa: F401
except ImportError as exc:   # pragma: no cover - the message is the point
    raise ImportError(f"tests/interop need torch and jax (CPU builds): run `bash ci/setup.sh` ({exc})") from exc


@pytest.fixture
def x64():
    """JAX with 64-bit values for the test (f64 arrays cross only then); the previous mode afterwards."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


@pytest.fixture
def no_ndarray_made(monkeypatch):
    """Fails the test if an ndarray was made in it (a refused input must allocate nothing)."""
    made = []
    Ndarray = sys.modules["spvad.ndarray"].Ndarray   # (sp.ndarray is the function)
    original = Ndarray.__init__

    def counting(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(args)   # made (a refused shape raises before anything is allocated)
    monkeypatch.setattr(Ndarray, "__init__", counting)
    yield
    assert made == [], "a refused input allocated device memory"

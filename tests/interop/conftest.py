"""tests/interop run against real torch and JAX (CPU builds): ci/setup.sh installs them (the test extra). A
missing one is an error here, never a skip."""
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

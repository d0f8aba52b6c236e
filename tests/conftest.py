"""Suite-wide set-up: Vulkan validation on (incl. sync validation), and no validation message may pass."""
import os

import tempfile  # noqa: E402

os.environ.setdefault("SPVAD_VALIDATION", "1")
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
# the on-disk compile cache works during tests too, in a fresh folder (never the user's ~/.cache)
os.environ["SPVAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="spvad-test-cache-")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import spvad as sp  # noqa: E402
from spvad import runtime  # noqa: E402


@pytest.fixture(autouse=True)
def no_validation_messages():
    """Fail any test after which the validation layer or the driver reported something."""
    yield
    rt = runtime.current()
    if rt is not None:
        try:
            rt.sync()
        finally:
            msgs = rt.device.validation_messages()
        assert not msgs, "Vulkan validation messages:\n" + "\n".join(msgs)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def rand(rng, shape, lo=0.1, hi=1.0, dtype=np.float32):
    """Random non-zero data (never zeros: a test on zeros cannot fail for many bugs)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(lo, hi, shape)).astype(dtype)


@pytest.fixture
def fresh():
    sp.reset()
    yield
    sp.reset()


@pytest.fixture
def debug():
    """A debug runtime for the test; afterwards its validation messages are checked and the default
    (debug=False) runtime is back."""
    sp.init(debug=True)
    yield
    rt = runtime.current()
    try:
        try:
            rt.sync()
        except sp.SpvadError:
            pass
        msgs = rt.device.validation_messages()
        assert not msgs, "Vulkan validation messages:\n" + "\n".join(msgs)
    finally:
        sp.init()

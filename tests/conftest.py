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


def pytest_configure(config):
    config.addinivalue_line("markers", "backends: run the test on the Vulkan device and on the interpreter "
                            "backend (sp.init(backend='interp')), as parameter `backend`")


def pytest_generate_tests(metafunc):
    """Tests marked `backends` run once per backend: the gradient tables hold on the oracle too."""
    if metafunc.definition.get_closest_marker("backends") and "backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", ["vulkan", "interp"])


@pytest.fixture(autouse=True)
def on_backend(request):
    """A `backends` test's runtime is its backend's (the default runtime is back afterwards)."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("backend") if callspec else None
    if name is None or (name == "vulkan" and os.environ.get("SPVAD_BACKEND", "vulkan") == "vulkan"):
        yield
        return
    sp.init(backend=name)
    try:
        yield
        rt = runtime.current()
        assert rt is None or rt.backend == name, f"the test replaced the {name} runtime by a {rt.backend} one"
    finally:
        sp.init()


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

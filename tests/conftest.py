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
                            "backend (sp.init(backend='interp')), as parameter `backend`; gradient and "
                            "forward-mode tables (tests/autodiff, fwdmode, tape) also with sp.init(debug=True)")


# Derivative kernels touch only what the primal touched: the derivative tables run once more with every access
# bounds-checked on the device (debug=True), and any out-of-bounds report fails the test at its last sync.
# (Not those that turn debug on themselves, with a fixture named here.)
DEBUG_DIRS = ("autodiff", "fwdmode", "tape")
DEBUG_FIXTURES = ("debug", "debug_on")


def pytest_generate_tests(metafunc):
    """Tests marked `backends` run once per backend: the gradient tables hold on the oracle too."""
    if metafunc.definition.get_closest_marker("backends") and "backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("backend")
        debug = os.path.basename(os.path.dirname(str(metafunc.definition.fspath))) in DEBUG_DIRS and \
            not set(DEBUG_FIXTURES) & set(metafunc.fixturenames)
        metafunc.parametrize("backend", ["vulkan", "interp"] + (["debug"] if debug else []))


# The runtime of each non-default backend, kept from one test to the next: opening and closing a Vulkan
# device for every test (the debug runtime, and the default one again afterwards) cost more than the tests.
_KEPT = {}


@pytest.fixture(autouse=True)
def on_backend(request):
    """A `backends` test's runtime is its backend's; the default runtime is back afterwards. "debug" is the
    default backend with sp.init(debug=True). The test's launches are synchronised and its validation
    messages read at the end, so an error found on the device (an out-of-bounds access) fails it."""
    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("backend") if callspec else None
    if name is None or (name == "vulkan" and os.environ.get("SPVAD_BACKEND", "vulkan") == "vulkan"):
        yield
        return
    default, rt = runtime.current(), _KEPT.pop(name, None)
    if rt is None:
        rt = runtime.Runtime(**({"debug": True} if name == "debug" else {"backend": name}))
    rt.random_launches = 0   # random numbers as a fresh runtime draws them
    with runtime.LOCK:
        runtime._current = rt
    ok = False
    try:
        yield
        now = runtime.current()   # rt, or one the test made (sp.init(backend=..., debug=True)), or None
        if now is not None:
            assert now.backend == rt.backend, f"the test replaced the {name} runtime by a {now.backend} one"
            now.sync()
            msgs = now.device.validation_messages()
            assert not msgs, "Vulkan validation messages:\n" + "\n".join(msgs)
            ok = now is rt
    finally:
        with runtime.LOCK:
            if runtime.current() is not default:
                if ok:
                    _KEPT[name] = rt   # clean: the next test of this backend takes it
                else:
                    runtime.reset()    # a failed test's runtime, or one it made, goes
                runtime._current = default


def pytest_sessionfinish(session):
    for rt in _KEPT.values():
        rt.close()
    _KEPT.clear()


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

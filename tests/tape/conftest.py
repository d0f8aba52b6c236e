"""Fixtures of the whole-program tests."""
import pytest

import spvad as sp


@pytest.fixture
def debug_on(request):
    """The test's backend (`backends` marker) with sp.init(debug=True): every array access is checked on the
    device, and an out-of-bounds one fails the next sync. The backend's plain runtime is back afterwards."""
    backend = request.node.callspec.params["backend"]
    sp.init(backend=backend, debug=True)
    yield
    sp.sync()
    sp.init() if backend == "vulkan" else sp.init(backend=backend)

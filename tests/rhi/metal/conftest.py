"""Registers the `mac` marker: tests that need macOS with a Metal GPU and pyobjc (skipped elsewhere)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "mac: needs macOS with a Metal GPU and pyobjc-framework-Metal "
                                       "(skipped elsewhere; run: SPVAD_BACKEND=metal bash ci/test.sh tests/rhi/metal)")

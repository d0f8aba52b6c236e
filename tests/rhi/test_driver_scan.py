"""The Vulkan loader's first call, made on a thread while the `vulkan` package imports (driver_scan.py)."""
import sys
import threading

import pytest

from spvad.rhi.vulkan import driver_scan

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the scan runs on Linux only")


def test_the_scan_thread_finishes():
    thread = driver_scan.start()
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_a_missing_loader_raises_nothing_on_the_thread(monkeypatch):
    """No loader: the thread ends quietly (the package's import reports it, with install hints)."""
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    monkeypatch.setattr(driver_scan, "LOADER", "libspvad-no-such-loader.so.1")
    driver_scan.start().join(timeout=60)
    assert raised == []


def test_opening_a_vulkan_device_waits_for_the_scan(monkeypatch):
    """open_device joins the thread before the device calls the loader (never two first calls at once)."""
    import time
    from spvad import rhi
    started = []
    real_start, real_call = driver_scan.start, driver_scan._first_call

    def start():
        started.append(real_start())
        return started[-1]

    def slow_first_call():   # here the drivers are loaded already: a scan as slow as a first one
        time.sleep(0.3)
        real_call()

    monkeypatch.setattr(driver_scan, "start", start)
    monkeypatch.setattr(driver_scan, "_first_call", slow_first_call)
    device = rhi.open_device("vulkan")
    try:
        assert len(started) == 1 and not started[0].is_alive()
    finally:
        device.close()

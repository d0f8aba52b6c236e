"""Vulkan on macOS (MoltenVK): finding the loader where the `vulkan` package's dlopen misses it, the install
hints, and (on macOS) a device created through VK_KHR_portability_enumeration running a kernel."""
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import spvad as sp
from metal_cases import mac
from spvad.rhi.vulkan import loader


def test_macos_loader_candidates(tmp_path, monkeypatch):
    sdk = tmp_path / "VulkanSDK" / "1.3.280.1"
    for d in (sdk / "macOS" / "lib", tmp_path / "VulkanSDK" / "1.3.200.0" / "macOS" / "lib"):
        d.mkdir(parents=True)
        (d / "libvulkan.1.dylib").write_bytes(b"")
    monkeypatch.setattr(loader, "MACOS_DIRS", ("$VULKAN_SDK/macOS/lib", str(tmp_path / "VulkanSDK/*/macOS/lib"),
                                               str(tmp_path / "missing")))
    found = loader.macos_loader_candidates({"VULKAN_SDK": str(sdk)})
    assert found == [str(sdk / "macOS" / "lib" / "libvulkan.1.dylib"),   # $VULKAN_SDK first, no duplicate
                     str(tmp_path / "VulkanSDK" / "1.3.200.0" / "macOS" / "lib" / "libvulkan.1.dylib")]
    assert loader.macos_loader_candidates({}) == found   # unset VULKAN_SDK: skipped; newest SDK first


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses the Linux loader as a stand-in")
def test_import_with_an_absolute_loader_path():
    """The macOS retry path, exercised on Linux in a fresh interpreter: the package's dlopen of its leaf name
    is redirected to an absolute path, and the real cffi FFI object is back in place afterwards."""
    path = next(iter(glob.glob("/usr/lib/*/libvulkan.so.1") + glob.glob("/usr/lib*/libvulkan.so.1")), None)
    if path is None:
        pytest.skip("no libvulkan.so.1 in /usr/lib")
    code = ("import sys; from spvad.rhi.vulkan.loader import import_vulkan_with_loader as f; "
            f"vk = f({path!r}, leaf_names=('libvulkan.so.1',)); "
            "print(vk._spvad_loader, type(vk.ffi).__name__, vk.ffi is sys.modules['vulkan._vulkancache'].ffi, "
            "vk.vkEnumerateInstanceVersion() >= (1 << 22))")
    env = dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [path, "FFI", "True", "True"]


def test_install_hint_per_platform(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    hint = loader.install_hint()
    assert "molten-vk" in hint and "DYLD_FALLBACK_LIBRARY_PATH" in hint and "VK_DRIVER_FILES" in hint
    monkeypatch.setattr(sys, "platform", "linux")
    assert "mesa-vulkan-drivers" in loader.install_hint()


@mac
def test_vulkan_on_moltenvk_runs_a_gradient(monkeypatch):
    """Loader found, portability enumeration/subset enabled (else MoltenVK is invisible), a gradient runs."""
    monkeypatch.delenv("SPVAD_BACKEND", raising=False)
    sp.init(backend="vulkan")
    assert sp.device_info()["backend"] == "vulkan"
    try:
        @sp.kernel
        def cube(x: sp.Array, y: sp.Array):
            for i in range(x.shape[0]):
                y[i] = x[i] * x[i] * x[i]
        x = sp.from_numpy(np.linspace(-1, 1, 257).astype(np.float32), needs_grad=True)
        y = sp.ndarray(sp.f32, (257,), needs_grad=True)
        cube(x, y)
        y.grad.fill(1.0)
        cube.grad(x, y)
        np.testing.assert_allclose(x.grad.to_numpy(), 3 * x.to_numpy() ** 2, rtol=1e-5, atol=1e-6)
    finally:
        sp.reset()

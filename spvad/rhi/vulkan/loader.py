"""Import the PyPI `vulkan` package, also on macOS, where its dlopen of `libvulkan.dylib` often misses the
loader: retry with the loader's absolute path ($VULKAN_SDK, Homebrew, /usr/local, ~/VulkanSDK)."""

import glob
import importlib.util
import os
import sys

# dyld looks for a leaf name in the DYLD_* paths fixed at process start and a few defaults (/usr/local/lib):
# Homebrew on Apple silicon (/opt/homebrew/lib) or an SDK elsewhere is missed; setting DYLD_* later is too late.
MACOS_LEAF = "libvulkan.dylib"   # the package's macOS name (its other names are for Linux and Windows)
MACOS_DIRS = ("$VULKAN_SDK/lib", "$VULKAN_SDK/macOS/lib", "/opt/homebrew/lib", "/usr/local/lib",
              "~/VulkanSDK/*/macOS/lib")
MACOS_NAMES = ("libvulkan.dylib", "libvulkan.1.dylib")


def install_hint():
    """How to get a Vulkan loader and driver on this platform (for error messages)."""
    if sys.platform == "darwin":
        return ("install the loader and MoltenVK (`brew install vulkan-loader molten-vk`, or the LunarG "
                "Vulkan SDK); if the loader is elsewhere, start Python with DYLD_FALLBACK_LIBRARY_PATH=<its lib "
                "folder>; if no device is found, set VK_DRIVER_FILES=<path to MoltenVK_icd.json>")
    return "install libvulkan1 and a driver (e.g. mesa-vulkan-drivers)"


def no_driver_hint():
    """What to do when the loader is there but finds no driver (for error messages)."""
    install = install_hint() if sys.platform == "darwin" else (
        "install one: on Debian/Ubuntu `apt-get install mesa-vulkan-drivers` (lavapipe, a CPU driver), or your "
        "GPU vendor's Vulkan driver")
    return f"{install}. sp.init(backend=\"interp\") runs kernels without a driver (the IR interpreter: slow)"


def macos_loader_candidates(env=None):
    """Existing loader files in MACOS_DIRS, in order (folders with an unset variable are skipped)."""
    env = os.environ if env is None else env
    found = []
    for pattern in MACOS_DIRS:
        if "$VULKAN_SDK" in pattern and not env.get("VULKAN_SDK"):
            continue
        folder = os.path.expanduser(pattern.replace("$VULKAN_SDK", env.get("VULKAN_SDK", "")))
        for d in sorted(glob.glob(folder), reverse=True):   # newest SDK version first
            for name in MACOS_NAMES:
                path = os.path.join(d, name)
                if os.path.isfile(path) and path not in found:
                    found.append(path)
    return found


def import_vulkan():
    """The `vulkan` module; on macOS, when the plain import cannot load the loader, retried with each
    candidate path. Raises the first OSError when nothing works."""
    try:
        import vulkan
        return vulkan
    except OSError as exc:
        if sys.platform != "darwin":
            raise
        first = exc
    for path in macos_loader_candidates():
        try:
            return import_vulkan_with_loader(path)
        except OSError:
            continue
    raise first


class _RedirectingFFI:
    """Stands in for the package's cffi FFI object while it imports: dlopen of a leaf name in `paths`
    opens the mapped absolute path instead; everything else goes to the real object."""

    def __init__(self, ffi, paths):
        self._ffi, self._paths, self.opened = ffi, paths, []

    def dlopen(self, name, *args):
        path = self._paths.get(name, name)
        lib = self._ffi.dlopen(path, *args)
        self.opened.append(path)
        return lib

    def __getattr__(self, attr):
        return getattr(self._ffi, attr)


def import_vulkan_with_loader(path, leaf_names=(MACOS_LEAF,)):
    """Import `vulkan` with its dlopen of `leaf_names` redirected to `path`. The package's generated cffi
    module (vulkan._vulkancache) is loaded first, on its own, and its `ffi` swapped for the redirecting
    stand-in while vulkan._vulkan runs; the real object is put back everywhere afterwards."""
    spec = importlib.util.find_spec("vulkan")   # a top-level find runs no package code
    if spec is None or not spec.submodule_search_locations:
        raise OSError("the `vulkan` package is not installed")
    for name in ("vulkan", "vulkan._vulkan"):   # leftovers of a failed import, if any
        sys.modules.pop(name, None)
    cache = sys.modules.get("vulkan._vulkancache")
    if cache is None:
        file = os.path.join(list(spec.submodule_search_locations)[0], "_vulkancache.py")
        cspec = importlib.util.spec_from_file_location("vulkan._vulkancache", file)
        cache = importlib.util.module_from_spec(cspec)
        cspec.loader.exec_module(cache)
        sys.modules["vulkan._vulkancache"] = cache
    real = cache.ffi
    stand_in = cache.ffi = _RedirectingFFI(real, {leaf: path for leaf in leaf_names})
    try:
        import vulkan
    finally:
        cache.ffi = real
    vulkan.ffi = sys.modules["vulkan._vulkan"].ffi = real
    vulkan._spvad_loader = stand_in.opened[-1] if stand_in.opened else None
    return vulkan

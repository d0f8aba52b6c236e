"""The Vulkan loader's first call loads every installed driver (30-40 ms on the CI machine: lavapipe with its
LLVM, radeon, intel), which stay loaded (a second call takes 0.5 ms). Made on a thread while the `vulkan`
package imports (~45 ms of Python holding the GIL; ctypes releases it during the call), the two overlap."""
import ctypes
import sys
import threading

LOADER = "libvulkan.so.1"   # the name the `vulkan` package opens first on Linux (macOS: loader.py finds it)


def _first_call():
    try:
        count = ctypes.c_uint32(0)
        ctypes.CDLL(LOADER).vkEnumerateInstanceExtensionProperties(None, ctypes.byref(count), None)
    except Exception:   # no loader: the package's import reports it, with install hints
        pass


def start():
    """A started thread making the loader's first call (join it before calling the loader), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    thread = threading.Thread(target=_first_call, name="spvad-vulkan-driver-scan", daemon=True)
    thread.start()
    return thread

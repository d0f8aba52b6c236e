"""The devices spvad runs on, behind one small interface (base.py: buffers, copies, pipelines, launches, sync):
Vulkan (vulkan/), Metal (metal/, SPIR-V translated by SPIRV-Cross) and the IR interpreter (interp/), each
imported only when opened. host_scalars.py reads and writes a buffer's mapped pieces as one flat array.

May import: spirv (Metal's translation, tools), ir (the interpreter), types, errors. Never the frontend,
autodiff, the launch side or anything above; rhi.vulkan and rhi.metal never import each other."""
import importlib

from ..errors import DeviceError

# The backends the runtime can open: name -> (module, Device class). What each runs: "spirv" modules
# (Vulkan, Metal through SPIRV-Cross) or the IR itself (the interpreter, the semantic oracle).
BACKENDS = {
    "vulkan": ("spvad.rhi.vulkan.device", "VulkanDevice", "spirv"),
    "metal": ("spvad.rhi.metal.device", "MetalDevice", "spirv"),
    "interp": ("spvad.rhi.interp.device", "InterpDevice", "ir"),
}


def open_device(backend, selector=None, **options):
    """A Device of `backend` (imported only now: opening one backend loads no other driver)."""
    if backend not in BACKENDS:
        raise DeviceError(f"unknown backend {backend!r}; expected 'auto' or one of {', '.join(BACKENDS)}")
    module, cls, _ = BACKENDS[backend]
    scan = None
    if backend == "vulkan":   # the loader loads its drivers while the `vulkan` package imports
        from .vulkan import driver_scan
        scan = driver_scan.start()
    try:
        device_class = getattr(importlib.import_module(module), cls)
    finally:
        if scan is not None:
            scan.join()
    return device_class(selector, **options)


def code_kind(backend):
    """"spirv" or "ir": what the compile pipeline produces for `backend`."""
    return BACKENDS[backend][2]

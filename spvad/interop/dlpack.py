"""DLPack: an ndarray's memory lent to another library without a copy (`np.from_dlpack(a)`,
`torch.from_dlpack(a)`), and `sp.from_dlpack(obj)`, another library's array copied into a new ndarray.

spvad's buffers are host-visible and persistently mapped on every backend, so the export is a view of the
mapping (a CPU DLPack tensor). The view keeps the ndarray alive, and the runtime keeps the device open past
sp.reset() while any view is left (runtime.close_when_unviewed): a view never points at freed memory."""
import sys

import numpy as np

from .. import runtime
from ..errors import ArgumentError
from . import host

KDL_CPU = 1   # DLPack's device type of host memory


class LentView:
    """Owns the zero-copy view that consumers of a DLPack export hold: numpy builds the view from this
    object's __array_interface__, so the view references it, and it references the ndarray."""

    def __init__(self, array):
        with runtime.LOCK:
            view = array._view()   # finishes pending launches (and refuses an array of a reset runtime)
        self.array, self.memory = array, view   # the memory itself too: the interpreter's is a numpy array
        self.__array_interface__ = dict(view.__array_interface__, shape=array.storage_shape)
        array._runtime.lent_views.add(self)


def export(a, stream=None, max_version=None, dl_device=None, copy=None):
    """`a.__dlpack__(...)`: a capsule over a's memory (a copy only for bool arrays, or when asked)."""
    if stream is not None and stream != -1:
        raise BufferError(f"spvad ndarrays are host memory (DLPack device kDLCPU): stream must be None, got {stream!r}")
    kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy))
              if v is not None}
    if a.element_dtype.is_bool:   # stored as 32-bit words: the bool values exist only in a copy
        if copy is False:
            raise BufferError("a bool ndarray is stored as 32-bit words on the device: DLPack export needs a "
                              "copy (copy=False was asked)")
        return a.to_numpy().__dlpack__(**kwargs)
    return np.asarray(LentView(a)).__dlpack__(**kwargs)


def device(a):
    """`a.__dlpack_device__()`: host memory."""
    return (KDL_CPU, 0)


def host_array(obj, who):
    """`obj` (anything that speaks DLPack) as a numpy array on the host, viewed where it is host memory."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        from .torch_bridge import host_array as torch_host   # dtype, device and requires_grad checks
        return torch_host(obj, who)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(obj, jax.Array):
        from .jax_bridge import host_array as jax_host
        return jax_host(obj, who)
    if not hasattr(obj, "__dlpack__"):
        raise ArgumentError(f"{who}: expected an object with __dlpack__ (a tensor or array), got {type(obj).__name__}")
    try:
        return np.from_dlpack(obj)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        try:   # memory the host cannot read: ask the producer for a host copy (DLPack 1.0's dl_device)
            return np.from_dlpack(obj, device="cpu", copy=True)
        except (BufferError, RuntimeError, TypeError, ValueError):
            raise ArgumentError(f"{who}: cannot read the {type(obj).__name__} on the host through DLPack "
                                f"({exc})") from None


def from_dlpack(obj, needs_grad=False):
    """A new ndarray holding a copy of `obj`'s values (from_numpy's dtype rules)."""
    who = "sp.from_dlpack"
    return host.to_ndarray(host_array(obj, who), needs_grad, who)

"""PyTorch tensors to and from ndarrays. Both directions copy (a tensor and an ndarray never share memory;
DLPack is the zero-copy path); a tensor on a CUDA/MPS device is copied through the host."""

from ..errors import ArgumentError
from . import host

# torch dtypes whose values numpy holds and from_numpy takes (integers of other widths become i32)
CROSSING = {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"}
HINTS = {"float16": "t.float()", "bfloat16": "t.float()", "complex64": "t.real and t.imag",
         "complex128": "t.real and t.imag"}

def torch():
    import torch as module   # imported on first use: spvad imports without torch
    return module

def host_array(t, who):
    """The values of tensor `t` as a numpy array on the host: a view of a CPU tensor's memory, else a copy.
    Refuses what spvad cannot hold before anything is allocated."""
    th = torch()
    if not isinstance(t, th.Tensor):
        raise ArgumentError(f"{who}: expected a torch.Tensor, got {type(t).__name__}")
    name = str(t.dtype).removeprefix("torch.")
    if name not in CROSSING:
        hint = f"; convert it with {HINTS[name]}" if name in HINTS else ""
        raise ArgumentError(f"{who}: a torch.{name} tensor cannot cross to spvad (its arrays hold {host.SUPPORTED})"
                            f"{hint}")
    if t.layout != th.strided:
        raise ArgumentError(f"{who}: a {t.layout} tensor cannot cross to spvad; pass t.to_dense()")
    if t.device.type == "meta":
        raise ArgumentError(f"{who}: a tensor on the meta device has no values")
    t = t.detach()
    if t.device.type != "cpu":   # CUDA, MPS, XPU, ...: one copy to the host (waits for torch's stream)
        t = t.cpu()
    return t.resolve_conj().resolve_neg().numpy()

def from_torch(t, needs_grad=None):
    """A new ndarray with t's values, dtype and shape (as from_numpy converts); needs_grad defaults to
    t.requires_grad."""
    who = "sp.from_torch"
    data = host_array(t, who)
    return host.to_ndarray(data, t.requires_grad if needs_grad is None else bool(needs_grad), who)

def to_torch(a):
    """`a.to_torch()`: a CPU tensor holding a copy of a's values (storage shape), after pending launches."""
    return torch().from_numpy(a.to_numpy())   # a fresh array: the tensor owns it

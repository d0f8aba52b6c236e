"""Bridges to PyTorch, JAX and DLPack (docs/interop.md): values crossing both ways, and Python functions that
launch kernels made differentiable torch or JAX functions. torch and jax are imported on first use only.

The top of the package: it may import ndarray, batch, tape, recording, runtime. What an ndarray hands to torch, JAX
and DLPack (to_torch, to_jax, __dlpack__) is registered here into ndarray.EXPORTS."""
from ..ndarray import EXPORTS
from . import dlpack, jax_bridge, torch_bridge
from .dlpack import from_dlpack
from .jax_bridge import from_jax
from .jax_function import jax_function
from .torch_bridge import from_torch
from .torch_function import torch_function

EXPORTS.update(to_torch=torch_bridge.to_torch, to_jax=jax_bridge.to_jax, dlpack=dlpack.export,
               dlpack_device=dlpack.device)

__all__ = ["from_dlpack", "from_jax", "from_torch", "jax_function", "torch_function"]

"""Bridges to PyTorch, JAX and DLPack (docs/interop.md): values crossing both ways, and Python functions that
launch kernels made differentiable torch or JAX functions. torch and jax are imported on first use only."""
from .dlpack import from_dlpack
from .jax_bridge import from_jax
from .jax_function import jax_function
from .torch_bridge import from_torch
from .torch_function import torch_function

__all__ = ["from_dlpack", "from_jax", "from_torch", "jax_function", "torch_function"]

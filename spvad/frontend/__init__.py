"""The frontend: Python source (a `@sp.kernel` / `@sp.func` body) to typed IR. It knows the IR and nothing below it."""
from .builder import build_kernel
from .values import ArraySpec, TemplateSpec, VectorArgSpec

__all__ = ["ArraySpec", "TemplateSpec", "VectorArgSpec", "build_kernel"]

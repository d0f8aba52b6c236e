"""The frontend: Python source (a `@sp.kernel` / `@sp.func` body) to typed IR: one AST visitor and the tables of
what kernels may call (sp.* functions, methods of vectors and matrices, Python's math, builtins).

May import: ir, types, errors. Never a transform, target or device (autodiff, spirv, rhi, launch, runtime)."""
from .builder import build_kernel
from .values import ArraySpec, TemplateSpec, VectorArgSpec

__all__ = ["ArraySpec", "TemplateSpec", "VectorArgSpec", "build_kernel"]

"""`sp.vmap`: a kernel batched over a leading axis, B instances in one launch (the IR transform is
ir/batching.py; the compile mode carrying in_axes is pipeline.Mode.batch).

May import: kernel.py and everything below it. Never imports tape/ or interop/ (they reach a batched kernel
as they reach any kernel)."""
from .batched_kernel import BatchedKernel, vmap

__all__ = ["BatchedKernel", "vmap"]

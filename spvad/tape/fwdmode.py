"""`sp.FwdMode`: kernels launched inside the block run in forward mode (their `.fwd`), in the thread that
opened the block."""
import numpy as np

from .. import recording, runtime
from ..errors import ArgumentError
from ..ndarray import Ndarray

def active():
    """The innermost FwdMode block of this thread, or None."""
    blocks = recording.modes.fwd
    return blocks[-1] if blocks else None


class FwdMode:
    """`with sp.FwdMode(loss=y, param=x, seed=[...]):` kernels launched inside run in forward mode;
    afterwards `y.dual` holds the derivative of y along `seed` (default: all ones for a scalar x).
    `clear_gradients=True` (the default, as Quadrants) zeroes every `.dual` the block sees on entry, so a
    second block over the same arrays gives the same tangent; False keeps (accumulates onto) them. The seed
    is cleared on exit: `param.dual` is zero afterwards (unless param is loss itself)."""

    def __init__(self, loss, param, seed=None, clear_gradients=True):
        for name, a in (("loss", loss), ("param", param)):
            if not getattr(a, "_spvad_ndarray", False):
                raise ArgumentError(f"FwdMode({name}=...) needs an sp.ndarray, got {type(a).__name__}")
            if a.dual is None:
                raise ArgumentError(f"FwdMode: the {name} ndarray needs needs_dual=True")
        if seed is None:
            if param.size != 1:
                raise ArgumentError(f"FwdMode: param has {param.size} elements; pass seed=[...] of that length")
            seed = [1.0]
        seed = np.asarray(seed, dtype=np.float64).reshape(-1)
        if seed.size != param.size:
            raise ArgumentError(f"FwdMode: seed has {seed.size} entries, param has {param.size} elements")
        self.loss, self.param, self.seed = loss, param, seed.reshape(param.storage_shape)
        self.clear_gradients = bool(clear_gradients)
        self.seen = {id(param)}
        self.temporary = []   # arrays given a .dual for this block only

    def give_dual(self, array, name, captured):
        """An array without .dual that receives values depending on differentiated inputs (an intermediate
        the user did not mark, an argument or a global ndarray) gets a temporary one, so the derivative flows
        through it."""
        array.dual = Ndarray(array.dtype, array.shape)
        self.temporary.append(array)

    def host_write(self, array, index):
        """`fill`, `from_numpy` or `a[i] = v` of `array` inside the block: the values written depend on no
        input, so the dual of what they overwrite becomes 0 (all of it, or the element at flat `index`)."""
        if id(array) not in self.seen:   # first seen here: all of its dual starts at 0, as prepare() does
            self.seen.add(id(array))
            index = None if self.clear_gradients else index
        array.dual.zero_on_device(index)

    def prepare(self, arrays):
        """An array first seen in this context starts with a zero dual (only `param` carries the seed)."""
        for a in arrays:
            if a.dual is not None and id(a) not in self.seen:
                self.seen.add(id(a))
                if self.clear_gradients:
                    a.dual.fill(0)

    def __enter__(self):
        if recording.stack():
            recording.refuse_nesting("sp.FwdMode", "sp.Tape")
        if self.clear_gradients:
            self.loss.dual.fill(0)
        self.param.dual.from_numpy(self.seed)   # after: loss may be param itself (an in-place update)
        recording.modes.fwd.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        recording.modes.fwd.remove(self)
        try:
            if exc_type is None:
                runtime.sync()
        finally:
            for a in self.temporary:
                a.dual = None
            if self.param is not self.loss:   # the seed is cleared on exit, as Quadrants does
                self.param.dual.fill(0)
        return False

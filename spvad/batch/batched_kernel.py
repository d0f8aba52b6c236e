"""`sp.vmap(kernel, in_axes)`: the kernel run for B instances in one launch of B * n threads.

A BatchedKernel is a Kernel whose compiles carry `in_axes` in their mode (pipeline.Mode.batch), so its
launches, `.grad`, `.fwd`, Tape and FwdMode recording are the kernel's own. Its specs are those of the batched
arguments: a batched ndarray's with the batch axis, a batched scalar's an ArraySpec of ndim 0 (its B values
are bound as a 1-D ndarray in the scalar's place among the arrays)."""
from dataclasses import replace

import numpy as np

from .. import arguments
from .. import types as T
from ..errors import ArgumentError
from ..frontend import ArraySpec
from ..kernel import Kernel
from ..lang import Array, Template
from ..ndarray import Ndarray
from ..pipeline import PRIMAL, Mode


def vmap(kernel, in_axes=0):
    """`kernel` batched: `in_axes` gives per parameter 0 (a leading batch axis: an ndarray of shape (B, ...),
    or B values of a scalar as a 1-D ndarray / numpy array / list) or None (shared by every instance); a
    single 0 batches every parameter."""
    if isinstance(kernel, BatchedKernel):
        raise ArgumentError(f"sp.vmap: {kernel.name} is already batched; batch the @sp.kernel once, over one "
                            "leading axis")
    if not isinstance(kernel, Kernel):
        raise ArgumentError(f"sp.vmap needs an @sp.kernel, got {type(kernel).__name__}")
    axes = _checked_axes(f"vmap({kernel.name})", kernel.params, in_axes)
    variants = kernel.__dict__.setdefault("batched_variants", {})   # one per in_axes: compiled once
    if axes not in variants:
        variants[axes] = BatchedKernel(kernel, axes)
    return variants[axes]


def _checked_axes(kname, params, in_axes):
    if in_axes == 0 and not isinstance(in_axes, bool):
        return (0,) * len(params)
    if not isinstance(in_axes, (tuple, list)):
        raise ArgumentError(f"sp.vmap({kname}): in_axes must be 0 or a tuple of 0 / None per parameter, got "
                            f"{in_axes!r}")
    if len(in_axes) != len(params):
        raise ArgumentError(f"sp.vmap({kname}): in_axes has {len(in_axes)} entries but the kernel takes "
                            f"{len(params)} parameters ({', '.join(n for n, _ in params)})")
    for (name, _), axis in zip(params, in_axes):
        if axis is not None and (axis != 0 or isinstance(axis, bool)):
            raise ArgumentError(f"sp.vmap({kname}): in_axes for '{name}' is {axis!r}; only 0 (a leading batch "
                                "axis) or None (shared) is supported")
    if all(axis is None for axis in in_axes):
        raise ArgumentError(f"sp.vmap({kname}): in_axes batches no parameter: give 0 for at least one")
    return tuple(in_axes)


def _scalar_annotation(ann):
    """Whether a parameter annotated `ann` takes a scalar (its batched values are one per instance)."""
    return ann is not None and ann is not Array and not isinstance(ann, Template) and not isinstance(
        ann, T.TENSOR_TYPES)


class BatchedKernel(Kernel):
    """The launches of B instances of `kernel` at once (sp.vmap). Call it, `.grad`, `.fwd`, record it in a
    Tape or FwdMode as the kernel itself."""

    def __init__(self, kernel, in_axes):
        super().__init__(kernel.fn, kernel.ad_stack_size, kernel.fast_math, kernel.native_math)
        self.kernel = kernel
        self.name = f"vmap({kernel.name})"
        self.in_axes = _checked_axes(self.name, self.params, in_axes)

    @property
    def no_grad(self):   # @sp.no_grad on the kernel (or on this) holds for its batched launches
        return getattr(self, "_no_grad", False) or getattr(self.kernel, "no_grad", False)

    @no_grad.setter
    def no_grad(self, value):
        self._no_grad = value

    def _compiled(self, specs, mode=PRIMAL, features=None, captured=None):
        mode = Mode(mode) if isinstance(mode, str) else mode
        return super()._compiled(specs, replace(mode, batch=self.in_axes), features, captured)

    def _bind(self, args):
        """arguments.bind for the batched arguments: every batched one has the same leading extent B; batched
        scalars' values become 1-D ndarrays bound among the arrays, their specs ArraySpecs of ndim 0."""
        if len(args) != len(self.params):
            raise ArgumentError(f"kernel {self.name} takes {len(self.params)} arguments "
                                f"({', '.join(n for n, _ in self.params)}), got {len(args)}")
        values, params, scalar_at, batch = list(args), list(self.params), [], None
        for k, ((name, ann), value, axis) in enumerate(zip(self.params, args, self.in_axes)):
            if axis is None:
                continue
            if isinstance(ann, T.TENSOR_TYPES) or isinstance(ann, Template):
                what = "a vector or matrix" if isinstance(ann, T.TENSOR_TYPES) else "an sp.template()"
                raise ArgumentError(f"kernel {self.name}: argument '{name}' has in_axes 0 but is {what} "
                                    "parameter, which sp.vmap does not batch: pass it with in_axes None (an "
                                    "ndarray of vectors, batched, can take its place)")
            is_ndarray = getattr(value, "_spvad_ndarray", False)
            if not _scalar_annotation(ann) and (is_ndarray or ann is not None):   # an array parameter
                if not is_ndarray:
                    raise ArgumentError(f"kernel {self.name}: argument '{name}' has in_axes 0: it needs an "
                                        f"sp.ndarray of shape (B, ...), got {type(value).__name__}")
                if value.ndim == 0:
                    raise ArgumentError(f"kernel {self.name}: argument '{name}' has in_axes 0 but is a 0-d "
                                        "ndarray: it has no batch axis (pass it with in_axes None)")
                extent = value.shape[0]
            else:
                values[k] = self._scalar_values(name, ann, value)
                params[k] = (name, Array)
                scalar_at.append(k)
                extent = values[k].shape[0]
            if batch is None:
                batch = (name, extent)
            elif extent != batch[1]:
                raise ArgumentError(f"kernel {self.name}: batch sizes differ: '{batch[0]}' has {batch[1]} "
                                    f"instances (leading axis) but '{name}' has {extent}")
        specs, arrays, scalars = arguments.bind(self.name, params, values)
        for k in scalar_at:
            specs[k] = ArraySpec(specs[k].dtype, 0)
        return specs, arrays, scalars

    def _scalar_values(self, name, ann, value):
        """The B values of a batched scalar parameter as a 1-D ndarray of its dtype."""
        if getattr(value, "_spvad_ndarray", False):
            want = ann if isinstance(ann, T.DType) else {float: T.f32, int: T.i32, bool: T.u1}.get(ann)
            if value.ndim != 1 or (want is not None and value.dtype != want):
                raise ArgumentError(f"kernel {self.name}: scalar argument '{name}' has in_axes 0: it needs a 1-D "
                                    f"ndarray of B values{f' of {want}' if want else ''}, got a {value.dtype} "
                                    f"ndarray of shape {value.shape}")
            if value.grad is not None or value.dual is not None:   # (never a derivative silently zero)
                raise ArgumentError(f"kernel {self.name}: scalar argument '{name}' has in_axes 0 and an ndarray with "
                                    "a .grad or .dual, but a scalar parameter carries no derivative; make it an "
                                    "sp.Array parameter to differentiate with respect to it")
            return value
        if isinstance(value, (int, float, bool, np.generic)) or (isinstance(value, np.ndarray) and value.ndim == 0):
            raise ArgumentError(f"kernel {self.name}: argument '{name}' has in_axes 0 but is a single number: "
                                "pass its B values (a 1-D array), or pass it with in_axes None")
        try:
            items = np.asarray(value)
        except Exception:
            items = None
        if items is None or items.ndim != 1 or items.dtype == object:
            raise ArgumentError(f"kernel {self.name}: scalar argument '{name}' has in_axes 0: it needs a 1-D "
                                f"array of B numbers, got {type(value).__name__}"
                                + (f" of shape {items.shape}" if items is not None else ""))
        dtypes = {arguments.scalar_dtype(self.name, name, ann, v) for v in items.tolist()}   # as one launch each
        if len(dtypes) > 1:
            raise ArgumentError(f"kernel {self.name}: the values of scalar argument '{name}' mix types "
                                f"({', '.join(sorted(d.name for d in dtypes))}); annotate its dtype")
        dtype = dtypes.pop() if dtypes else ann if isinstance(ann, T.DType) else T.f32
        return Ndarray(dtype, items.shape).from_numpy(items.astype(dtype.np))

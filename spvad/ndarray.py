"""`sp.ndarray`: a device array with optional `.grad` / `.dual` companions, and its numpy I/O."""
import itertools
import math
import weakref

import numpy as np

from . import recording, runtime
from . import types as T
from .errors import ArgumentError, DeviceError
from .rhi.host_scalars import HostScalars


MAX_ELEMENTS = 2**31 - 1
_serials = itertools.count(1)   # creation order: a Tape tells the arrays born inside its block
_with_grad = weakref.WeakSet()  # live ndarrays created with needs_grad (sp.clear_all_gradients)
# How an ndarray crosses to torch, JAX and DLPack: filled by spvad/interop (above this module, so it registers
# its functions here instead of being imported): to_torch, to_jax, dlpack, dlpack_device.
EXPORTS = {}


def _normalize_shape(shape):
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    if isinstance(shape, (str, bytes)) or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in _iterable(shape)):
        raise ArgumentError(f"shape must be an int or a tuple of ints, got {shape!r}")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ArgumentError(f"shape must not be negative, got {shape}")
    return shape


def _iterable(shape):
    try:
        return list(shape)
    except TypeError:
        return [shape, None]   # not iterable: fails the int check


def _check_dtype(dtype):
    if isinstance(dtype, (T.DType,) + T.TENSOR_TYPES):
        return dtype
    if isinstance(dtype, str):
        raise ArgumentError(f"dtype must be an spvad dtype such as sp.f32, got the string {dtype!r}")
    dt = T.from_numpy_dtype(dtype) if not isinstance(dtype, type) or issubclass(dtype, np.generic) else None
    if dtype is float:
        dt = T.f32
    elif dtype is int:
        dt = T.i32
    elif dtype is bool:
        dt = T.u1
    if dt is None:
        raise ArgumentError(f"unsupported dtype {dtype!r}; use sp.f32, sp.f64, sp.i32, sp.u32 or sp.u1")
    return dt


def _as_numbers(data, where):
    """`data` as a numpy array, for `where` (the call): ragged nested lists and data numpy can only keep as
    Python objects (dtype=object: None, strings among numbers, ints past 64 bits) are ArgumentErrors."""
    try:
        arr = np.asarray(data)
    except ValueError as e:   # numpy 2 refuses ragged lists ("inhomogeneous shape")
        ragged = _ragged(data) or ("inhomogeneous" in str(e) and str(e))
        if not ragged:
            raise ArgumentError(f"{where}: numpy cannot make an array of the data: {e}") from e
        arr = None
    else:
        ragged = arr.dtype == object and _ragged(data)   # older numpy made ragged lists dtype=object arrays
    if ragged:
        raise ArgumentError(f"{where}: the data is ragged (rows of different lengths: {ragged}); an ndarray "
                            "needs rectangular data, e.g. pad the rows to one length") from None
    if arr.dtype == object:
        bad = next((f"data{list(i)} is {v!r}" for i, v in zip(np.ndindex(arr.shape), arr.flat)
                    if not isinstance(v, (int, float, np.number, np.bool_))),
                   "numbers no numpy dtype holds, e.g. ints past 64 bits")
        raise ArgumentError(f"{where}: the data holds values numpy keeps as Python objects (dtype=object; {bad}); "
                            "pass numbers or bools only")
    return arr


def _ragged(data):
    """Where nested lists (tuples, numpy arrays) first differ in length, level by level, as text; None if
    they never do."""
    def is_row(x):
        return isinstance(x, (list, tuple)) or isinstance(x, np.ndarray) and x.ndim > 0
    level = [("", data)]
    while level and is_row(level[0][1]):
        first = level[0]
        for path, x in level:
            if not is_row(x):
                return f"data{first[0]} is a row of {len(first[1])} but data{path} is the single value {x!r}"
            if len(x) != len(first[1]):
                return f"data{first[0]} has {len(first[1])} entries but data{path} has {len(x)}"
        level = [(f"{path}[{i}]", v) for path, x in level for i, v in enumerate(x)]
    rows = [path for path, x in level if is_row(x)]
    return f"data{rows[0]} is a row but data{level[0][0]} is a single value" if rows else None


class Ndarray:
    """A contiguous device array. Host access (to_numpy, from_numpy, fill, [] get/set) synchronises first.

    An ndarray of vectors (`sp.ndarray(sp.vec3, (n,))`) has `shape` (n,) and stores (n, 3) scalars:
    numpy I/O uses that `storage_shape`, and `a[i]` is a numpy vector; an ndarray of matrices
    (`sp.ndarray(sp.mat3, (n,))`) likewise stores (n, 3, 3) scalars and `a[i]` is a (3, 3) numpy array.

    `version` counts the writes that may have changed the contents (launches that can store into the
    array, host writes): a Tape compares versions to know which contents a gradient needs back.

    `pickle`, `copy.copy` and `copy.deepcopy` go by value, after pending launches: the dtype (vector and
    matrix ones too), shape and values, and the `.grad` / `.dual` companions with their values (torch keeps
    only requires_grad; here a checkpoint mid-training keeps the gradients it accumulated). Unpickling or
    copying makes a new, independent ndarray on the current runtime (in a fresh process the default one)."""
    _spvad_ndarray = True
    version = 0

    def __init__(self, dtype, shape, needs_grad=False, needs_dual=False):
        self.dtype = _check_dtype(dtype)
        self.shape = _normalize_shape(shape)
        self.element_shape = T.element_shape(self.dtype)   # () | (n,) | (n, m)
        self.width = T.vector_width(self.dtype)            # scalars per element (0 for scalar dtypes)
        self.element_dtype = T.element_dtype(self.dtype)
        self.size = math.prod(self.storage_shape)   # scalars stored (1 for a 0-d array)
        if self.size > MAX_ELEMENTS:   # kernels index with 32-bit integers
            raise ArgumentError(f"shape {self.shape} holds {self.size:,} scalars; an ndarray holds at most "
                                f"2**31 - 1 = {MAX_ELEMENTS:,}")
        if (needs_grad or needs_dual) and not self.element_dtype.is_float:
            flag = "needs_grad" if needs_grad else "needs_dual"
            raise ArgumentError(f"{flag}=True on a {self.dtype} ndarray: integer and bool values carry no "
                                "derivative; only float arrays (f32, f64 and their vectors) take one")
        self._np_dtype = T.storage_np_dtype(self.element_dtype)
        with runtime.LOCK:
            rt = runtime.get()
            if self.element_dtype == T.f64 and not rt.device.info["features"].get("float64"):
                raise DeviceError(f"device '{rt.device.info['name']}' has no float64 support")
            self._runtime = rt
            self.buffer = rt.device.create_buffer(max(self.size, 1) * self._np_dtype.itemsize)
        self.grad = Ndarray(self.dtype, self.shape) if needs_grad else None
        self.dual = Ndarray(self.dtype, self.shape) if needs_dual else None
        self.serial = next(_serials)
        if needs_grad:
            with runtime.LOCK:   # (clear_all_gradients iterates it under the lock)
                _with_grad.add(self)

    def __del__(self):
        # free the device memory with the array (a pending launch keeps it alive until the next sync)
        buf = getattr(self, "buffer", None)
        if buf is not None and self._runtime is runtime.current():
            with runtime.LOCK:
                buf.release()

    @property
    def storage_shape(self):
        """The shape kernels index and numpy I/O uses: `shape`, plus trailing axes for vector / matrix dtypes."""
        return self.shape + self.element_shape

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def needs_grad(self):
        return self.grad is not None

    @property
    def needs_dual(self):
        return self.dual is not None

    def __repr__(self):
        return f"sp.ndarray({self.dtype}, shape={self.shape}{', needs_grad' if self.grad else ''})"

    def scratch(self, kind):
        """A device array shaped like this one's storage that derivative kernels use as scratch (left
        zeroed): "ties" counts atomic max/min winners (i32), "tangents" sums their tangents."""
        arrays = self.__dict__.setdefault("_scratch", {})
        if kind not in arrays:
            arrays[kind] = Ndarray(T.i32 if kind == "ties" else self.element_dtype, self.storage_shape)
        return arrays[kind]

    def buffer_for(self, field):
        """The buffer a kernel binding of `field` reads: "final" (what a launch left) is the array's own."""
        return self.buffer if field in ("primal", "final") else getattr(self, field).buffer

    # ---- host access ----
    def _synced(self):
        rt = self._runtime
        if rt is not runtime.current():
            if rt.forked:
                raise DeviceError("this ndarray was created by the parent process before os.fork(): a forked "
                                  "child has a runtime of its own and cannot reach the parent's device; create "
                                  "the array in the child (from values read with to_numpy() before the fork)")
            raise DeviceError("this ndarray belongs to a runtime that was reset; create it again")
        runtime.refuse_inside_capture(rt, "reading an ndarray on the host (to_numpy(), a[i], an export)")
        rt.sync()

    def _view(self):
        """One zero-copy view of the scalars (after a sync); DeviceError for an array in several memory blocks."""
        self._synced()
        return self.buffer.view(self._np_dtype)[: self.size]

    def _host(self):
        """The scalars on the host (after a sync), whether the buffer is one piece of memory or several."""
        self._synced()
        return HostScalars(self.buffer.pieces(self._np_dtype), self.size)

    def to_numpy(self):
        with runtime.LOCK:
            out = self._host().read()
        if self.element_dtype.is_bool:
            out = out != 0
        return out.reshape(self.storage_shape)

    def _host_write(self, what, index=None, zero=False):
        """Called before a host write (`zero`: of zero bits only): the recording Tape may keep the old contents
        first; inside sp.FwdMode the written values become constants, so their dual is zeroed."""
        tape = recording.current()
        if tape is not None:
            tape.host_write(self, what, index, zero)
        fwd = recording.modes.fwd
        if fwd and self.dual is not None:
            fwd[-1].host_write(self, index)
        self.version += 1

    def zero_on_device(self, element=None, host_write=False):
        """Zero all of the array, or one element (a flat index; every component of it), on the device in
        launch order, and bump the version: what a Tape's and a FwdMode's gradients start from. With
        `host_write`, the recording Tape (and FwdMode) see it as they see `fill(0)`."""
        if host_write:
            self._host_write("fill" if element is None else "setitem", element, zero=True)   # bumps the version
        else:
            self.version += 1
        self._runtime.device.fill_buffers(self._fills(0, element))

    def _fills(self, value, element=None):
        """The device fills (rows of Device.fill_buffers) setting all scalars, or those of one flat element, to
        `value`: one fill when the value's 32-bit words are equal (any f32, a zero), else one per word of
        a single scalar (f64 1.0, a loss's seed)."""
        item, width = self._np_dtype.itemsize, max(self.width, 1)
        first, count = (0, self.size) if element is None else (element * width, width)
        words = [0] if value == 0 else np.asarray(value, self._np_dtype).reshape(1).view(np.uint32).tolist()
        if len(set(words)) == 1:
            return [(self.buffer, first * item, count * item, words[0])]
        assert count == 1, "a value of distinct 32-bit words fills a single scalar"
        return [(self.buffer, first * item + 4 * k, 4, w) for k, w in enumerate(words)]

    def from_numpy(self, arr):
        arr = _as_numbers(arr, "ndarray.from_numpy")
        if arr.shape != self.storage_shape:
            what = f"{self.storage_shape} (shape {self.shape} of {self.dtype})" if self.width else f"{self.shape}"
            raise ArgumentError(f"from_numpy: shape {arr.shape} does not match the ndarray's {what}")
        dt = self.element_dtype
        if np.iscomplexobj(arr):
            raise ArgumentError(f"from_numpy: cannot store complex ({arr.dtype}) data in a {self.dtype} ndarray "
                                "without dropping the imaginary parts; pass .real (or .imag) explicitly")
        if arr.dtype.kind not in "biuf":   # strings, dates: no numbers (a u1 array took their truthiness)
            raise ArgumentError(f"from_numpy: cannot store {arr.dtype} data in a {self.dtype} ndarray; pass "
                                "numbers or bools")
        if dt.is_int and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
            raise ArgumentError(f"from_numpy: cannot store {arr.dtype} data in a {self.dtype} ndarray "
                                "without losing the fraction; cast it first")
        if dt.is_int and arr.size and not (T.fits(arr.min(), dt) and T.fits(arr.max(), dt)):
            raise ArgumentError(f"from_numpy: values in [{arr.min()}, {arr.max()}] do not fit in {self.dtype}")
        with np.errstate(over="ignore"):   # no copy when the dtype already matches (160 MB arrays and more)
            data = arr.reshape(-1).astype(self._np_dtype if not dt.is_bool else bool, copy=False)
        if dt.is_float and data.size and arr.dtype.kind == "f" and arr.dtype.itemsize > data.dtype.itemsize:
            # only a narrower float can overflow (any integer fits f32's range)
            overflow = np.isinf(data) & np.isfinite(arr.reshape(-1))
            if overflow.any():
                bad = arr.reshape(-1)[overflow][0]
                raise ArgumentError(f"from_numpy: {bad!r} is out of range for a {self.dtype} ndarray (it would "
                                    "become inf); scale the data or use sp.f64")
        with runtime.LOCK:
            runtime.refuse_inside_capture(self._runtime, "ndarray.from_numpy(...)")
            self._host_write("from_numpy")
            self._host().write(0, data)
        return self

    def _checked_scalar(self, value):
        if not isinstance(value, (bool, int, float, np.generic)) or not T.fits(value, self.element_dtype):
            raise ArgumentError(f"{value!r} cannot be stored in a {self.dtype} ndarray")
        return value

    def _checked_value(self, value):
        """A scalar, or for vector / matrix ndarrays also an array of one element's shape."""
        if self.width and not isinstance(value, (bool, int, float, np.generic)):
            comps = T.numeric_components(value, self.element_shape)
            if comps is None:
                raise ArgumentError(f"{value!r} cannot be stored in a {self.dtype} ndarray (expected a scalar "
                                    f"or an array of shape {self.element_shape})")
            return np.array([self._checked_scalar(v) for v in comps], dtype=self._np_dtype)
        return self._checked_scalar(value)

    def fill(self, value):
        value = self._checked_value(value)
        with runtime.LOCK:
            runtime.refuse_inside_capture(self._runtime, "ndarray.fill(...)")
            self._host_write("fill", zero=not np.asarray(value, self._np_dtype).reshape(-1).view(np.uint8).any())
            self._host().fill(value, self.width)
        return self

    def _flat_index(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if key == (None,) or key == ():
            key = ()
        if any(isinstance(k, (bool, np.bool_)) for k in key):   # not 1 / 0: numpy reads a bool index as a mask
            raise ArgumentError(f"index {key!r}: indices must be integers, not bools (numpy's bool index is a "
                                "mask, which ndarrays do not offer)")
        if len(key) != self.ndim:
            raise ArgumentError(f"index {key!r} has {len(key)} entries for a {self.ndim}-d ndarray")
        flat = 0
        for k, n in zip(key, self.shape):
            if not isinstance(k, (int, np.integer)) or not -n <= k < n:
                raise ArgumentError(f"index {key!r} out of range for shape {self.shape}")
            flat = flat * n + (int(k) % n)
        return flat

    def __getitem__(self, key):
        i, width = self._flat_index(key), max(self.width, 1)
        with runtime.LOCK:
            v = self._host().read(i * width, (i + 1) * width)
            if self.width:
                return v.reshape(self.element_shape)
            return bool(v[0]) if self.dtype.is_bool else v[0].item()

    def __setitem__(self, key, value):
        i, width = self._flat_index(key), max(self.width, 1)
        value = self._checked_value(value)
        with runtime.LOCK:
            runtime.refuse_inside_capture(self._runtime, "a[...] = value")
            self._host_write("setitem", i)
            self._host().write(i * width, np.broadcast_to(np.asarray(value, self._np_dtype), (width,)))

    def copy_from(self, src):
        """Copy the values of `src` (same dtype and shape) into this array, on the device in launch order. A
        Tape records it like a launch (the gradient flows from this array into src); inside sp.FwdMode the
        `.dual` is copied too."""
        if not getattr(src, "_spvad_ndarray", False) or (src.dtype, src.shape) != (self.dtype, self.shape):
            what = f"{src.dtype} ndarray of shape {src.shape}" if getattr(src, "_spvad_ndarray", False) \
                else type(src).__name__
            raise ArgumentError(f"copy_from: needs an ndarray of {self.dtype} and shape {self.shape}, got {what}")
        if src is self:
            return self
        if src._runtime is not self._runtime:
            raise DeviceError("copy_from: the two ndarrays belong to different runtimes")
        with runtime.LOCK:
            tape, fwd, device = recording.current(), recording.modes.fwd, self._runtime.device
            nbytes = max(self.size, 1) * self._np_dtype.itemsize
            if tape is not None:
                tape.copy_write(self, src)
            if fwd and (self.dual is not None or src.dual is not None):
                if self.dual is None:   # the derivative flows through the copy
                    fwd[-1].give_dual(self, "", False)
                fwd[-1].prepare([self, src])
                if src.dual is None:
                    self.dual.zero_on_device()
                else:
                    device.copy_buffer(src.dual.buffer, self.dual.buffer, nbytes)
            self.version += 1
            device.copy_buffer(src.buffer, self.buffer, nbytes)
        return self

    def clone(self):
        """A new ndarray with this one's values (and a .grad / .dual when this one has them); a Tape records
        the copy (gradients flow back into this array)."""
        return Ndarray(self.dtype, self.shape, needs_grad=self.grad is not None,
                       needs_dual=self.dual is not None).copy_from(self)

    # ---- pickle and copy: by value, into a new array (see the class docstring) ----
    def __reduce__(self):
        with runtime.LOCK:   # one consistent state: no launch of another thread between the reads
            companions = [c.to_numpy() if c is not None else None for c in (self.grad, self.dual)]
            return _rebuild, (_dtype_key(self.dtype), self.to_numpy(), *companions)

    def __copy__(self):
        # as numpy's copy.copy: new memory, so a write to the copy never reaches the original
        rebuild, args = self.__reduce__()
        return rebuild(*args)

    def __deepcopy__(self, memo):
        return self.__copy__()   # (the default would copy the numpy values once more)

    # ---- other frameworks (spvad/interop registers them in EXPORTS; docs/interop.md) ----
    def to_torch(self):
        """A CPU torch.Tensor holding a copy of the values (storage shape), after pending launches."""
        return EXPORTS["to_torch"](self)

    def to_jax(self):
        """A jax.Array holding a copy of the values (storage shape), after pending launches."""
        return EXPORTS["to_jax"](self)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export without a copy: a view of the array's memory (see docs/interop.md on aliasing)."""
        return EXPORTS["dlpack"](self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        return EXPORTS["dlpack_device"](self)


def _dtype_key(dtype):
    """A pickle's spelling of a dtype: the scalar's name and the element shape (plain data, so a pickle names
    no spvad class but the function that rebuilds the array)."""
    return T.element_dtype(dtype).name, T.element_shape(dtype)


def _rebuild(dtype_key, data, grad=None, dual=None):
    """An unpickled (or copied) ndarray: a new array on the current runtime holding `data`, with a `.grad`
    (`.dual`) holding `grad` (`dual`) when that is not None."""
    name, element_shape = dtype_key
    scalar = next((d for d in T.ALL if d.name == name), None)
    if scalar is None or len(element_shape) > 2:
        raise ArgumentError(f"unpickling an ndarray: unknown dtype {dtype_key!r} (pickled by another spvad?)")
    dtype = T.Vector(*element_shape, scalar) if len(element_shape) == 1 else \
        T.Matrix(*element_shape, scalar) if element_shape else scalar
    a = from_numpy(data, needs_grad=grad is not None, needs_dual=dual is not None, dtype=dtype)
    for companion, values in ((a.grad, grad), (a.dual, dual)):
        if values is not None:
            companion.from_numpy(values)
    return a


def set_on_device(values):
    """Set every scalar of each (ndarray, value) pair to its value, on the device in launch order as one
    transfer (nothing waits for queued launches), and bump the versions: a Tape's gradient clears and its
    seed of loss.grad (a non-zero f64 value for a single-scalar array only)."""
    bump_set(values)
    fills = fills_of(values)
    if fills:
        values[0][0]._runtime.device.fill_buffers(fills)


def fills_of(values):
    """The device fills (rows of Device.fill_buffers) of set_on_device(values)."""
    return [fill for array, value in values for fill in array._fills(value)]


def bump_set(values):
    """The versions set_on_device(values) bumps (a Tape's batch records its fills once: tape/planned_backward.py)."""
    for array, _ in values:
        array.version += 1


def next_serial():
    """A number below the serial of every ndarray created after this call."""
    return next(_serials)


def live_with_grad():
    """The ndarrays of the current runtime, created with needs_grad, that are still alive (call it holding
    runtime.LOCK)."""
    rt = runtime.current()
    return [a for a in list(_with_grad) if a._runtime is rt]


def copy(dst, src):
    """`sp.copy(dst, src)`: dst.copy_from(src) (recorded by a Tape)."""
    return dst.copy_from(src)


def ndarray(dtype, shape, needs_grad=False, needs_dual=False):
    return Ndarray(dtype, shape, needs_grad, needs_dual)


def from_numpy(arr, needs_grad=False, needs_dual=False, dtype=None):
    """A new ndarray holding a copy of `arr`; float64 data gives f64 (only when the device has it).

    `dtype` picks the dtype instead; a vector (matrix) dtype takes `arr`'s last axis (two axes) as the
    components."""
    arr = _as_numbers(arr, "sp.from_numpy")
    if dtype is not None:
        dtype = _check_dtype(dtype)
        elem = T.element_shape(dtype)
        if arr.shape[arr.ndim - len(elem):] != elem or arr.ndim < len(elem):
            want = f"last axis has length {elem[0]}" if len(elem) == 1 else f"last two axes are {elem}"
            raise ArgumentError(f"from_numpy: a {dtype} ndarray needs data whose {want}, got shape {arr.shape}")
        return Ndarray(dtype, arr.shape[:arr.ndim - len(elem)], needs_grad, needs_dual).from_numpy(arr)
    dt = T.from_numpy_dtype(arr.dtype)
    if dt is None and np.issubdtype(arr.dtype, np.integer):
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise ArgumentError(f"from_numpy: {arr.dtype} values do not fit in i32")
        dt = T.i32
    if dt is None:
        raise ArgumentError(f"from_numpy: unsupported dtype {arr.dtype}")
    return Ndarray(dt, arr.shape, needs_grad, needs_dual).from_numpy(arr)

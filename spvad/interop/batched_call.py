"""`jax.vmap` of an `@sp.jax_function`: the function's launches for B elements at once. The function runs once,
on the first element, while a LaunchLog notes its launches and host writes; then the same sequence runs once
more with every launch batched by sp.vmap, each array it made or was given replaced by a batched twin of
shape (B, ...). As under jax.jit, the function's Python must not depend on array values (it is run for one
element only); a sequence that cannot be batched (a shared array stored into, a batched kernel launched
inside) is run element by element instead (NotBatchable)."""
import numpy as np

from .. import recording
from ..batch import vmap
from ..errors import SpvadError
from ..frontend import ArraySpec, TemplateSpec, VectorArgSpec
from ..ndarray import Ndarray, next_serial


class NotBatchable(SpvadError):
    """The recorded launch sequence has no batched form: the caller runs it element by element (never reaches
    the user)."""


class LaunchLog:
    """Stands on the recording stack as a Tape would, while the function runs for the first element: notes
    each launch (kernel, arguments) and what the host wrote, in order. Nothing is recorded for derivatives."""
    validation = inside_custom = False

    def __init__(self):
        self.steps = []        # ("launch", kernel, args) | ("copy", dst, src) | ("set", array, None (all of
        #                        it) or flat element indices, the values written there)
        self.written = {}      # id -> (array, None for all of it | set of flat indices) since its last use

    def before_launch(self, kernel, specs, arrays, captured, scalars, ck, replay=None):
        if getattr(kernel, "in_axes", None) is not None:
            raise NotBatchable("a batched kernel launched inside the function")
        self._flush(arrays + captured)
        self.steps.append(("launch", kernel, call_arguments(kernel, specs, arrays, scalars)))
        return None

    def host_write(self, array, what, index, zero=False):
        _, seen = self.written.get(id(array), (array, set()))
        if what == "setitem" and index is not None and seen is not None:
            seen.add(index)
        else:
            seen = None
        self.written[id(array)] = (array, seen)

    def stop_plans(self):   # (a @sp.grad_replaced function asks the recording Tape this first)
        raise NotBatchable("a @sp.grad_replaced function inside the function")

    def copy_write(self, dst, src):
        self._flush([src, dst])
        self.steps.append(("copy", dst, src))

    def _flush(self, arrays):
        """What the host wrote into `arrays` since they were last used, as it is now (after the writes)."""
        for a in arrays:
            array, where = self.written.pop(id(a), (None, None))
            if array is None:
                continue
            values = array.to_numpy()
            if where is None:
                self.steps.append(("set", array, None, values))
            else:
                flat = values.reshape(max(array.size // max(array.width, 1), 1), -1)
                self.steps.append(("set", array, sorted(where), flat[sorted(where)]))

    def finish(self, outputs):
        self._flush(list(outputs))


def call_arguments(kernel, specs, arrays, scalars):
    """The positional arguments of a launch, rebuilt from what it bound (arrays, then scalars by component)."""
    arrays, scalars, args = iter(arrays), iter(scalars), []
    for spec in specs:
        if isinstance(spec, ArraySpec):
            args.append(next(arrays))
        elif isinstance(spec, TemplateSpec):
            args.append(spec.value)
        elif isinstance(spec, VectorArgSpec):
            args.append(tuple(next(scalars) for _ in range(int(np.prod(spec.dtype.shape)))))
        else:
            args.append(next(scalars))
    return args


def record_first(fn, args, kwargs):
    """Run `fn` (the first element's arguments) with a LaunchLog on the recording stack: (outputs, log)."""
    log, stack, first = LaunchLog(), recording.stack(), next_serial()
    stack.append(log)
    try:
        result = fn(*args, **kwargs)
    finally:
        stack.remove(log)
    log.first_serial = first
    return result, log


def replay_batched(log, outputs, inputs, batched_inputs, size):
    """The log's launches once, batched over `size` elements: `inputs` (the first element's ndarrays) stand
    for `batched_inputs` (their (B, ...) twins); every other ndarray the function made gets a zeroed (B, ...)
    twin; the rest are shared. Returns the outputs' twins."""
    twins = {id(a): b for a, b in zip(inputs, batched_inputs)}

    def twin(a):
        if id(a) not in twins:
            made = a.serial > log.first_serial
            twins[id(a)] = Ndarray(a.dtype, (size, *a.shape), needs_grad=a.grad is not None) if made else a
        return twins[id(a)]

    for step in log.steps:
        if step[0] == "launch":
            _, kernel, args = step
            batched = [twin(a) if getattr(a, "_spvad_ndarray", False) else a for a in args]
            axes = tuple(None if b is a else 0 for a, b in zip(args, batched))
            if all(axis is None for axis in axes):   # (touches no array of the elements: it runs once)
                kernel(*batched)
                continue
            try:
                vmap(kernel, axes)(*batched)
            except SpvadError as e:
                raise NotBatchable(str(e)) from None
        elif step[0] == "copy":
            dst, src = twin(step[1]), twin(step[2])
            if (dst.shape, dst.dtype) != (src.shape, src.dtype):
                raise NotBatchable("a copy between an array of the elements and a shared one")
            dst.copy_from(src)
        else:
            _, array, where, values = step
            dst = twin(array)
            if dst is array:
                continue   # a shared array: the first element's run wrote it already
            _set_every_element(dst, where, values, size)
    out = [twin(a) for a in outputs]
    if any(o is a for o, a in zip(out, outputs)):
        raise NotBatchable("the function returned an array it did not make nor was given")
    return out


def _set_every_element(dst, where, values, size):
    if where is None:
        dst.from_numpy(np.broadcast_to(values, (size, *values.shape)))
        return
    flat = dst.to_numpy().reshape(size, -1, values.shape[-1])
    flat[:, where] = values
    dst.from_numpy(flat.reshape(dst.storage_shape))

"""`@sp.jax_function`: a Python function that launches kernels, as a jax.custom_vjp function whose forward
and backward are host callbacks (jax.pure_callback), so it works under jax.jit, jax.grad,
jax.value_and_grad and jax.vmap (its launches batched by sp.vmap: batched_call.py). Array arguments (jax or
numpy) arrive as new ndarrays, others as they are. The backward runs the function again under a recording Tape, seeds
its outputs' .grad with the cotangents and runs the gradients: callbacks keep no state between them, as
JAX may run, repeat or drop a pure callback."""
import functools
from collections import OrderedDict

import numpy as np

from ..errors import ArgumentError
from . import host
from .batched_call import NotBatchable, record_first, replay_batched
from .jax_bridge import check_representable, jax
from .recorded import RecordedCall, check_outputs

STATIC_KEY_TYPES = (int, bool, str, type(None))   # static arguments that may decide the outputs' shapes


def _static_key(value):
    if isinstance(value, STATIC_KEY_TYPES):
        return value
    if isinstance(value, tuple):
        return tuple(_static_key(v) for v in value)
    return type(value).__name__   # floats, ndarrays, ...: shapes are checked at every call anyway


class JaxFunction:
    SHAPES_KEPT = 64

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.who = f"sp.jax_function {getattr(fn, '__qualname__', fn)}"
        self.shapes = OrderedDict()   # signature -> (output ShapeDtypeStructs, returned a single ndarray)

    def __call__(self, *args, **kwargs):
        jx = jax()
        slots = [i for i, a in enumerate(args) if isinstance(a, (jx.Array, np.ndarray))]
        slots += [k for k, a in kwargs.items() if isinstance(a, (jx.Array, np.ndarray))]
        call = Call(self, args, kwargs, slots)
        xs = [jx.numpy.asarray(call.get(s)) for s in slots]
        call.element_shapes = [tuple(x.shape) for x in xs]   # one element's: under jax.vmap the callbacks get more axes
        specs, single = self.output_specs(call, xs)
        outputs = call.custom_vjp(specs)(*xs)
        return outputs[0] if single else outputs

    def output_specs(self, call, xs):
        """The outputs' shapes and dtypes for these arguments: learnt by running the function once per new
        signature, on the values when they are known, else (under jax.jit) on zeros."""
        jx = jax()
        key = (call.static_key(), tuple((x.shape, x.dtype.name) for x in xs))
        if key not in self.shapes:
            values = [np.zeros(x.shape, x.dtype) if isinstance(x, jx.core.Tracer) else np.asarray(x) for x in xs]
            recorded = RecordedCall(self.fn, self.who)
            outputs = recorded.run(*call.with_arrays(values, [False] * len(values)), record=False)
            dtypes = [host.host_dtype(out) for out in outputs]
            for dt in dtypes:
                check_representable(dt, self.who)
            specs = tuple(jx.ShapeDtypeStruct(out.storage_shape, dt) for out, dt in zip(outputs, dtypes))
            self.shapes[key] = (specs, recorded.single)
            if len(self.shapes) > self.SHAPES_KEPT:
                self.shapes.popitem(last=False)
        self.shapes.move_to_end(key)
        return self.shapes[key]


class Call:
    """One call: where the arrays sit among the arguments, and the callbacks that run the function."""

    def __init__(self, function, args, kwargs, slots):
        self.function, self.args, self.kwargs, self.slots = function, list(args), dict(kwargs), slots

    def get(self, slot):
        return self.kwargs[slot] if isinstance(slot, str) else self.args[slot]

    def static_key(self):
        return (tuple((i, _static_key(a)) for i, a in enumerate(self.args) if i not in self.slots),
                tuple((k, _static_key(a)) for k, a in sorted(self.kwargs.items()) if k not in self.slots))

    def with_arrays(self, values, needs_grad):
        """(args, kwargs) with new ndarrays holding `values` in the array slots."""
        args, kwargs, who = list(self.args), dict(self.kwargs), self.function.who
        for slot, value, need in zip(self.slots, values, needs_grad):
            a = host.to_ndarray(np.asarray(value), need, who)
            if isinstance(slot, str):
                kwargs[slot] = a
            else:
                args[slot] = a
        return args, kwargs

    def outputs_as(self, outputs, specs):
        """The outputs' values, checked against the shapes and dtypes JAX was promised."""
        if len(outputs) != len(specs):
            raise ArgumentError(f"{self.function.who} returned {len(outputs)} ndarrays, {len(specs)} before")
        values = []
        for out, spec in zip(outputs, specs):
            value = out.to_numpy()
            if value.shape != spec.shape or value.dtype != spec.dtype:
                raise ArgumentError(f"{self.function.who} returned a {value.dtype}{list(value.shape)} array where "
                                    f"an earlier call with the same argument shapes returned {spec.dtype}"
                                    f"{list(spec.shape)}: its outputs' shapes must follow from the shapes and "
                                    "integer arguments it is called with")
            values.append(value)
        return tuple(values)

    def batch_axes(self, values):
        """The leading axes jax.vmap added to the callback's values (broadcast to all of them), () for none."""
        if not values:
            return ()
        shape = np.shape(values[0])
        return tuple(shape[:len(shape) - len(self.element_shapes[0])])

    def host_forward(self, specs, *values):
        lead = self.batch_axes(values)
        if lead:
            return self.batched(specs, lead, values, None)
        recorded = RecordedCall(self.function.fn, self.function.who)
        outputs = recorded.run(*self.with_arrays(values, [False] * len(values)), record=False)
        return self.outputs_as(outputs, specs)

    def host_backward(self, specs, differentiable, *values_and_cotangents):
        """The gradients of the float inputs: the function run again under a Tape, then its gradients."""
        values, cots = values_and_cotangents[:len(self.slots)], iter(values_and_cotangents[len(self.slots):])
        lead = self.batch_axes(values)
        if lead:
            return self.batched(specs, lead, values, [next(cots) if d else None for d in differentiable])
        needs = [np.issubdtype(np.asarray(v).dtype, np.floating) for v in values]
        args, kwargs = self.with_arrays(values, needs)
        inputs = [kwargs[s] if isinstance(s, str) else args[s] for s in self.slots]
        recorded = RecordedCall(self.function.fn, self.function.who)
        outputs = recorded.run(args, kwargs, record=True)
        try:
            self.outputs_as(outputs, specs)
            grads = recorded.backward([next(cots) if d else None for d in differentiable], inputs)
        finally:
            recorded.tape.close()
        return tuple(g.astype(np.asarray(v).dtype) for g, v, need in zip(grads, values, needs) if need)

    def batched(self, specs, lead, values, cotangents):
        """Forward (cotangents None: the outputs) or backward (the float inputs' gradients) of len(lead) nested
        jax.vmaps at once: the launches batched over their B elements (batched_call.py), or element by
        element where they cannot be."""
        size, who = int(np.prod(lead)), self.function.who
        flat = [np.asarray(v).reshape(size, *shape) for v, shape in zip(values, self.element_shapes)]
        needs = [cotangents is not None and np.issubdtype(v.dtype, np.floating) for v in flat]
        cots = None if cotangents is None else [None if c is None else np.asarray(c).reshape(size, *s.shape)
                                                for c, s in zip(cotangents, specs)]
        try:
            args, kwargs = self.with_arrays([v[0] for v in flat], needs)
            result, log = record_first(self.function.fn, args, kwargs)
            outputs = check_outputs(result, who)[0]
            log.finish(outputs)
            firsts = [kwargs[s] if isinstance(s, str) else args[s] for s in self.slots]
            inputs = [host.to_ndarray(v, need, who) for v, need in zip(flat, needs)]
            recorded = RecordedCall(lambda: tuple(replay_batched(log, outputs, firsts, inputs, size)), who)
            outs = recorded.run([], {}, record=cotangents is not None)
        except NotBatchable:
            return self.elementwise(specs, lead, flat, cots, differentiable_of(specs))
        if cotangents is None:
            return tuple(o.reshape(*lead, *s.shape) for o, s in zip(
                self.outputs_as(outs, [_batched_spec(s, size) for s in specs]), specs))
        try:
            self.outputs_as(outs, [_batched_spec(s, size) for s in specs])
            grads = recorded.backward(cots, inputs)
        finally:
            recorded.tape.close()
        return tuple(g.reshape(*lead, *v.shape[1:]).astype(v.dtype) for g, v, need in zip(grads, flat, needs)
                     if need)

    def elementwise(self, specs, lead, flat, cots, differentiable):
        """`batched` one element at a time (the launch sequence has no batched form)."""
        per = []
        for b in range(len(flat[0])):
            values = [v[b] for v in flat]
            if cots is None:
                per.append(self.host_forward(specs, *values))
            else:
                mine = [c[b] for c in cots if c is not None]
                per.append(self.host_backward(specs, differentiable, *values, *mine))
        return tuple(np.stack(parts).reshape(*lead, *parts[0].shape) for parts in zip(*per))

    def custom_vjp(self, specs):
        jx = jax()
        differentiable = [np.issubdtype(s.dtype, np.floating) for s in specs]

        def forward(*xs):
            return jx.pure_callback(functools.partial(self.host_forward, specs), specs, *xs,
                                    vmap_method="broadcast_all")

        def forward_with_residuals(*xs):
            return forward(*xs), xs

        def backward(xs, cotangents):
            floats = [np.issubdtype(x.dtype, np.floating) for x in xs]
            grads = iter(())
            if any(floats):
                grad_specs = tuple(jx.ShapeDtypeStruct(x.shape, x.dtype) for x, f in zip(xs, floats) if f)
                cots = [c for c, d in zip(cotangents, differentiable) if d]
                grads = iter(jx.pure_callback(functools.partial(self.host_backward, specs, differentiable),
                                              grad_specs, *xs, *cots, vmap_method="broadcast_all"))
            return tuple(next(grads) if f else np.zeros(x.shape, jx.dtypes.float0) for x, f in zip(xs, floats))

        fn = jx.custom_vjp(forward)
        fn.defvjp(forward_with_residuals, backward)
        return fn


def differentiable_of(specs):
    return [np.issubdtype(s.dtype, np.floating) for s in specs]


def _batched_spec(spec, size):
    """`spec` (a jax.ShapeDtypeStruct) with a leading axis of `size` elements."""
    return jax().ShapeDtypeStruct((size, *spec.shape), spec.dtype)


def jax_function(fn):
    """`@sp.jax_function`: see the module docstring and docs/interop.md."""
    if not callable(fn):
        raise ArgumentError(f"@sp.jax_function decorates a function, got {type(fn).__name__}")
    return JaxFunction(fn)

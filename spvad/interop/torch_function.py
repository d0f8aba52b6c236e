"""`@sp.torch_function`: a Python function that launches kernels, as a torch.autograd.Function. Tensor
arguments arrive as new ndarrays (needs_grad where torch needs their gradient), other arguments as they are;
the returned ndarrays leave as tensors. Backward seeds the outputs' .grad with torch's cotangents and runs
the recorded launches' gradients (sp.Tape's machinery), as often as torch asks."""
import functools
import inspect

from ..errors import ArgumentError, AutodiffRuleError
from . import host
from .recorded import RecordedCall
from .torch_bridge import host_array, torch

_function_class = None


def bridge():
    """The torch.autograd.Function subclass (made on first use: torch is imported lazily)."""
    global _function_class
    if _function_class is None:
        th = torch()

        class SpvadFunction(th.autograd.Function):
            @staticmethod
            def forward(ctx, call, *tensors):
                ctx.set_materialize_grads(False)   # an unused output's cotangent stays None: nothing seeded
                outputs = call.forward(tensors, ctx.needs_input_grad[1:])
                ctx.call = call
                ctx.mark_non_differentiable(*[t for t in outputs if not t.is_floating_point()])
                return outputs

            @staticmethod
            def backward(ctx, *cotangents):
                # create_graph=True (a gradient penalty, gradgradcheck) runs backward with grad mode on: the
                # gradient would leave as a constant and its own derivative would silently lack spvad's part
                # (torch's once_differentiable refuses only when the cotangents themselves need a gradient)
                if th.is_grad_enabled():
                    raise AutodiffRuleError(
                        f"{ctx.call.function.who}: second derivatives (create_graph=True) are not supported: "
                        "spvad's gradient of this function is not itself differentiable by torch")
                return (None,) + ctx.call.backward(cotangents)

        _function_class = SpvadFunction
    return _function_class


class TorchFunction:
    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.who = f"sp.torch_function {getattr(fn, '__qualname__', fn)}"
        try:
            self.param_names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self.param_names = []

    def __call__(self, *args, **kwargs):
        th = torch()
        slots = [i for i, a in enumerate(args) if isinstance(a, th.Tensor)]
        slots += [k for k, a in kwargs.items() if isinstance(a, th.Tensor)]
        call = Call(self, args, kwargs, slots)
        outputs = bridge().apply(call, *[call.get(s) for s in slots])
        return outputs[0] if call.recorded.single else outputs

    def argument_name(self, slot):
        if isinstance(slot, str):
            return f"argument '{slot}'"
        name = self.param_names[slot] if slot < len(self.param_names) else f"#{slot}"
        return f"argument '{name}'"


class Call:
    """One call: where the tensors sit among the arguments, the ndarrays made of them, the recorded run."""

    def __init__(self, function, args, kwargs, slots):
        self.function, self.args, self.kwargs, self.slots = function, list(args), dict(kwargs), slots
        self.recorded = RecordedCall(function.fn, function.who)

    def get(self, slot):
        return self.kwargs[slot] if isinstance(slot, str) else self.args[slot]

    def put(self, slot, value):
        if isinstance(slot, str):
            self.kwargs[slot] = value
        else:
            self.args[slot] = value

    def forward(self, tensors, needs_grad):
        who = self.function.who
        datas = [host_array(t, f"{who}, {self.function.argument_name(s)}") for s, t in zip(self.slots, tensors)]
        dtypes = [host.spvad_dtype(d, f"{who}, {self.function.argument_name(s)}") for s, d in zip(self.slots, datas)]
        self.inputs = [host.to_ndarray(d, need, who, dt) for d, need, dt in zip(datas, needs_grad, dtypes)]
        for s, a in zip(self.slots, self.inputs):
            self.put(s, a)
        self.places = [(t.device, t.dtype) for t in tensors]
        outputs = self.recorded.run(self.args, self.kwargs, record=any(needs_grad))
        device = tensors[0].device if tensors else torch().device("cpu")
        self.args = self.kwargs = None   # the ndarrays live on in self.inputs only
        return tuple(out.to_torch().to(device) for out in outputs)

    def backward(self, cotangents):
        if self.recorded.tape is None:
            raise ArgumentError(f"{self.function.who}: backward of a call that recorded nothing")
        host_cots = [None if c is None else c.detach().cpu().numpy() for c in cotangents]
        grads = self.recorded.backward(host_cots, self.inputs)
        return tuple(None if g is None or not a.needs_grad else torch().from_numpy(g).to(device=dev, dtype=dt)
                     for g, a, (dev, dt) in zip(grads, self.inputs, self.places))


def torch_function(fn):
    """`@sp.torch_function`: see the module docstring and docs/interop.md."""
    if not callable(fn):
        raise ArgumentError(f"@sp.torch_function decorates a function, got {type(fn).__name__}")
    return TorchFunction(fn)

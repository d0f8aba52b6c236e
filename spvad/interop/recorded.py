"""One call of a Python function that launches kernels, recorded by an sp.Tape whose gradients run later,
seeded with a framework's cotangents: what sp.torch_function and sp.jax_function share."""
import weakref

from .. import recording, runtime
from ..errors import ArgumentError, AutodiffRuleError
from ..tape import Tape


class HeldTape(Tape):
    """A Tape whose recording outlives its backward passes: torch may differentiate one call several times
    (retain_graph=True; gradcheck does). Its kept copies and temporary gradients go with the call."""
    plans = False   # its entries outlive its backward passes (and it is never entered: no plan either way)

    def _release(self):
        pass   # Tape.backward releases at its end; this Tape releases in close()

    def close(self):
        with runtime.LOCK:
            Tape._release(self)


class SeedCotangents:
    """The Tape's last entry, so the first to run backward (right after the Tape zeroed the gradients it
    owns): each output's .grad takes its cotangent, summed when one array is returned twice."""

    def __init__(self):
        self.seeds = []   # (output ndarray, cotangent as a numpy array or None)

    def backward(self, tape):
        totals = {}
        for out, cot in self.seeds:
            if cot is not None and out.grad is not None:   # no .grad: no needs-grad input reaches it
                array, total = totals.get(id(out), (out, 0))
                totals[id(out)] = (array, total + cot)
        for out, total in totals.values():
            out.grad.from_numpy(total)


def is_ndarray(obj):
    return getattr(obj, "_spvad_ndarray", False)


def check_outputs(result, who):
    """The function's ndarray(s) as a tuple, and whether it returned a single one."""
    single = is_ndarray(result)
    outs = (result,) if single else result
    if not isinstance(outs, (tuple, list)) or not outs or not all(is_ndarray(o) for o in outs):
        got = type(result).__name__ if not isinstance(result, (tuple, list)) else \
            f"a {type(result).__name__} of " + ", ".join(type(o).__name__ for o in result)
        raise ArgumentError(f"{who} must return an sp.ndarray or a tuple of them, got {got or 'an empty tuple'}")
    return tuple(outs), single


class RecordedCall:
    """Runs `fn` once (recording its launches when `record`), keeps its outputs, and computes the inputs'
    gradients from output cotangents as often as asked."""

    def __init__(self, fn, who):
        self.fn, self.who = fn, who
        self.tape = self.seed = None

    def run(self, args, kwargs, record):
        if recording.current() is not None:
            raise ArgumentError(f"{self.who} was called inside an sp.Tape: its launches would escape that Tape; "
                                "call it outside, and let the framework differentiate it")
        if not record:
            self.outputs, self.single = check_outputs(self.fn(*args, **kwargs), self.who)
            return self.outputs
        tape, stack = HeldTape(), recording.stack()
        stack.append(tape)
        try:
            result = self.fn(*args, **kwargs)
        except BaseException:
            stack.remove(tape)
            tape.close()
            raise
        stack.remove(tape)
        try:
            self.outputs, self.single = check_outputs(result, self.who)
        except ArgumentError:
            tape.close()
            raise
        self.tape, self.seed = tape, SeedCotangents()
        tape.entries.append(self.seed)
        weakref.finalize(self, tape.close)   # a call never differentiated frees what its Tape kept
        return self.outputs

    def backward(self, cotangents, inputs):
        """The gradients (numpy arrays, None where an input has no .grad) of `inputs` for these cotangents
        of the outputs (numpy arrays, None for none)."""
        with runtime.LOCK:
            self.seed.seeds = list(zip(self.outputs, cotangents))
            for a in inputs:   # an input no launch touched is not zeroed by the Tape
                if a.grad is not None and id(a) not in self.tape.arrays:
                    a.grad.zero_on_device()
            try:
                self.tape.backward()
            except AutodiffRuleError as exc:   # e.g. a later call rewrote a global array this gradient reads
                raise AutodiffRuleError(f"{self.who}, backward pass: {exc} (writes after the call, by a later "
                                        "call too, are such writes: give each call its own arrays)") from None
            return [None if a.grad is None else a.grad.to_numpy() for a in inputs]

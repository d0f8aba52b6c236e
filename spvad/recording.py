"""Per-thread recording state: the Tapes recording now (innermost last) and the open FwdMode blocks. Launches
(kernel.py) and host writes (ndarray.py) report to the innermost Tape through it, so neither imports the tape
package above them. Each thread has its own: a Tape (or FwdMode block) covers only the launches of the thread
that opened it."""
import threading

from . import runtime
from .errors import ArgumentError
from .launch import capture


class _PerThread(threading.local):
    def __init__(self):
        self.tapes, self.fwd = [], []
        self.plan = None   # plan.Plan of the last Tape that made one


modes = _PerThread()


def stack():
    """This thread's recording Tapes, innermost last."""
    return modes.tapes


def current():
    """The innermost recording Tape of this thread, or None."""
    tapes = modes.tapes
    return tapes[-1] if tapes else None


def refuse_nesting(opening, open_one):
    """A Tape and a FwdMode block never nest: inside a FwdMode the launches run in forward mode only, so the
    Tape would record none of them and its gradients would silently stay zero."""
    raise ArgumentError(f"{opening} inside an {open_one}: the launches would run in forward mode only and the "
                        "Tape would record none of them (its gradients would stay zero); run the Tape and the "
                        "forward-mode pass one after the other")


def validating(kernel=None):
    """True inside a `Tape(validation=True)` when the runtime runs with debug=True, except in the launches
    of a @grad_replaced function or of a @sp.no_grad `kernel`: their generated gradients never run, so the
    data access rule that protects those gradients does not apply to them."""
    tape = current()
    return (tape is not None and tape.validation and not tape.inside_custom and runtime.get().debug
            and not getattr(kernel, "no_grad", False))


def read_marker(array):
    """The validating Tape's marker of which elements of `array` were read (zeros when first asked)."""
    return current().read_marker(array)


def _open_block():
    """The recording block open in this thread ("sp.Tape" / "sp.FwdMode"), or None: sp.capture() neither opens
    nor replays inside one (launch/capture.py asks)."""
    return "sp.Tape" if modes.tapes else "sp.FwdMode" if modes.fwd else None


capture.open_recording = _open_block

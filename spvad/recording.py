"""Per-thread recording state: the Tapes recording now (innermost last) and the open FwdMode blocks. Launches
and host writes report to the innermost Tape; it lives in its own module so that ndarray.py (host writes) and
kernel.py (launches) need not import tape.py. Each thread has its own: a Tape (or FwdMode block) covers only
the launches of the thread that opened it."""
import threading

from .errors import ArgumentError


class _PerThread(threading.local):
    def __init__(self):
        self.tapes, self.fwd = [], []
        self.plan = None   # tape_plan.Plan of the last Tape that made one


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

"""Per-thread recording state: the Tapes recording now (innermost last) and the open FwdMode blocks. Launches
and host writes report to the innermost Tape; it lives in its own module so that ndarray.py (host writes) and
kernel.py (launches) need not import tape.py. Each thread has its own: a Tape (or FwdMode block) covers only
the launches of the thread that opened it."""
import threading


class _PerThread(threading.local):
    def __init__(self):
        self.tapes, self.fwd = [], []


modes = _PerThread()


def stack():
    """This thread's recording Tapes, innermost last."""
    return modes.tapes


def current():
    """The innermost recording Tape of this thread, or None."""
    tapes = modes.tapes
    return tapes[-1] if tapes else None

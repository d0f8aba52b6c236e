"""The Tapes recording now in this thread (innermost last). Launches and host writes report to the innermost
one; it lives in its own module so that ndarray.py (host writes) and kernel.py (launches) need not import
tape.py. Each thread has its own stack: a Tape records only the launches of the thread that opened it."""
import threading

_local = threading.local()


def stack():
    """This thread's recording Tapes, innermost last."""
    tapes = getattr(_local, "tapes", None)
    if tapes is None:
        tapes = _local.tapes = []
    return tapes


def current():
    """The innermost recording Tape of this thread, or None."""
    tapes = stack()
    return tapes[-1] if tapes else None

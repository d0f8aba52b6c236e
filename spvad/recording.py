"""The Tapes recording now (innermost last). Launches and host writes report to the innermost one; it
lives in its own module so that ndarray.py (host writes) and kernel.py (launches) need not import tape.py."""

active = []


def current():
    """The innermost recording Tape, or None."""
    return active[-1] if active else None

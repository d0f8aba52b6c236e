"""Threads: several Python threads launching, syncing and reading arrays at once. The runtime serialises
device work behind one lock; every launch runs exactly once, on the arrays it was given, and a Tape records
only its own thread's launches."""
import faulthandler
import os
import sys
import tempfile
import threading

import numpy as np
import pytest

import spvad as sp

N = 64
FAULT_LOG = {}   # "file": the open crash log of this module's tests


@pytest.fixture(autouse=True, scope="module")
def crash_log():
    """A crash (segfault, abort) in these tests names its place: faulthandler writes every thread's
    traceback to spvad-faults-<pid>.log in $OUT (ci/gpu_check.sh brings that folder back) or the temporary
    folder, which outlives the process; pytest-xdist reports a crashed worker only as "node down: Not
    properly terminated" (NVIDIA, 2026-11: three of these tests). An empty log is removed afterwards."""
    path = os.path.join(os.environ.get("OUT") or tempfile.gettempdir(), f"spvad-faults-{os.getpid()}.log")
    with open(path, "w") as log:
        FAULT_LOG["file"] = log
        faulthandler.enable(file=log, all_threads=True)
        try:
            yield
        finally:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)
            FAULT_LOG.clear()
    if os.path.getsize(path) == 0:
        os.remove(path)


@sp.kernel
def add_scalar(a: sp.Array, v: sp.f32):
    for i in range(a.shape[0]):
        a[i] += v


@sp.kernel
def bump_shared(a: sp.Array):
    for i in range(a.shape[0]):
        a[i] += 1.0


@sp.kernel
def sine_into(x: sp.Array, y: sp.Array):
    for i in range(x.shape[0]):
        y[i] = sp.sin(x[i]) * x[i]


@sp.kernel
def total(y: sp.Array, loss: sp.Array):
    for i in range(y.shape[0]):
        loss[None] += y[i]


def run_threads(work, count):
    errors = []

    def guarded(k):
        try:
            work(k)
        except BaseException as e:   # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if any(t.is_alive() for t in threads):   # where each thread is, in the crash log and on stderr
        for out in (FAULT_LOG.get("file"), sys.__stderr__):
            if out is not None:
                faulthandler.dump_traceback(file=out, all_threads=True)
    assert not any(t.is_alive() for t in threads), "a thread hung (tracebacks of all threads: stderr)"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("threads", [2, 4])
def test_separate_arrays(threads):
    """Each thread launches into its own array with its own values (fast path: same arrays, new scalars)
    and syncs now and then: every array ends with exactly its own sum."""
    arrays = [sp.ndarray(sp.f32, (N,)) for _ in range(threads)]
    launches = 1500

    def work(k):
        for j in range(launches):
            add_scalar(arrays[k], float(k + 1))
            if j % 100 == 0:
                assert arrays[k][0] == float((k + 1) * (j + 1))   # a read syncs
    run_threads(work, threads)
    for k, a in enumerate(arrays):
        np.testing.assert_array_equal(a.to_numpy(), np.full(N, (k + 1) * launches, np.float32))


def test_shared_array_and_a_syncing_thread():
    """Three threads bump one shared array while a fourth syncs in a loop: no launch is lost."""
    shared = sp.ndarray(sp.f32, (N,))
    launches, stop = 1000, threading.Event()

    def work(k):
        if k == 3:
            while not stop.is_set():
                sp.sync()
            return
        for _ in range(launches):
            bump_shared(shared)

    syncer = threading.Thread(target=lambda: work(3))
    syncer.start()
    try:
        run_threads(work, 3)
    finally:
        stop.set()
        syncer.join(timeout=60)
    np.testing.assert_array_equal(shared.to_numpy(), np.full(N, 3 * launches, np.float32))


def test_tapes_in_two_threads(rng):
    """Two threads each run Tapes over their own arrays: each gradient is its own (recording is per thread)."""
    x0 = [rng.uniform(-1, 1, N).astype(np.float32) for _ in range(2)]
    results = [None, None]

    def work(k):
        x = sp.from_numpy(x0[k], needs_grad=True)
        y = sp.ndarray(sp.f32, (N,), needs_grad=True)
        loss = sp.ndarray(sp.f32, (), needs_grad=True)
        for _ in range(30):
            with sp.Tape(loss):
                sine_into(x, y)
                total(y, loss)
        results[k] = x.grad.to_numpy()

    run_threads(work, 2)
    for k in range(2):
        x = x0[k].astype(np.float64)
        np.testing.assert_allclose(results[k], np.cos(x) * x + np.sin(x), rtol=1e-5, atol=1e-6)

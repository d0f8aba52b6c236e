"""`sp.capture()`: launches (and whatever a Tape inside queues: its fills, copies and backward) recorded once
into one device batch instead of running, and `g.replay()` running them all again in one call.

A capture binds what its launches bound when they were recorded: the arrays (their buffers, not their
contents), the scalars packed into push constants, the thread counts, adstack capacities, random keys. What
a launch does on the host besides recording commands is done once, at capture time, or refused there when it
needs the launches' results (a sync, a host read or write, adstack depths measured on array data, a thread
count read back on the host). What each replay still does on the host is what a launch leaves for the next
sync: its task's flag words (adstack overflow, bounds, loop cap) and print lines are read there.

While a capture records, the runtime's `capture` is it: the device records into the batch (rhi
`begin_capture`), the runtime refuses to sync (runtime.py) and ndarrays refuse host access (ndarray.py); a
Tape inside hands it the buffers and temporary .grad companions it would free (tape.py: the batch binds them).
A capture covers the launches of every thread (the device records them all)."""
import weakref

from .. import runtime
from ..errors import ArgumentError

# what is recording derivatives in this thread, set by recording.py (a layer above): a callable returning
# the name of the open sp.Tape / sp.FwdMode block, or None. A capture neither opens nor replays inside one.
open_recording = lambda: None  # noqa: E731


class Capture:
    """One `with sp.capture() as g:` block and its batch; `g.replay()` runs it again. Also the keeper of what
    the batch binds that its owners would free meanwhile (`give`, `keep`)."""

    def __init__(self):
        self.rt = None        # the runtime it recorded on
        self.batch = None     # the device's batch (rhi end_capture), once the block ended without an error
        self.recording = False
        self.reports = {}     # DeviceTask -> specialisation of its last launch: what it reads at the next sync
        self.held = []        # buffers and arrays kept alive for the batch (a Tape's checkpoints, temporaries)
        self.replays = 0      # replays so far

    def __enter__(self):
        with runtime.LOCK:
            rt = runtime.get()
            if rt.capture is not None:
                raise ArgumentError("sp.capture() inside another sp.capture(): captures do not nest; end the "
                                    "outer block first")
            if self.recording or self.batch is not None:
                raise ArgumentError("this sp.capture() recorded already: open a new sp.capture() block")
            recording = open_recording()
            if recording is not None:
                raise ArgumentError(f"sp.capture() inside an open {recording}: the {recording} would record "
                                    "launches that do not run; open the sp.capture() outside it (a whole "
                                    "Tape inside a capture is recorded, its backward included)")
            rt.device.begin_capture()   # (a backend that cannot says so)
            self.rt, self.recording, rt.capture = rt, True, self
            weakref.finalize(self, _release_all, self.held)
        return self

    def __exit__(self, exc_type, exc, tb):
        with runtime.LOCK:
            rt, self.recording = self.rt, False
            if rt.capture is self:
                rt.capture = None
            if rt is not runtime.current():
                return False   # (the runtime was reset inside the block: nothing to end)
            batch = rt.device.end_capture()
            if exc_type is None:
                self.batch = batch
            elif batch is not None:
                batch.release()
        return False

    def replay(self):
        """Run the captured launches again, as one batch queued on the device (asynchronous, like a launch):
        errors the launches flag are raised at the next sync."""
        with runtime.LOCK:
            rt = self.rt
            if self.recording:
                raise ArgumentError("g.replay() inside its own sp.capture() block: the capture is not complete; "
                                    "replay it after the block")
            if self.batch is None:
                raise ArgumentError("g.replay(): nothing was captured (the sp.capture() block raised, or was "
                                    "never entered)")
            if rt is not runtime.current():
                raise ArgumentError("g.replay(): this capture belongs to a runtime that was reset; capture the "
                                    "launches again")
            if rt.capture is not None:
                raise ArgumentError("g.replay() inside another sp.capture() block: captures do not nest; "
                                    "replay it outside")
            recording = open_recording()
            if recording is not None:
                raise ArgumentError(f"g.replay() inside an open {recording}: it would not record the replayed "
                                    "launches; replay outside it (or capture a whole Tape: its backward is "
                                    "replayed too)")
            if not rt.device.run_batch(self.batch):
                raise ArgumentError("g.replay(): an array (or kernel) the capture binds was released since it was "
                                    "captured; a capture binds its arrays: keep them alive, or capture again")
            for task, spec in self.reports.items():
                task.after_launch(spec)
            self.replays += 1

    # ---- what the batch binds, kept for it ----
    def give(self, buffers):
        """Keep device buffers the batch binds (a Tape's checkpoint copies): released with the capture. (The
        signature of runtime.SparePool.give, which a Tape hands them to outside a capture.)"""
        self.held.extend(buffers)

    def keep(self, obj):
        """Keep an object alive as long as the capture (a Tape's temporary .grad companion)."""
        self.held.append(obj)


def capture():
    """`with sp.capture() as g: ...` records the launches of the block (and a Tape's, its backward included)
    without running them; `g.replay()` runs them all again. Inside the block, sp.sync(), host reads and host
    writes of ndarrays raise sp.ArgumentError."""
    return Capture()


def refuse_host_step(rt, kernel_name, what, advice):
    """Inside a capture: ArgumentError for a launch that needs `what` on the host before it runs."""
    if rt.capture is not None:
        raise ArgumentError(f"kernel {kernel_name}: sp.capture() cannot record this launch: {what} on the host "
                            f"before it runs, from the arrays' contents then; {advice}")


def _release_all(held):
    """The capture is gone: release the buffers it kept (arrays kept release theirs when collected)."""
    with runtime.LOCK:
        for obj in held:
            release = getattr(obj, "release", None)
            if release is not None and not getattr(obj, "_spvad_ndarray", False):
                release()
        held.clear()

"""The process-wide runtime: device selection, options, the launch path, sync and device-side error flags."""
import atexit
import contextlib
import itertools
import numbers
import operator
import os
import signal
import sys
import threading
import weakref

from . import rhi
from .cache import source_stamp
from .cache.folder import cache_dir
from .errors import ArgumentError, ReentryError
from .spirv.lower_adstack import MAX_CAPACITY

_current = None
_serials = itertools.count()
# One lock for everything that touches the device or a runtime's caches: launches (with their compile and
# recording), syncs, host access to ndarrays, buffer creation and release, init and reset. Reentrant, so a
# Tape's backward pass (which launches) or a host write (which syncs) can take it again. Threads may launch
# and sync concurrently; their calls run one at a time, each seeing the launches queued before it.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class RuntimeLock:
    """A reentrant lock that refuses re-entry from a signal handler. Python runs a handler between two
    bytecodes of the main thread, possibly in the middle of a launch or a Tape's backward (a command buffer
    half recorded, a dispatch not yet noted); a handler reading an ndarray there would sync that state. So a
    nested acquisition is allowed when the frames between it and the outer one are spvad's (a Tape launching,
    a host write syncing) or user code spvad called (a custom gradient), and refused when one of them is a
    Python signal handler's: it raises ReentryError and changes nothing."""
    __slots__ = ("_lock", "_depth", "_outer")

    def __init__(self):
        # an RLock underneath: a handler running between its acquire and the bookkeeping below (or between the
        # bookkeeping and its release) finds depth 0 and runs as an outer call, never deadlocks
        self._lock, self._depth, self._outer = threading.RLock(), 0, None

    def __enter__(self):
        self._lock.acquire()
        if self._depth:   # held already, so by this thread: a nested call
            if _handler_between(sys._getframe(1), self._outer):
                self._lock.release()
                raise ReentryError("spvad was called from a signal handler while this thread was inside spvad "
                                   "(a launch, a sync or a Tape's backward); nothing was done: read or launch "
                                   "outside the handler (e.g. set a flag there and act on it in the main loop)")
            self._depth += 1
            return self
        self._depth, self._outer = 1, sys._getframe(1)
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if not self._depth:
            self._outer = None
        self._lock.release()
        return False


def _handler_between(frame, outer):
    """Whether a frame from `frame` up to `outer` (excluded) runs a Python signal handler installed now. Only
    frames outside spvad are checked, so a Tape's nested launches cost a short walk."""
    strangers = []
    while frame is not None and frame is not outer:
        if not frame.f_code.co_filename.startswith(PACKAGE_DIR):
            strangers.append(frame.f_code)
        frame = frame.f_back
    if not strangers:
        return False
    codes = set()
    for signum in signal.valid_signals():
        handler = signal.getsignal(signum)
        handler = getattr(handler, "func", handler)            # functools.partial
        handler = getattr(handler, "__func__", handler)        # a bound method
        code = getattr(handler, "__code__", None)
        if code is not None:
            codes.add(code)
    return any(code in codes for code in strangers)


LOCK = RuntimeLock()


class Runtime:
    def __init__(self, backend="auto", device=None, ad_stack_size=None, debug=False, validate_spirv=None,
                 random_seed=0, fast_math=True, native_math=False):
        ad_stack_size = checked_ad_stack_size(ad_stack_size, "sp.init")   # before the device opens
        backend = os.environ.get("SPVAD_BACKEND", backend) or "auto"
        selector = os.environ.get("SPVAD_DEVICE", device)
        if isinstance(selector, str) and selector.isdigit():
            selector = int(selector)
        if backend == "auto":
            backend = "metal" if sys.platform == "darwin" else "vulkan"
        validation = os.environ.get("SPVAD_VALIDATION", "0") not in ("", "0")
        folder = cache_dir()
        disk_cached = folder is not None and backend in rhi.BACKENDS and rhi.code_kind(backend) == "spirv"
        with source_stamp.taken_meanwhile(disk_cached), _lavapipe_threads_in_forked_child(backend):
            self.device = rhi.open_device(backend, selector, validation=validation, pipeline_cache_dir=folder)
        self.code = rhi.code_kind(backend)   # what kernels compile to for this device: "spirv" or "ir"
        self.backend = backend
        self.serial = next(_serials)   # compile caches are per runtime (captured arrays, features)
        self.ad_stack_size = ad_stack_size
        self.debug = debug
        self.fast_math = fast_math   # kernels without their own fast_math option take this one
        self.native_math = native_math   # likewise: the driver's transcendentals instead of ir/libm's
        if validate_spirv is None:
            validate_spirv = debug or "pytest" in sys.modules
        self.validate_spirv = validate_spirv
        self.random_seed = random_seed   # sp.random / sp.randn: with the count of forward launches that
        self.random_launches = 0         # drew random numbers, the key of each launch (kernel.py)
        self.pending_checks = []    # callables run after each sync (adstack overflow flags, kernel prints)
        self.prints = None          # the print buffer of kernel print(...) (launch/prints.py), made on first use
        self.pending_checks_owners = set()
        self.released_after_sync = set()   # ids of CompiledTasks to release once their flags were read
        self.tasks = {}             # id(CompiledTask) -> what this runtime holds for it (launch.DeviceTask)
        self.spare_buffers = SparePool(self.device)   # a Tape's checkpoint buffers, reused by the next Tape
        self.shared_pipelines = SharedPipelines(self.device)
        self.lent_views = weakref.WeakSet()   # owners of zero-copy views of device memory (DLPack exports)
        self.forked = False   # True in a forked child: the parent's runtime, set aside (_after_fork_in_child)
        self.capture = None   # the sp.capture() recording now (launch/capture.py): launches are recorded only

    def sync(self):
        refuse_inside_capture(self, "sp.sync()")
        self.device.sync()
        checks, self.pending_checks = self.pending_checks, []
        try:
            errors = [e for e in (check() for check in checks) if e is not None]
        finally:
            if self.released_after_sync:   # their kernels went away before their flags were read
                ids, self.released_after_sync = self.released_after_sync, set()
                self.release_tasks(ids)
        if errors:
            raise errors[0]

    def release_tasks(self, task_ids):
        """Free the pipelines and buffers held for the CompiledTasks with these ids (their kernel is gone)."""
        waiting = task_ids & {id(t.ct) for t in self.pending_checks_owners}   # flags not read yet
        self.released_after_sync |= waiting
        for key in task_ids - waiting:
            held = self.tasks.pop(key, None)
            if held is not None:
                held.release()   # deferred by the device while recorded launches may still use it

    def close(self):
        if self.prints is not None and self.prints.pending:   # lines nobody synced for: print them now
            try:
                self.device.sync()
                self.prints.flush()
            except Exception:   # noqa: BLE001 - a failed device still closes
                pass
        self.prints = None
        self.pending_checks = []
        self.pending_checks_owners.clear()
        self.tasks.clear()
        self.shared_pipelines.clear()
        self.spare_buffers.clear()
        if self.lent_views:   # another library still reads device memory: unmapping it now could crash it
            close_when_unviewed(self.device, list(self.lent_views))
        else:
            self.device.close()


def close_when_unviewed(device, owners):
    """Close `device` once none of `owners` (each keeps a zero-copy view of its memory alive) is left."""
    left = [len(owners)]

    def one_gone():
        left[0] -= 1
        if left[0] == 0:
            with LOCK:
                device.close()
    for owner in owners:
        weakref.finalize(owner, one_gone)


class SharedPipelines:
    """One driver pipeline per distinct module (SPIR-V, bindings, push constants, specialisation), shared
    by every kernel object that compiles to it; the last IDLE_KEPT ones no kernel uses any more are kept
    too. So a kernel made again and again (in a loop, per call) costs one pipeline, not one each: drivers
    such as lavapipe keep memory for every pipeline ever created, destroyed or not."""
    IDLE_KEPT = 64

    def __init__(self, device):
        self.device, self.live, self.idle = device, {}, {}

    def get(self, low, name, spec):
        key = (low.code, low.num_buffers, low.push_size, tuple(sorted(spec.items())) if spec else (),
               low.fast_math)
        ref = self.live.get(key) or self.idle.pop(key, None)
        if ref is None:
            pipeline = self.device.create_pipeline(low.code, name=name, num_buffers=low.num_buffers,
                                                   push_constant_size=low.push_size, spec_constants=spec or None,
                                                   fast_math=low.fast_math)
            ref = SharedPipeline(self, key, pipeline)
        self.live[key] = ref
        ref.users += 1
        return ref

    def unused(self, ref):
        del self.live[ref.key]
        self.idle[ref.key] = ref
        if len(self.idle) > self.IDLE_KEPT:   # dicts keep insertion order: the oldest goes
            self.idle.pop(next(iter(self.idle))).pipeline.release()

    def clear(self):
        self.live, self.idle = {}, {}   # the device's close destroys the pipelines


class SharedPipeline:
    def __init__(self, owner, key, pipeline):
        self.owner, self.key, self.pipeline, self.users = owner, key, pipeline, 0

    def release(self):
        """One user fewer; the last one hands the pipeline to the idle ones."""
        self.users -= 1
        if self.users == 0:
            self.owner.unused(self)


class SparePool:
    """Device buffers kept for reuse, by size. Handed out in the order they were given back, so a Tape that
    runs the same program again gets the same buffers in the same places: its launches then find their
    descriptor sets cached instead of building new ones. Holds at most as many bytes as the largest set of
    buffers given back at once (one Tape's copies)."""

    def __init__(self, device):
        self.device, self.free, self.limit = device, {}, 0

    def take(self, nbytes):
        spare = self.free.get(nbytes)
        return spare.pop(0) if spare else self.device.create_buffer(nbytes)

    def give(self, buffers):
        buffers = list(buffers)
        self.limit = max(self.limit, sum(b.nbytes for b in buffers))
        for buf in buffers:
            self.free.setdefault(buf.nbytes, []).append(buf)
        held = sum(b.nbytes for spare in self.free.values() for b in spare)
        for spare in self.free.values():   # over the limit: free the oldest first
            while spare and held > self.limit:
                held -= spare[0].nbytes
                spare.pop(0).release()

    def clear(self):
        for spare in self.free.values():
            for buf in spare:
                buf.release()
        self.free = {}


def init(backend="auto", device=None, ad_stack_size=None, debug=False, validate_spirv=None, random_seed=0,
         fast_math=True, native_math=False):
    global _current
    random_seed = _checked_seed(random_seed)   # before reset: a rejected call changes nothing
    fast_math = checked_fast_math(fast_math, "sp.init")
    native_math = checked_fast_math(native_math, "sp.init", "native_math")
    ad_stack_size = checked_ad_stack_size(ad_stack_size, "sp.init")
    with LOCK:
        reset()
        _current = Runtime(backend, device, ad_stack_size, debug, validate_spirv, random_seed, fast_math,
                           native_math)
        return _current


def checked_fast_math(value, where, option="fast_math"):
    """The fast_math (native_math) option of sp.init / @sp.kernel: True or False (None, for a kernel: the
    runtime's)."""
    if value is None and where != "sp.init":
        return None
    if not isinstance(value, bool):
        raise ArgumentError(f"{where}({option}=...) must be True or False, got {value!r}")
    return bool(value)


def checked_ad_stack_size(value, where):
    """The ad_stack_size option of sp.init / @sp.kernel: None (capacities sized by spvad), or an int from 1
    to the largest capacity the adstack lowering encodes (spirv/lower_adstack.py MAX_CAPACITY)."""
    if value is None:
        return None
    # (numbers.Integral: ints and numpy integers, not floats, strings or numpy bools; bools are not sizes)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= MAX_CAPACITY:
        raise ArgumentError(f"{where}(ad_stack_size=...) must be None or an int from 1 to {MAX_CAPACITY:,} "
                            f"(2**30 - 1), got {value!r}")
    return int(value)


def _checked_seed(seed):
    """sp.init's random_seed: an integer in [0, 2**64)."""
    if isinstance(seed, bool) or not hasattr(seed, "__index__") or not 0 <= operator.index(seed) < 2**64:
        raise ArgumentError(f"sp.init(random_seed=...) must be an integer in [0, 2**64), got {seed!r}")
    return operator.index(seed)


@atexit.register
def _close_at_exit():
    """Close the device at interpreter exit (waits for queued work, saves the pipeline cache). After a
    Ctrl-C stopped a sync while a kernel still runs, exit at once instead: closing would wait for the
    kernel (so would the driver's own exit handlers), however long it takes."""
    rt = _current
    if rt is not None and rt.device.interrupted and rt.device.busy():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)   # 128 + SIGINT, as shells report an interrupted command
    try:
        reset()
    except Exception:   # never turn a clean exit into a traceback
        pass


_set_aside = []   # in a forked child: the parent's runtimes, never used, closed or freed from here
_forked_from_vulkan = False   # this process is a forked child of one that had a Vulkan runtime


@contextlib.contextmanager
def _lavapipe_threads_in_forked_child(backend):
    """lavapipe opened in a forked child of a process that had it open runs one worker thread: with two or
    more, Mesa 22.3's exit handlers crash the child at exit (SIGSEGV joining threads; measured with 1, 2 and
    the default). Forked workers get their parallelism from the processes. Read as the device opens only."""
    if not (_forked_from_vulkan and backend == "vulkan"):
        yield
        return
    before = os.environ.get("LP_NUM_THREADS")
    os.environ["LP_NUM_THREADS"] = "1" if before is None or not before.isdigit() else str(min(int(before), 1))
    try:
        yield
    finally:
        if before is None:
            del os.environ["LP_NUM_THREADS"]
        else:
            os.environ["LP_NUM_THREADS"] = before


def _after_fork_in_child():
    """A forked child (multiprocessing, a DataLoader's workers) shares no device with its parent: the parent's
    runtime is set aside without a single driver call (closing it would wait on the parent's queue forever),
    and the child opens its own at its first launch or sp.init(). The lock is new: another thread of the
    parent may have held it at the fork."""
    global _current, LOCK, _forked_from_vulkan
    LOCK = RuntimeLock()
    rt, _current = _current, None
    if rt is not None:
        _forked_from_vulkan = _forked_from_vulkan or rt.backend == "vulkan"
        rt.forked = True
        rt.device.set_aside()
        _set_aside.append(rt)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get():
    """The current runtime, created with defaults on first use."""
    rt = _current
    if rt is not None:
        return rt
    with LOCK:
        return _current if _current is not None else init()


def current():
    return _current


def reset():
    global _current
    with LOCK:
        if _current is not None:
            rt, _current = _current, None
            rt.close()


def sync():
    with LOCK:
        if _current is not None:
            _current.sync()


def sync_unless_capturing():
    """sync(), except while sp.capture() records (a Tape's backward inside one is recorded, not run)."""
    with LOCK:
        if _current is not None and _current.capture is None:
            _current.sync()


def refuse_inside_capture(rt, what):
    """ArgumentError for `what` (a sync, a host read or write of an ndarray) while sp.capture() records on `rt`:
    the launches it records have not run, and a host write would not be recorded."""
    if rt.capture is not None:
        raise ArgumentError(f"{what} inside sp.capture(): the launches it records have not run (they run at "
                            "g.replay()), and host reads and writes are not recorded; read, write and sync "
                            "outside the capture block")


def device_info():
    return dict(get().device.info)

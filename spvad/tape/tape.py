"""`sp.Tape`: records launches and host writes, keeps the array contents their gradients will need, and
runs the gradients in reverse order on exit (the entries it records: entries.py).

Every write bumps an ndarray's `version`. A recorded launch notes the versions its gradient reads (known
from the compiled gradient: PRE = as the launch found the array, POST = as it left it). Before a later
launch or host write changes an array whose current version some gradient needs, the Tape copies it on
the device (`checkpoints.py`); the gradient then binds the copy. So double buffering, in-place updates,
reused scratch arrays and host writes inside a Tape give the gradients of the program as written.
"""
import weakref

from .. import recording, runtime
from .. import types as T
from ..errors import ArgumentError, AutodiffRuleError
from ..ndarray import Ndarray, live_with_grad, next_serial, set_on_device
from . import planned_backward, recompute
from .checkpoints import Checkpoints, OverBudget
from .controls import record_copy
from .entries import ArrayName, HostWriteEntry, LaunchEntry, Recipe, Writer, launch_writes
from .plan import Follower, PlanBuilder, PlannedEntry, Step
from .replay_log import ReplayLog

HOST_CALLS = {"fill": "{}.fill(...)", "from_numpy": "{}.from_numpy(...)", "setitem": "{}[...] = value"}


class Tape:
    """`with sp.Tape(loss=loss): forward(...)` sets loss to 0 and records the launches and host writes inside
    the block. On exit it zeroes the .grad of every needs-grad ndarray the launches touched (unless
    clear_gradients=False), seeds loss.grad = 1 and runs the recorded gradients in reverse order, each
    seeing the array contents its launch saw."""
    plans = True   # follows the plan of the thread's last Tape, and leaves its own (tape/plan.py)
    copy_write = record_copy   # ndarray.copy_from reports to it (controls.py)
    recomputes = True   # past checkpoint_budget, recomputes (recompute.py) instead of raising

    def __init__(self, loss=None, validation=False, checkpoint_budget=None, clear_gradients=True,
                 needs_grad_only=False):
        if loss is not None:
            if not getattr(loss, "_spvad_ndarray", False):
                raise ArgumentError(f"Tape(loss=...) needs an sp.ndarray, got {type(loss).__name__}")
            if loss.grad is None:
                raise ArgumentError("Tape(loss=...): the loss ndarray needs needs_grad=True")
            if loss.size != 1:
                raise ArgumentError(f"Tape(loss=...): the loss must hold a single element, got shape {loss.shape}")
        if checkpoint_budget is not None and (not isinstance(checkpoint_budget, int) or checkpoint_budget < 0):
            raise ArgumentError(f"Tape(checkpoint_budget=...) must be a number of bytes >= 0, got "
                                f"{checkpoint_budget!r}")
        if not isinstance(needs_grad_only, bool):
            raise ArgumentError(f"Tape(needs_grad_only=...) must be True or False, got {needs_grad_only!r}")
        self.loss, self.validation, self.clear_gradients = loss, validation, clear_gradients
        self.needs_grad_only = needs_grad_only   # Taichi's meaning: arrays without needs_grad are constants
        self.checkpoint_budget, self.recording = checkpoint_budget, False
        self._new_recording()

    def _new_recording(self):
        """What one `with` block records and keeps: every entry of the Tape object starts a new recording."""
        self.first_serial = float("inf")   # ndarrays created after entering (Ndarray.serial) are born in the block
        self.entries = []         # LaunchEntry / HostWriteEntry / CustomEntry, in program order
        self.inside_custom = 0
        self.arrays = {}          # id -> every ndarray a recorded launch touched (their grads are zeroed)
        self.names = {}           # id -> how messages name an ndarray ("'x' (kernel step)")
        self.markers = {}         # id -> (ndarray, its read marker) for the access checker (validation)
        self.temporary = []       # arrays given a gradient companion for this Tape only
        self.checkpoints = Checkpoints(self.checkpoint_budget)
        self.follower = None      # plan.Follower: the plan this Tape follows while its launches match
        self.builder = None       # plan.PlanBuilder: this Tape's plan, while it can make one
        self.followed = None      # the Follower of the plan this Tape followed to the end (its backward may
                                  # run as the plan's batch)
        self.recomputed_launches = 0   # forward launches run again by the backward (past checkpoint_budget)
        self.replays = None       # replay_log.ReplayLog: what a Tape with a budget needs to recompute
        if self.checkpoint_budget is not None and self.recomputes:
            self.replays = ReplayLog(self.checkpoint_budget, self.checkpoints)
            self.replays.make_room = self._start_recomputing

    @property
    def checkpoint_bytes(self):
        """Bytes of array contents this Tape kept (device-side copies) for its gradients: with a
        checkpoint_budget, the most it held at once (its copies, snapshots and what its replays kept)."""
        log = self.replays
        return self.checkpoints.nbytes if log is None else max(log.peak, log.held + self.checkpoints.nbytes)

    def read_marker(self, array):
        entry = self.markers.get(id(array))
        if entry is None:
            entry = self.markers[id(array)] = (array, Ndarray(T.i32, array.storage_shape))
        return entry[1]

    def name_of(self, array):
        return self.names.get(id(array)) or f"an ndarray of shape {array.shape}"

    # ---- recording ----
    def before_launch(self, kernel, specs, arrays, captured, scalars, ck, replay=None):
        """Called before a launch is queued (what it records: _before_launch). With a checkpoint_budget the
        launch is also noted to run again (replay_log.py); past the budget only that, and its arrays."""
        log = self.replays
        if log is None:
            return self._before_launch(kernel, specs, arrays, captured, scalars, ck, replay)
        log.launched(kernel, specs, arrays, captured, scalars, ck)   # (a budget: every launch may run again)
        if not log.recomputing:
            try:
                if not log.over_budget():
                    return self._before_launch(kernel, specs, arrays, captured, scalars, ck, replay)
            except OverBudget:
                pass
            self._start_recomputing(len(log.events) - 1)
        self._note_launch(kernel, specs, arrays, captured, ck)
        return None

    def _note_launch(self, kernel, specs, arrays, captured, ck):
        """A launch past the budget: no entry (the backward records it again), only its arrays (their .grad
        is zeroed) and the temporary .grad companions its gradient will need."""
        everything = arrays + captured
        self._register(kernel, ck, everything)
        if not (getattr(kernel, "no_grad", False) or self.inside_custom):
            self._give_temporary_grads(self._recipe(kernel, specs, arrays, everything, ck, None), everything)

    def _start_recomputing(self, anchor):
        """Past the budget: drop the copies kept so far; from now on keep snapshots (replay_log.py), the state
        now being the state before event `anchor`."""
        for entry in self.entries:
            if not isinstance(entry, (LaunchEntry, HostWriteEntry)):
                raise recompute.not_replayable(entry, self.checkpoint_budget)
        own, launches = self.checkpoints.nbytes, sum(isinstance(e, LaunchEntry) for e in self.entries)
        runtime.sync()   # (the copies made so far are queued: their buffers go back to the pool)
        self.checkpoints.release(runtime.get().spare_buffers)
        self.checkpoints = self.replays.checkpoints = Checkpoints(None)
        self.checkpoints.reserved = self.replays.held
        self.entries = []
        self.replays.start(own, launches, anchor)

    def _before_launch(self, kernel, specs, arrays, captured, scalars, ck, replay=None):
        """Called before a launch is queued (`captured`: the ndarrays its global names refer to): notes what
        its gradient reads, gives temporary gradient companions where a gradient would otherwise stop, and
        keeps what the launch will overwrite. Returns the entry to complete with `after_launch`, or None
        (launches inside a replaced function). `replay`: the launch's launch.Replay, which keeps its recipe."""
        everything = arrays + captured
        if getattr(kernel, "no_grad", False):   # @sp.no_grad: no gradient; what it overwrites is still kept
            self.stop_plans()
            self._register(kernel, ck, everything)
            self._protect_writes(kernel, launch_writes(ck, everything), everything, scalars)
            return None
        if self.follower is not None:
            step = None if self.inside_custom else self.follower.match(kernel, ck, arrays, everything, scalars)
            if step is not None:
                if step.recipe.given:
                    self._give_temporary_grads(step.recipe, everything)
                entry = PlannedEntry(kernel, step, arrays, scalars, everything)
                self.entries.append(entry)
                return entry
            self._unfollow()
        builder = self.builder
        placed = self._register(kernel, ck, everything)
        if self.inside_custom:   # a replaced function's launches only count for zeroing and writes
            self._protect_writes(kernel, launch_writes(ck, everything), everything, scalars)
            return None
        recipe = self._recipe(kernel, specs, arrays, everything, ck, replay)
        self._give_temporary_grads(recipe, everything)
        if builder is not None:
            if recipe.draws_random:   # (a fresh random key at every launch: no Tape repeats it)
                self.builder = None
            else:
                builder.steps.append(Step(weakref.ref(kernel), ck, recipe, placed[0], placed[1], scalars))
        return self._record(kernel, recipe, arrays, everything, scalars)

    def _register(self, kernel, ck, everything, versions=None):
        """Every array of a launch has its gradient zeroed, and a name for messages; while the Tape makes a
        plan, the plan places them (PlanBuilder.place's answer)."""
        known = self.arrays
        if self.builder is not None:   # the plan's arrays are those known: only the new ones are
            placed = self.builder.place(everything, versions)
            for k in placed[2]:
                known[id(everything[k])] = everything[k]
                self.names.setdefault(id(everything[k]), ArrayName(kernel, ck, k))
            return placed
        for k, a in enumerate(everything):
            if id(a) not in known:
                known[id(a)] = a
                self.names.setdefault(id(a), ArrayName(kernel, ck, k))
        return None

    def _give_temporary_grads(self, recipe, everything):
        for k in recipe.given:   # the recipe's temporary .grad companions, for this launch's arrays (global too)
            if everything[k].grad is None:
                self._give_temporary_grad(everything[k])

    def _record(self, kernel, recipe, arrays, everything, scalars, versions=None):
        """The entry of a launch (needs noted) and the copies of what it will overwrite; `versions`: those of
        `everything` at the launch, when it ran already (default: now)."""
        entry = LaunchEntry(kernel, recipe.specs, arrays, scalars, everything, recipe.post)
        if recipe.post:
            self.builder = None   # (plans hold no launch whose gradient reads what it left)
        needs, need = entry.needs, self.checkpoints.need
        for ai, key, slices in recipe.reads:
            a = everything[ai]
            version = a.version if versions is None else versions[ai]
            needs[key] = (version, need(a, version, slices, scalars))
        self.entries.append(entry)
        writes = recipe.writes if recipe.writes is not None else launch_writes(recipe.ck, everything)
        self._protect_writes(kernel, writes, everything, scalars, versions)
        return entry

    def _protect_writes(self, kernel, writes, everything, scalars, versions=None):
        for ai, slices, bumps in writes:
            a = everything[ai]
            if self.checkpoints.watches(a):
                self.checkpoints.protect(a, self.names[id(a)], Writer(kernel), slices, scalars, bumps,
                                         now=None if versions is None else versions[ai])

    def stop_plans(self):
        """A host write or a custom gradient: this Tape neither follows a plan further nor makes one."""
        self._unfollow()
        self.builder = None

    def _unfollow(self):
        """Stop following the plan: record the launches matched so far as the full path would have, with the
        versions they saw (tape/plan.py). Their gradients read their arrays' own buffers, so no copy is due."""
        follower, self.follower = self.follower, None
        if follower is None:
            return
        planned, self.entries = self.entries, []
        for entry in planned:
            step, versions = entry.step, follower.versions(entry.step)
            self._register(entry.kernel, step.ck, entry.everything, versions)
            if self.builder is not None:
                self.builder.steps.append(step)   # (placed as this Tape places them: the same)
            self._record(entry.kernel, step.recipe, entry.arrays, entry.everything, entry.scalars, versions)

    def _recipe(self, kernel, specs, arrays, everything, ck, replay):
        """What every launch of `ck` with these arrays' .grad present (and as many distinct arrays) does under a
        Tape, worked out once (Recipe): kept by the kernel, and by `replay` for its own arrays."""
        grads = tuple([a.grad is not None for a in arrays])   # (ck tells the global ones' .grad)
        if replay is not None:   # the very same objects at every launch: the number of distinct ones holds
            recipe = replay.tape_recipes.get((grads, self.needs_grad_only))
            if recipe is not None:
                return recipe
        key = (ck, grads, len({id(a) for a in everything}), self.needs_grad_only)
        recipe = kernel.tape_recipes.get(key)
        if recipe is None:
            recipe = kernel.tape_recipes[key] = Recipe(ck, grads, *self._gradient_of(kernel, specs, arrays,
                                                                                    everything),
                                                     key[2] == len(everything))
        if replay is not None:
            replay.tape_recipes[(grads, self.needs_grad_only)] = recipe
        return recipe

    def after_launch(self, entry):
        """The contents a launch left, for gradients that read them (atomic max/min winners)."""
        for ai, field, slices in entry.post:
            a = entry.everything[ai]
            entry.needs[(ai, field)] = (a.version, self.checkpoints.need(a, a.version, slices, entry.scalars))

    def _gradient_of(self, kernel, specs, arrays, everything):
        """(specs, compiled gradient, indices in `everything` of the arrays given a temporary .grad) for a launch:
        every array, argument or global, that would carry gradient from needs-grad inputs without one gets it
        (the chain would stop there); with needs_grad_only none does (it is a constant of the gradient)."""
        def give_grad(a, name, captured):
            if not self.needs_grad_only:
                self._give_temporary_grad(a)

        without = [k for k, a in enumerate(everything) if a.grad is None]
        # refuses a gradient that needs mid-launch contents, as a direct k.grad does
        specs, grad_ck = kernel.derivative_with_companions(specs, arrays, kernel.reverse_mode(everything),
                                                           give_grad)
        return specs, grad_ck, [k for k in without if everything[k].grad is not None]

    def _give_temporary_grad(self, a):
        a.grad = Ndarray(a.dtype, a.shape)
        self.temporary.append(a)

    def host_write(self, array, what, index, zero=False):
        """Called by ndarray before `fill`, `from_numpy` or `a[i] = v` changes `array` (`zero`: to zero bits,
        which a replay writes again without a copy)."""
        self.stop_plans()
        log = self.replays
        if log is not None:
            log.host_write(array, what, index, zero, seen=not (array.serial > self.first_serial and
                                                               id(array) not in self.arrays))
            if not log.recomputing:
                try:
                    if not log.over_budget():
                        return self._keep_for_host_write(array, what, index)
                except OverBudget:
                    pass
                self._start_recomputing(len(log.events) - 1)
            return None
        return self._keep_for_host_write(array, what, index)

    def _keep_for_host_write(self, array, what, index):
        if array.serial > self.first_serial and id(array) not in self.arrays:
            return   # the initialisation of an array born in the block: it overwrites nothing a launch saw
        call = HOST_CALLS[what].format(self.name_of(array))
        if recording.validating() and id(array) in self.markers:
            marks = self.markers[id(array)][1].to_numpy().reshape(array.size // max(array.width, 1) or 1, -1)
            if (marks if index is None else marks[index]).any():
                raise AutodiffRuleError(
                    f"{call} overwrites elements of {self.name_of(array)} that a recorded launch read before "
                    "under this Tape (global data access rule): the Tape keeps a copy so the gradient stays "
                    "right, at the cost of memory; write the new values into another array to avoid it")
        self.checkpoints.protect(array, self.name_of(array), f"the host write {call}", element=index)
        if array.grad is not None:
            self.entries.append(HostWriteEntry(array, index))

    # ---- the with-block ----
    def __enter__(self):
        if recording.modes.fwd:
            recording.refuse_nesting("sp.Tape", "sp.FwdMode")
        if self.recording:
            raise ArgumentError("this sp.Tape is recording already: a Tape object is entered again only after its "
                                "`with` block ended (nest a new sp.Tape instead)")
        self._new_recording()
        if self.loss is not None:   # Taichi's rule: `loss[None] += ...` starts from 0 in every Tape
            with runtime.LOCK:
                self.loss.zero_on_device(host_write=True)   # (an outer Tape sees a host write)
                if self.replays is not None:   # a replay from the start zeroes it again: no copy of it is kept
                    self.replays.host_write(self.loss, "fill", None, zero=True, seen=False)
        self.first_serial = next_serial()
        if self.plans and not self.needs_grad_only and not self.validation and self.replays is None:
            self.follower = Follower.of(recording.modes.plan, runtime.get())
            self.builder = PlanBuilder()
        recording.stack().append(self)
        self.recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        recording.stack().remove(self)
        self.recording = False
        if exc_type is not None:
            self._release()
            return False
        self.backward()
        return False

    def backward(self):
        with runtime.LOCK:   # launches, fills and copies of one thread's backward pass stay together
            try:
                self._conclude_plan()
                # the plan's batch (gradient clears, seed and launches), or launch by launch (then recorded as
                # its batch for the next Tape); a Tape that gave temporary .grad companions binds new ones
                # every time: no batch repeats it
                followed = self.followed if not self.temporary else None
                starts = self.gradient_starts()
                if self.replays is not None and self.replays.recomputing:
                    set_on_device(starts)
                    recompute.run_backward(self)
                elif followed is None or not planned_backward.run(self, followed, starts):
                    set_on_device(starts)
                    runtime.get().device.submit()   # on a GPU the forward runs while the backward is recorded
                    planned_backward.launch_by_launch(self, followed, starts)
                runtime.sync_unless_capturing()   # the only wait: the forward and the backward run as queued
            finally:
                self._release()

    def _conclude_plan(self):
        """At the end of the recording: a Tape that followed its plan to the end zeroes the plan's arrays'
        gradients; one that did not records what it followed in full; one that recorded only launches and
        kept nothing leaves its plan to the next Tape of this thread."""
        follower = self.follower
        if follower is not None and follower.finished():
            self.arrays = {id(a): a for a in follower.live}
            self.followed = follower
            return
        self._unfollow()
        cp = self.checkpoints
        if self.builder is not None and not (cp.nbytes or cp.kept or cp.broken or cp.scratch):
            recording.modes.plan = self.builder.plan(runtime.get())
        self.builder = None

    def gradient_starts(self):
        """(array, value) of what the backward pass starts from: the .grad of every array the launches touched
        zeroed (unless clear_gradients=False), loss.grad set to 1 (set_on_device queues them on the device as
        one transfer: nothing waits for the forward to finish)."""
        seed = self.loss.grad if self.loss is not None else None
        values = [(a.grad, 0) for a in self.arrays.values()
                  if a.grad is not None and a.grad is not seed] if self.clear_gradients else []
        return values + ([(seed, 1)] if seed is not None else [])

    def _release(self):
        keeper = runtime.get().capture or runtime.get().spare_buffers   # sp.capture() keeps what it binds
        self.checkpoints.release(keeper)
        if self.replays is not None:
            keeper.give(self.replays.release())
        for a in self.temporary:
            if keeper is runtime.get().capture:
                keeper.keep(a.grad)
            a.grad = None
        self.temporary = []


def clear_all_gradients():
    """Zero the .grad of every live ndarray created with needs_grad (Taichi's ti.ad.clear_all_gradients), on
    the device in launch order."""
    with runtime.LOCK:
        set_on_device([(a.grad, 0) for a in live_with_grad() if a.grad is not None])

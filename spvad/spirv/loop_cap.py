"""Which launches check whether lavapipe's loop cap cut a loop short.

lavapipe silently stops every loop of a SIMD vector of threads once the vector has taken 65,535 loop steps
in all, so a module for it ends each thread with a check (lower_loop_cut.py) that flags a vector whose limit
ran out. The check is a specialisation constant (lower.LOOP_CHECK_SPEC_ID). A launch whose loops provably
stay far below the cap (trip bounds from its scalars, shapes and thread count: ir/trip_bounds.py, which
follows the vector's steps: masked passes, both branches) sets it to 0, and lavapipe's compiler drops the
check. Loops the bounds cannot follow (while loops, bounds read from arrays, float atomics that are
compare-exchange loops: their retries depend on other threads) are always checked.
"""
from ..ir.trip_bounds import ONES, NeedsLaunchValues, Ones, TripBounds, Unbounded
from .lower import LOOP_ITERATION_CAP

# Far below the cap: a margin for steps of the driver the bounds do not follow.
SAFE_HEADERS = LOOP_ITERATION_CAP // 2
_MEMO_LIMIT = 256


class _ReadScalars:
    """Launch scalars that remember which indices a bound read (every value 1)."""

    def __init__(self):
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return 1


class LoopCheck:
    """For one task whose module checks the loop cap: whether a launch must check (`needed`). `scalars`: the
    indices of the scalar arguments the decision reads (a recorded launch replayed with other values of
    those decides again: launch/replay.py). `cas`: the bindings whose atomics are compare-exchange loops."""

    def __init__(self, task, cas=frozenset()):
        self.bounds, self.body = TripBounds(task, wraps=True, cas=cas), task.body
        self.fixed, self.scalars, self.memo = True, (), {}
        try:
            self.bounds.header_runs(self.body, ONES)
        except Unbounded:
            return                     # always checked
        try:
            self.fixed = self.bounds.header_runs(self.body, None) >= SAFE_HEADERS
        except NeedsLaunchValues:
            self.fixed = None          # decided per launch
            reads = _ReadScalars()
            self.bounds.header_runs(self.body, (reads, Ones(), 1))
            self.scalars = tuple(sorted(reads.read))

    def needed(self, scalars, shapes, num_threads):
        if self.fixed is not None:
            return self.fixed
        key = (tuple(scalars[k] for k in self.scalars), tuple(shapes), num_threads)
        need = self.memo.get(key)
        if need is None:
            if len(self.memo) > _MEMO_LIMIT:
                self.memo.clear()
            try:
                need = self.bounds.header_runs(self.body, (scalars, shapes, num_threads)) >= SAFE_HEADERS
            except Unbounded:          # e.g. a thread index bound while the device counts the threads
                need = True
            self.memo[key] = need
        return need

"""Bounds of a task's loop trip counts by interval arithmetic over the loops' begin/end: loop indices range
over their loop's interval, thread indices over [0, num_threads), a local slot written once (outside loops)
over its value, a counter slot (a gradient's trip count) over its first value plus what its increments can
add. Adstack capacities (autodiff/adstack.py) and the loop-cap count (spirv/loop_cap.py) use them: exact when
the bounds are constants, evaluated at launch when they read scalars or shapes.
"""
from .. import types as T
from . import nodes as N
from .ops import Op
from .thread_count import counts_on_device


class NeedsLaunchValues(Exception):
    """The bound depends on scalars or shapes: evaluate it at launch."""


class Unbounded(Exception):
    """No bound can be derived (data-dependent loop, while loop)."""


class Ones:
    """A stand-in for launch values (every scalar and every extent is 1) to test boundedness early."""

    def __getitem__(self, k):
        return self

    def __int__(self):
        return 1

    __index__ = __int__


ONES = (Ones(), Ones(), 1)   # launch values (scalars, shapes, num_threads) that test boundedness early


class TripBounds:
    """Trip-count bounds of the loops of `task`; `env` is (scalars, shapes, num_threads) of a launch, or None
    before one (a bound that needs them raises NeedsLaunchValues). `cas`: bindings whose atomics are
    compare-exchange loops (spirv/lower_memory.py word views), for header_runs."""

    def __init__(self, task, wraps=False, cas=frozenset()):
        self.cas = cas
        # `wraps`: a value past its dtype's range is unbounded, as the device wraps it (n - m with n near -2**31
        # is a large end there); the adstack sizes take the unwrapped bound (a wrapped count overflows, loudly)
        self.wraps = wraps
        # a thread count read from arrays is not known at launch: loops bounded by the thread index are
        # unbounded here (the adstacks' depth probe measures them, as data-dependent ones)
        self.threads_known = not counts_on_device(task)
        self.single_store = {}
        stores = {}
        loops_of = {}
        self._loops_around(task.body, (), loops_of)
        indexed = set()   # slots also written at a run-time index (SlotStore): no bound from their LocalStores
        for s in N.walk(task.body):
            if isinstance(s, N.LocalStore):
                stores.setdefault(s.slot, []).append(s)
            elif isinstance(s, N.SlotStore):
                indexed.update(s.slots)
        for slot in indexed:
            stores.pop(slot, None)
        self.counters = {}   # slot -> (its store outside loops or None, [(step, loops around an increment)])
        for slot, ss in stores.items():
            if len(ss) == 1 and not loops_of[ss[0]]:
                self.single_store[slot] = ss[0].value
            elif slot.dtype.is_int:
                self._counter(slot, ss, loops_of)
        self._counting = set()   # counter slots whose bound is being worked out (a cycle is unbounded)

    def _counter(self, slot, stores, loops_of):
        """A slot counting loop trips (a gradient's `trips`): stored once outside loops, else only increased by
        constant steps >= 0 inside loops (`slot = slot + c`)."""
        first, steps = None, []
        for s in stores:
            step = _increment(s)
            if step is not None and loops_of[s]:
                steps.append((step, loops_of[s]))
            elif first is None and not loops_of[s]:
                first = s.value
            else:
                return
        self.counters[slot] = (first, steps)

    def _loops_around(self, block, loops, out):
        for s in block.stmts:
            out[s] = loops
            inner = loops + (s,) if isinstance(s, (N.RangeFor, N.While)) else loops
            for b in s.blocks():
                self._loops_around(b, inner, out)

    def max_trips(self, loop, env):
        if isinstance(loop, N.While):
            raise Unbounded()
        memo = {}
        blo, bhi = self.interval(loop.begin, env, memo)
        elo, ehi = self.interval(loop.end, env, memo)
        span = (ehi - blo) if loop.step > 0 else (bhi - elo)
        step = abs(loop.step)
        return max(0, -(-span // step))

    def interval(self, s, env, memo):
        if s in memo:
            return memo[s]
        r = memo[s] = self._interval(s, env, memo)
        if self.wraps:
            lo, hi = T.INT_RANGE.get(getattr(s.dtype, "name", None), (r[0], r[1]))
            if r[0] < lo or r[1] > hi:
                raise Unbounded()
        return r

    def _interval(self, s, env, memo):
        if isinstance(s, N.Const) and s.dtype.is_int:
            return (int(s.value), int(s.value))
        if isinstance(s, N.ThreadIndex) and not self.threads_known:
            raise Unbounded()
        if isinstance(s, (N.ScalarArg, N.ArrayShape, N.ThreadIndex)):
            if env is None:
                raise NeedsLaunchValues()
            scalars, shapes, n = env
            if isinstance(s, N.ScalarArg):
                v = int(scalars[s.param.index])
                return (v, v)
            if isinstance(s, N.ArrayShape):
                v = int(shapes[s.array.index][s.axis])
                return (v, v)
            if n is None:
                raise Unbounded()
            return (0, max(n - 1, 0))
        if isinstance(s, N.LoopIndex):
            loop = s.loop
            blo, bhi = self.interval(loop.begin, env, memo)
            elo, ehi = self.interval(loop.end, env, memo)
            return (blo, max(blo, ehi - 1)) if loop.step > 0 else (min(elo + 1, bhi), bhi)
        if isinstance(s, N.LocalLoad) and s.slot in self.single_store and s.slot.dtype.is_int:
            lo, hi = self.interval(self.single_store[s.slot], env, memo)
            return (min(lo, 0), max(hi, 0))    # the slot is zero before its store
        if isinstance(s, N.LocalLoad) and s.slot in self.counters:
            return self._counter_interval(s.slot, env, memo)
        if isinstance(s, N.Compute) and s.dtype in (T.i32, T.u32):
            return self._compute(s, env, memo)
        raise Unbounded()

    def _counter_interval(self, slot, env, memo):
        """Zero (before any store) or its first value, plus at most every step each increment can take: the
        step times the trips of the loops around it."""
        if slot in self._counting:
            raise Unbounded()
        self._counting.add(slot)
        try:
            first, steps = self.counters[slot]
            lo, hi = self.interval(first, env, memo) if first is not None else (0, 0)
            lo, hi = min(lo, 0), max(hi, 0)
            for step, loops in steps:
                runs = 1
                for loop in loops:
                    runs *= self.max_trips(loop, env)
                hi += step * runs
            return (lo, hi)
        finally:
            self._counting.discard(slot)

    def _compute(self, s, env, memo):
        op = s.op
        if op is Op.SELECT:
            a, b = (self.interval(x, env, memo) for x in s.args[1:])
            return (min(a[0], b[0]), max(a[1], b[1]))
        if op is Op.CAST and s.args[0].dtype.is_int:
            return self.interval(s.args[0], env, memo)
        iv = [self.interval(a, env, memo) for a in s.args]
        if op is Op.NEG:
            return (-iv[0][1], -iv[0][0])
        if len(iv) != 2:
            raise Unbounded()
        (alo, ahi), (blo, bhi) = iv
        if op is Op.ADD:
            return (alo + blo, ahi + bhi)
        if op is Op.SUB:
            return (alo - bhi, ahi - blo)
        if op is Op.MUL:
            ps = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
            return (min(ps), max(ps))
        if op is Op.MIN:
            return (min(alo, blo), min(ahi, bhi))
        if op is Op.MAX:
            return (max(alo, blo), max(ahi, bhi))
        if op is Op.FLOORDIV and blo == bhi and blo > 0:
            return (alo // blo, ahi // blo)
        if op is Op.MOD and blo == bhi and blo > 0:
            return (0, blo - 1)
        raise Unbounded()

    def header_runs(self, block, env):
        """An upper bound on the loop passes one run of `block` takes, as lavapipe's loop cap counts them
        (spirv/loop_cap.py): k + 1 per entry of a loop of at most k trips, plus the loops inside it
        that its last, masked pass enters once; both branches of an If. Unbounded for a while loop, and for a
        compare-exchange atomic (a loop whose retries depend on other threads)."""
        total = 0
        for s in block.stmts:
            if isinstance(s, N.While):
                raise Unbounded()
            if isinstance(s, N.RangeFor):
                trips = self.max_trips(s, env)
                masked = sum(1 for _ in N.loops_in(s.body))
                total += trips + 1 + trips * self.header_runs(s.body, env) + masked
            elif isinstance(s, N.AtomicRMW) and (s.array.index, s.field) in self.cas:
                raise Unbounded()
            elif s.BLOCK_FIELDS:
                total += sum(self.header_runs(b, env) for b in s.blocks() if b is not None)
        return total


def _increment(store):
    """c when `store` is `slot = slot + c` with an integer constant c >= 0, else None."""
    v = store.value
    if not (isinstance(v, N.Compute) and v.op is Op.ADD and len(v.args) == 2):
        return None
    for a, b in (v.args, v.args[::-1]):
        if isinstance(a, N.LocalLoad) and a.slot is store.slot and isinstance(b, N.Const) and b.dtype.is_int \
                and int(b.value) >= 0:
            return int(b.value)
    return None

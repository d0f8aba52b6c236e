"""Adstack capacities: exact when the compiler can bound a loop's trip count, computed at launch when the
bound depends on scalar arguments or shapes, and measured on the device (a counting kernel records each
loop's largest trip count) when it depends on array data. An explicit `ad_stack_size` (kernel option, else
`sp.init`) fixes every capacity instead.

Bounds come from interval arithmetic over the loop's begin/end: loop indices range over their loop's
interval, thread indices over [0, num_threads), a local slot written once (outside loops) over its value.
"""
from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op
from ..ir.thread_count import counts_on_device



class NeedsLaunchValues(Exception):
    """The bound depends on scalars or shapes: evaluate it at launch."""


class Unbounded(Exception):
    """No bound can be derived (data-dependent loop, while loop)."""


def round_up_pow2(depth):
    return 1 << max(0, depth - 1).bit_length()


class _Ones:
    """A stand-in for launch values (every scalar and every extent is 1) to test boundedness early."""

    def __getitem__(self, k):
        return self

    def __int__(self):
        return 1

    __index__ = __int__


class StackSizer:
    """Creates the AdStackAllocas of a gradient task and computes their capacities."""

    def __init__(self, task, ad_stack_size=None):
        self.fixed = ad_stack_size
        # a thread count read from arrays is not known at launch: loops bounded by the thread index are
        # measured by the depth probe, as data-dependent ones are
        self.threads_known = not counts_on_device(task)
        self.single_store = {}
        stores = {}
        loops_of = {}
        self._loops_around(task.body, (), loops_of)
        for s in N.walk(task.body):
            if isinstance(s, N.LocalStore):
                stores.setdefault(s.slot, []).append(s)
        for slot, ss in stores.items():
            if len(ss) == 1 and not loops_of[ss[0]]:
                self.single_store[slot] = ss[0].value
        self.launch_bounds = {}     # spec id -> loop whose trip bound is evaluated at launch
        self.measured = {}          # spec id -> loop whose trip count the counting kernel measures
        self.stacks = []

    def _loops_around(self, block, loops, out):
        for s in block.stmts:
            out[s] = loops
            inner = loops + (s,) if isinstance(s, (N.RangeFor, N.While)) else loops
            for b in s.blocks():
                self._loops_around(b, inner, out)

    def new_stack(self, slot, construct):
        stack = N.AdStackAlloca(slot.dtype, None, f"{slot.name or 'v'}_stack")
        loop = construct if isinstance(construct, (N.RangeFor, N.While)) else None   # one entry per trip
        if self.fixed is not None:
            stack.capacity = int(self.fixed)
        elif loop is None:
            stack.capacity = 1       # an `if`: one snapshot per execution of the enclosing replay
        else:
            try:
                stack.capacity = max(1, self.max_trips(loop, None))
            except NeedsLaunchValues:
                try:   # bounded for any scalars/shapes, or does a data-dependent part remain?
                    self.max_trips(loop, (_Ones(), _Ones(), 1))
                    table = self.launch_bounds
                except Unbounded:
                    table = self.measured
                stack.capacity_spec_id = self._spec_id(loop, table)
                stack.capacity = 1   # default of the specialisation constant; set at every launch
            except Unbounded:
                stack.capacity_spec_id = self._spec_id(loop, self.measured)
                stack.capacity = 1
        self.stacks.append(stack)
        return stack

    def needs_measuring(self, loop):
        """Whether only the depth probe can size the stacks of `loop` (a while loop, or a trip count that
        depends on array data)."""
        if self.fixed is not None:
            return False
        try:
            self.max_trips(loop, (_Ones(), _Ones(), 1))
            return False
        except Unbounded:
            return True

    def _spec_id(self, loop, table):
        """One specialisation constant per loop (its stacks share the loop's trip count)."""
        for sid, l in list(self.launch_bounds.items()) + list(self.measured.items()):
            if l is loop:
                return sid
        sid = len(self.launch_bounds) + len(self.measured)
        table[sid] = loop
        return sid

    # ---- launch-time sizing ----
    def spec_constants(self, scalars, shapes, num_threads):
        """Capacities of the launch-sized stacks, rounded up to powers of two so that launches with
        nearby sizes share one pipeline (and one lavapipe compile)."""
        env = (scalars, shapes, num_threads)
        return {sid: round_up_pow2(self.max_trips(loop, env)) for sid, loop in self.launch_bounds.items()}

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
            return (0, max(n - 1, 0))
        if isinstance(s, N.LoopIndex):
            loop = s.loop
            blo, bhi = self.interval(loop.begin, env, memo)
            elo, ehi = self.interval(loop.end, env, memo)
            return (blo, max(blo, ehi - 1)) if loop.step > 0 else (min(elo + 1, bhi), bhi)
        if isinstance(s, N.LocalLoad) and s.slot in self.single_store and s.slot.dtype.is_int:
            lo, hi = self.interval(self.single_store[s.slot], env, memo)
            return (min(lo, 0), max(hi, 0))    # the slot is zero before its store
        if isinstance(s, N.Compute) and s.dtype in (T.i32, T.u32):
            return self._compute(s, env, memo)
        raise Unbounded()

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

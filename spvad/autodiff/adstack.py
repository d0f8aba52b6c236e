"""Adstack capacities: exact when the compiler can bound a loop's trip count, computed at launch when the
bound depends on scalar arguments or shapes, and measured on the device (a counting kernel records each
loop's largest trip count) when it depends on array data. An explicit `ad_stack_size` (kernel option, else
`sp.init`) fixes every capacity instead. Bounds come from ir/trip_bounds.py.
"""
from ..ir import nodes as N
from ..ir.trip_bounds import ONES, NeedsLaunchValues, TripBounds, Unbounded


def round_up_pow2(depth):
    return 1 << max(0, depth - 1).bit_length()


class StackSizer(TripBounds):
    """Creates the AdStackAllocas of a gradient task and computes their capacities."""

    def __init__(self, task, ad_stack_size=None):
        super().__init__(task)
        self.fixed = ad_stack_size
        self.launch_bounds = {}     # spec id -> loop whose trip bound is evaluated at launch
        self.measured = {}          # spec id -> loop whose trip count the counting kernel measures
        self.stacks = []

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
                    self.max_trips(loop, ONES)
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
            self.max_trips(loop, ONES)
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


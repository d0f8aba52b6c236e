"""A Tape's plan: the launches the last Tape of a thread recorded, so that the next Tape repeating them (a
training loop: the same launches every iteration) records each by comparing it with the plan instead of
working out what its gradient reads and what later writes would destroy.

Only a Tape that saw launches alone (no host write, custom gradient or validation) and kept nothing (every
gradient read its arrays' own buffers) makes a plan; what it did then follows from the launches: the same
kernels, compiled kernels, arrays (by identity), scalar values, .grad present and array versions relative to
each array's first launch in the Tape. A Tape following a plan checks all of that at each launch; at the
first difference (or a host write, a custom gradient, fewer or more launches, a version the plan did not
expect) it works out what the launches followed so far did, as if it had recorded them in full, and goes on
in full (tape.py `_unfollow`)."""
import weakref


class Step:
    """One launch of a plan: its kernel (a weak reference: a plan keeps no kernel alive), compiled kernel,
    tape.Recipe, the plan's array index of each array it binds (arguments, then captured globals), their
    versions relative to the array's first launch in the Tape (`rels`), and the scalars."""
    __slots__ = ("kernel", "ck", "recipe", "idx", "rels", "scalars")

    def __init__(self, kernel, ck, recipe, idx, rels, scalars):
        self.kernel, self.ck, self.recipe, self.idx, self.rels, self.scalars = kernel, ck, recipe, idx, rels, scalars


class Plan:
    """A finished Tape's steps, its arrays (weakly: a plan keeps no memory alive) in the order the launches
    first bound them, and each array's version at the Tape's end relative to its first launch."""

    def __init__(self, rt, steps, arrays, finals):
        self.rt, self.steps, self.arrays, self.finals = weakref.ref(rt), steps, arrays, finals
        self.backward = None   # planned_backward.PlannedBackward: its backward pass as a batch (False: none)
        self.dropped = 0       # batches of it dropped (planned_backward.DROPS_KEPT)


class PlanBuilder:
    """Collects the steps of a Tape recording in full: `place` the arrays of a launch, then append its Step."""

    def __init__(self):
        self.index = {}   # id(array) -> its index in `order`
        self.order = []   # the arrays, as first bound
        self.firsts = []  # their versions at their first launch
        self.steps = []

    def place(self, everything, versions=None):
        """(plan index of each array of a launch, their versions relative to their first launch, the indices
        in `everything` of the arrays first seen), before it runs; `versions`: those of `everything` then
        (default: now)."""
        index, order, firsts, idx, rels, new = self.index, self.order, self.firsts, [], [], []
        for k, a in enumerate(everything):
            version = a.version if versions is None else versions[k]
            j = index.get(id(a))
            if j is None:
                j = index[id(a)] = len(order)
                order.append(a)
                firsts.append(version)
                new.append(k)
            idx.append(j)
            rels.append(version - firsts[j])
        return idx, rels, new

    def plan(self, rt):
        return Plan(rt, self.steps, [weakref.ref(a) for a in self.order],
                    [a.version - first for a, first in zip(self.order, self.firsts)])


class Follower:
    """A Tape's progress along a plan: the plan's arrays (alive), each one's version at its first launch in
    this Tape (None before), and the number of launches matched."""

    def __init__(self, plan, live):
        self.plan, self.live, self.base, self.at = plan, live, [None] * len(live), 0

    @staticmethod
    def of(plan, rt):
        """A Follower of `plan` for a Tape of runtime `rt`, or None when the plan cannot apply."""
        if plan is None or plan.rt() is not rt:
            return None
        live = [ref() for ref in plan.arrays]
        return None if any(a is None for a in live) else Follower(plan, live)

    def match(self, kernel, ck, arrays, everything, scalars):
        """The plan's next Step when this launch is it, else None (the follower is then done with)."""
        steps = self.plan.steps
        if self.at == len(steps):
            return None
        step = steps[self.at]
        if step.kernel() is not kernel or step.ck is not ck or len(step.idx) != len(everything) or \
                step.scalars != scalars or step.recipe.grads != tuple([a.grad is not None for a in arrays]):
            return None
        live, base = self.live, self.base
        for a, j, rel in zip(everything, step.idx, step.rels):
            if live[j] is not a:
                return None
            first = base[j]
            if first is None:   # its first launch in the plan, hence (all before matched) in this Tape
                base[j] = a.version
            elif a.version - first != rel:   # a write the plan did not see
                return None
        self.at += 1
        return step

    def versions(self, step):
        """The versions of a matched step's arrays at its launch."""
        return [self.base[j] + rel for j, rel in zip(step.idx, step.rels)]

    def finished(self):
        """Whether the Tape launched all of the plan and its arrays now hold the versions the plan's did."""
        return self.at == len(self.plan.steps) and all(
            a.version - first == final for a, first, final in zip(self.live, self.base, self.plan.finals))


class PlannedEntry:
    """A launch recorded by following a plan: its gradient reads the arrays' own buffers (the plan's Tape kept
    nothing and nothing differs), so it binds them as they are."""
    __slots__ = ("kernel", "step", "arrays", "scalars", "everything")
    post = ()   # (plans hold no launch whose gradient reads the contents it left)

    def __init__(self, kernel, step, arrays, scalars, everything):
        self.kernel, self.step, self.arrays, self.scalars, self.everything = kernel, step, arrays, scalars, everything

    def backward(self, tape):
        self.kernel.grad_bound(self.step.recipe.specs, self.arrays, self.scalars, None,
                               captured=self.everything[len(self.arrays):])

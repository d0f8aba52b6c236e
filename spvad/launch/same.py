"""Identity checks over the arrays of a launch, as `map`s run in C rather than Python loops: a replayed launch
(and a Tape following its plan) checks every array at every launch."""
from itertools import repeat
from operator import attrgetter, call, is_, is_not, sub

version_of = attrgetter("version")
_grad = attrgetter("grad")


def all_is(xs, ys):
    """Whether each object of `xs` is the object at its position in `ys` (as long as each other)."""
    return all(map(is_, xs, ys))


def refs_are(refs, objects):
    """Whether each weak reference (or callable) of `refs` answers the object at its position in `objects`."""
    return all(map(is_, map(call, refs), objects))


def grads_present(arrays):
    """(whether each array has a .grad, ...)."""
    return tuple(map(is_not, map(_grad, arrays), repeat(None)))


def grads_are(refs, arrays):
    """Whether each array's .grad is what its weak reference in `refs` answers (None: none, as `no_grad`)."""
    return all(map(is_, map(call, refs), map(_grad, arrays)))


def versions_since(arrays, firsts):
    """[each array's version minus its entry in `firsts`]."""
    return list(map(sub, map(version_of, arrays), firsts))


def no_grad():
    """What `grads_are` compares an array without a .grad with (as a dead weak reference answers)."""
    return None

"""Array versions: every launch and host write that can change an ndarray's contents bumps its version."""


def companion(array, field):
    """The ndarray behind `field` of `array`: the array itself, or its .grad / .dual."""
    return array if field == "primal" else getattr(array, field)


def bump_versions(writes, arrays):
    """Every (array index, field) a launch can write now holds new contents."""
    for ai, field in writes:   # (companion, inline: a Tape's replays bump at every launch)
        a = arrays[ai]
        (a if field == "primal" else getattr(a, field)).version += 1

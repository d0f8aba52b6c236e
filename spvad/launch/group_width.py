"""The workgroup width of a launch on a CPU driver (lavapipe), where the width is a specialisation constant
(spirv/lower.py, adaptive_local_size).

lavapipe hands a dispatch's workgroups to its worker threads one at a time and runs every lane of a group, so a
launch takes as long as the lanes of the worker with the most groups: 2,304 threads in 512-wide groups are 5
groups for 2 workers, 3 x 512 lanes on one of them, against 9 x 128 in 128-wide groups. A launch takes the
width of the module, 128 or 64 with the fewest such lanes; a narrower one only for an eighth fewer (a group
costs a task of its own); at most three pipelines a kernel. MPM's substep on 2 workers, its 2,304 particles at
128: forward 0.94 -> 0.86 ms, Tape 2.86 -> 2.58 ms (medians of 6 alternating processes).
"""
NARROWER = (128, 64)
SMALL = 256   # threads: a launch this small takes the narrowest width (mass-spring's 256 particles ran faster)


def group_width(local, threads, workers):
    """Threads per workgroup for `threads` threads of a module `local` wide, on `workers` worker threads."""
    if threads <= SMALL:
        return min(local, NARROWER[-1])
    best, fewest = local, None
    for width in (local,) + NARROWER:
        if width > local:
            continue
        groups = -(-threads // width)
        lanes = -(-groups // workers) * width   # the busiest worker's groups x width
        if fewest is None or 8 * lanes < 7 * fewest:
            best, fewest = width, lanes
    return best

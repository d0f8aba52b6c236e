"""The workgroup width of a launch on a CPU driver (lavapipe), where the width is a specialisation constant
(spirv/lower.py, adaptive_local_size).

lavapipe hands a dispatch's workgroups to its worker threads one at a time and runs every lane of a group:
2,304 threads in 512-wide groups are 5 groups for 2 workers, 3 on one of them and a half-empty last one (MPM's
particle kernels). A launch takes the widest of the module's width, 128 and 64 that gives every worker 4
groups or more: at most three pipelines a kernel. MPM's substep on 2 workers: forward 0.94 -> 0.86 ms, Tape
2.86 -> 2.58 ms (medians of 6 alternating processes), with 128 for its 2,304 particles.
"""
GROUPS_PER_WORKER = 4
NARROWER = (128, 64)


def group_width(local, threads, workers):
    """Threads per workgroup for `threads` threads of a module `local` wide, on `workers` worker threads."""
    for width in (local,) + NARROWER:
        if width <= local and -(-threads // width) >= GROUPS_PER_WORKER * workers:
            return width
    return min(local, NARROWER[-1])

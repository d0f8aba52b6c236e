"""The errors a task's flag words report at sync (layout: nodes.FLAG_WORDS_HEADER, lower_memory.Layout)."""
from ..errors import AdStackOverflowError, DeviceError
from ..ir import nodes as N
from ..ir.interp import out_of_bounds_message
from ..spirv.lower_bounds import read_violation


def read_flags(where, kernel_name, rt, low, words, overflow):
    """The first error in the flag `words` of a task lowered as `low`, or None. An out-of-bounds access
    comes first (what it skipped can explain the rest), then a loop the driver cut short, then an adstack
    overflow (`overflow()` builds its error; None when the task has no stacks)."""
    error = bounds_error(where, low, words)
    if error is None and words[N.FLAG_WORDS_HEADER + len(low.adstacks)]:
        error = loop_cut_error(kernel_name, rt)
    if error is None and overflow is not None and words[0]:
        error = overflow()
    return error


def bounds_error(where, lowered, words):
    """The DeviceError of the out-of-bounds access recorded in the flag `words` (lower_bounds.py), or None."""
    found = read_violation(lowered, words)
    if found is None:
        return None
    (what, array, field, _, loc), index, shape = found
    effect = "it read 0" if what == "load" else "it was skipped"
    return DeviceError(
        f"kernel {where}: out-of-bounds {what}: {out_of_bounds_message(array, field, index, shape, loc)}\n"
        f"(sp.init(debug=True) checks every access: {effect} and the thread went on; this is the first "
        "out-of-bounds access of the launches since the last sync)")


def loop_cut_error(kernel_name, rt):
    info = rt.device.info
    lanes = info["limits"].get("subgroup_size") or 8
    return DeviceError(
        f"kernel {kernel_name}: a thread reached the driver's loop cap, so the driver stopped a loop before "
        f"it finished and the results cannot be trusted ({info['name']} runs at most "
        f"{info['limits'].get('max_loop_iterations')} loop steps for each group of {lanes} neighbouring threads, "
        "every pass of every loop counted together, a pass that only some of them need too); split the loop "
        "across launches or threads, or run it on a GPU or on the interpreter (SPVAD_BACKEND=interp)")


def overflow_error(kernel_name, stacks, words, capacity):
    """Which stacks overflowed and the depth the loop needed: depth words are written only by overflowing
    pushes (bit k of word 0 saturates at 31 stacks)."""
    hit = [k for k in range(len(stacks)) if words[N.FLAG_WORDS_HEADER + k]]
    needed = max(int(words[N.FLAG_WORDS_HEADER + k]) for k in hit)
    caps = [capacity(stacks[k]) for k in hit]
    return AdStackOverflowError(
        f"kernel {kernel_name}: an adstack overflowed on the device (capacity {max(caps)}, the "
        f"loop needed {needed}); pass ad_stack_size>={needed} (kernel option or sp.init)")

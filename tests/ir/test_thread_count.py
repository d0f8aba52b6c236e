"""The counting kernel of a thread count read from arrays (ir/thread_count.py), run by the IR interpreter: it
flags exactly the bound values the host's exact evaluation refuses (a 32-bit result out of range, a load
outside its array), and otherwise writes the groups the host would launch, folded into 2-D past 65535."""
import itertools

import numpy as np
import pytest

import spvad as sp
from spvad import types as T
from spvad.errors import ThreadCountError
from spvad.frontend import ArraySpec, build_kernel
from spvad.ir import verify
from spvad.ir.interp import OutOfBoundsError, eval_num_threads, run_kernel
from spvad.ir.thread_count import (ARGS_WORDS, ERROR_WORD, GROUPS, MAX_GROUPS_X, TAIL_GROUPS, build_count_kernel,
                                   checks, counts_on_device)


def grid(s: sp.Array, y: sp.Array):
    for i, j in sp.ndrange(s[0], s[1]):
        y[0] = 1.0


def window(s: sp.Array, y: sp.Array):
    for i in range(s[0], s[1], -3):
        y[0] = 1.0


def arithmetic(s: sp.Array, y: sp.Array):
    for i in range(s[0] * s[1] - s[2] + (-s[1])):
        y[0] = 1.0


def unsigned(u: sp.Array, y: sp.Array):
    for i in range(u[0] * u[1] + u[2] - u[1]):
        y[0] = 1.0


def indexed(s: sp.Array, y: sp.Array):
    for i in range(s[s[0]]):
        y[0] = 1.0


EXTREMES = {"i32": [0, 1, -1, 2, 3, 7, 46341, -46341, 65536, 2**30, 2**31 - 1, -2**31, -2**31 + 1],
            "u32": [0, 1, 2, 3, 65536, 65537, 2**31 - 1, 2**31, 2**32 - 1]}
HEADERS = [(grid, "i32"), (window, "i32"), (arithmetic, "i32"), (unsigned, "u32"), (indexed, "i32")]
NEVER_REFUSED = {window}   # a stepped range's count never needs more than 32 bits: no refusal can come up


def primal_task(fn, dtype):
    kernel = build_kernel(fn, [ArraySpec(getattr(T, dtype), 1), ArraySpec(T.f32, 1)])[0]
    verify.verify(kernel)
    return kernel, kernel.tasks[0]


def count_on_device(kernel, task, values, local=64, per_thread=1):
    count = verify.verify(build_count_kernel(kernel, task, local, per_thread))
    words = np.zeros(ARGS_WORDS, np.int32)
    run_kernel(count, {(0, "primal"): values, (1, "primal"): np.zeros(1, np.float32), (2, "primal"): words}, [])
    return words


def host_groups(n, local, per_thread=1):
    """The groups the host launches for n elements (launch/dispatch.py), and for a coarsened task's tail."""
    def fold(threads):
        groups = -(-threads // local)
        gx = min(groups, MAX_GROUPS_X)
        return [gx, -(-groups // gx) if groups else 0, 1]
    return fold(-(-n // per_thread)) + fold(n % per_thread if per_thread > 1 else 0)


@pytest.mark.parametrize("fn,dtype", HEADERS, ids=[f.__name__ for f, _ in HEADERS])
def test_the_device_count_agrees_with_the_host(fn, dtype, rng):
    kernel, task = primal_task(fn, dtype)
    assert counts_on_device(task)
    picks = list(itertools.product(EXTREMES[dtype], repeat=3))
    seen = set()
    for k in rng.choice(len(picks), 150, replace=False):
        values = np.array(picks[k], T.storage_np_dtype(getattr(T, dtype)))
        try:
            n = eval_num_threads(task, [], [values.shape, (1,)], {(0, "primal"): values})
        except (ThreadCountError, OutOfBoundsError) as e:
            n = e
        words = count_on_device(kernel, task, values)
        seen.add(type(n).__name__ if isinstance(n, Exception) else n > 0)
        if isinstance(n, Exception):
            assert words[ERROR_WORD] > 0, (values, n)
            assert words[GROUPS] == words[TAIL_GROUPS] == 0, values   # no thread runs
            assert checks(task)[words[ERROR_WORD] - 1].loc is not None   # the message names the source
        else:
            assert words[ERROR_WORD] == 0, (values, n)
            assert list(words[:ERROR_WORD]) == host_groups(n, 64), (values, n)
    if fn in NEVER_REFUSED:
        assert seen == {True, False}, seen
    else:
        assert {True, False} <= seen and len(seen) > 2, seen   # counts, empty loops and refusals all came up


@pytest.mark.parametrize("n,local,per_thread", [(0, 64, 1), (5, 64, 4), (4, 512, 4), (2**31 - 1, 64, 1),
                                                (2**31 - 1, 512, 4), (65535 * 512 + 1, 512, 1),
                                                (65535 * 2048 + 7, 512, 4)])
def test_groups_fold_into_2d_and_a_coarsened_task_gets_its_tail(n, local, per_thread):
    kernel, task = primal_task(grid, "i32")
    words = count_on_device(kernel, task, np.array([n, 1, 0], np.int32), local, per_thread)
    assert list(words[:ERROR_WORD]) == host_groups(n, local, per_thread)
    assert words[GROUPS] <= MAX_GROUPS_X and words[GROUPS + 1] <= MAX_GROUPS_X
    assert words[TAIL_GROUPS] == (1 if per_thread > 1 and n % per_thread else 0)


def test_host_evaluation_without_the_arrays_is_refused():
    kernel, task = primal_task(grid, "i32")
    with pytest.raises(Exception, match="without the arrays"):
        eval_num_threads(task, [], [(3,), (1,)])


def stepped(step):
    def header(s: sp.Array, y: sp.Array):
        for i in range(s[0], s[1], step):
            y[0] = 1.0
    return header


@pytest.mark.parametrize("step", [1, -1, 2, -2, 3, -3, 7, 65536, 2**31 - 1, -(2**31 - 1)])
def test_a_stepped_count_is_len_of_the_range_at_the_extremes_on_host_and_device(step):
    """len(range(lo, hi, step)) on the host and in the counting kernel for every pair of extreme bounds: the
    count formula leaves 32 bits only where the count itself does (more than 2**31 - 1 threads), never in an
    intermediate such as hi - lo + |step| - 1 (range(0, 2**31 - 1, 3) has 715,827,883 threads)."""
    kernel, task = primal_task(stepped(step), "i32")
    for lo, hi in itertools.product(EXTREMES["i32"], repeat=2):
        want = len(range(lo, hi, step))
        values = np.array([lo, hi], np.int32)
        words = count_on_device(kernel, task, values, local=512)
        if want > 2**31 - 1:
            with pytest.raises(ThreadCountError):
                eval_num_threads(task, [], [values.shape, (1,)], {(0, "primal"): values})
            assert words[ERROR_WORD] > 0 and words[GROUPS] == 0, (lo, hi)
            continue
        assert eval_num_threads(task, [], [values.shape, (1,)], {(0, "primal"): values}) == want, (lo, hi)
        assert words[ERROR_WORD] == 0 and list(words[:ERROR_WORD]) == host_groups(want, 512), (lo, hi)


@pytest.mark.parametrize("lo,hi,step", [(0, 2**31 - 1, 3), (-2**31, 2**31 - 1, 3), (2**31 - 1, -2**31, -3),
                                        (-2**31 + 1, 2**31 - 1, 2), (5, 2**31 - 1, 2**31 - 1), (1, -2**31, 1)])
def test_counts_near_2_31_from_constants_and_scalars(lo, hi, step):
    """The same counts from constant bounds (counted when compiled) and from scalar arguments (by the host)."""
    def constant(y: sp.Array):
        for i in range(lo, hi, step):
            y[0] = 1.0

    def scalar(y: sp.Array, a: sp.i32, b: sp.i32):
        for i in range(a, b, step):
            y[0] = 1.0
    want = len(range(lo, hi, step))
    assert 0 <= want <= 2**31 - 1
    task = build_kernel(constant, [ArraySpec(T.f32, 1)])[0].tasks[0]
    assert eval_num_threads(task, [], [(1,)]) == want
    task = build_kernel(scalar, [ArraySpec(T.f32, 1), T.i32, T.i32])[0].tasks[0]
    assert eval_num_threads(task, [lo, hi], [(1,)]) == want


def test_a_constant_count_past_2_31_is_refused_when_compiled():
    def constant(y: sp.Array):
        for i in range(-2**31, 2**31 - 1, 2):   # 2**31 threads
            y[0] = 1.0
    with pytest.raises(ThreadCountError, match="2,147,483,648 threads"):
        build_kernel(constant, [ArraySpec(T.f32, 1)])

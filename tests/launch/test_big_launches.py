"""Launches past 2**31 - 1 threads cannot be indexed with 32-bit thread indices: they are refused with a
ThreadCountError (an ArgumentError) instead of wrapping to fewer threads, or none."""
import pytest

import spvad as sp


@sp.kernel
def count_2d(a: sp.Array):
    for i, j in sp.ndrange(2, 2**30 + 1):
        a[0] += 1.0


@sp.kernel
def count_n(a: sp.Array, n: sp.u32):
    for i in range(n):
        a[0] += 1.0


@sp.kernel
def count_grid(a: sp.Array, n: sp.i32, m: sp.i32):
    for i, j in sp.ndrange(n, m):
        a[0] += 1.0


def test_constant_thread_count_past_2_31_is_refused():
    a = sp.ndarray(sp.f32, (1,))
    with pytest.raises(sp.ArgumentError, match="2,147,483,650 threads") as info:
        count_2d(a)
    assert "ndrange(2, 2**30 + 1)" in str(info.value)
    assert isinstance(info.value, sp.ThreadCountError)


@pytest.mark.parametrize("kernel,args", [(count_n, (2**31 + 5,)), (count_n, (2**32 - 1,)),
                                         (count_grid, (2**16, 2**15 + 1)), (count_grid, (65536, 65536))])
def test_runtime_thread_count_past_2_31_is_refused(kernel, args):
    a = sp.ndarray(sp.f32, (1,))
    with pytest.raises(sp.ThreadCountError, match="2\\*\\*31 - 1"):
        kernel(a, *args)
    kernel(a, *[min(v, 100) for v in args])   # the runtime stays usable; small launches still run
    assert a[0] == (100 if kernel is count_n else 100 * 100)

"""Element-wise kernels over a scalar function `f` of 1, 2 or 3 arguments, for the tables that check a function's
values and derivatives (tests/autodiff/test_edge_conventions.py, tests/kernel/test_more_math.py), and what a
kernel calls for an IR Op (tests/spirv/test_libm_bits.py, benchmarks/libm_bits.py)."""
import spvad as sp
from spvad.ir.ops import Op


@sp.func
def power(x, y):
    return x ** y


@sp.func
def modulo(x, y):
    return x % y


SPELLED = {Op.POW: power, Op.MOD: modulo}   # ops a kernel spells as operators (else sp.<name>)


def call_of(op):
    """What a kernel calls to compute `op`: sp.<name>, or a func spelling it as its operator."""
    return SPELLED.get(op) or getattr(sp, op.value)


def elementwise(f, nargs):
    """`y[i] = f(args[i])`, and the summed form `loss[None] += f(args[i])` for sp.Tape."""
    if nargs == 1:
        @sp.kernel
        def one(a: sp.Array, y: sp.Array):
            for i in range(a.shape[0]):
                y[i] = f(a[i])

        @sp.kernel
        def one_sum(a: sp.Array, loss: sp.Array):
            for i in range(a.shape[0]):
                loss[None] += f(a[i])
        return one, one_sum
    if nargs == 2:
        @sp.kernel
        def two(a: sp.Array, b: sp.Array, y: sp.Array):
            for i in range(a.shape[0]):
                y[i] = f(a[i], b[i])

        @sp.kernel
        def two_sum(a: sp.Array, b: sp.Array, loss: sp.Array):
            for i in range(a.shape[0]):
                loss[None] += f(a[i], b[i])
        return two, two_sum

    @sp.kernel
    def three(a: sp.Array, b: sp.Array, c: sp.Array, y: sp.Array):
        for i in range(a.shape[0]):
            y[i] = f(a[i], b[i], c[i])

    @sp.kernel
    def three_sum(a: sp.Array, b: sp.Array, c: sp.Array, loss: sp.Array):
        for i in range(a.shape[0]):
            loss[None] += f(a[i], b[i], c[i])
    return three, three_sum

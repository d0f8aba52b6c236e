"""`sp.random(dtype)` / `sp.randn(dtype)` in kernels: a counter-based generator made of integer IR ops.

Every draw is a pure function of a key, so a gradient kernel that recomputes the forward body (and the
depth probe sizing its adstacks) draws the very numbers the forward launch drew:

    launch key  = mix(seed of sp.init, per-launch counter)    a hidden u32 scalar argument (host side)
    thread key  = pcg(launch key ^ pcg(thread index))
    value       = pcg(pcg(thread key ^ SITE[call site]) ^ pcg(draw))

`pcg` is the PCG-RXS-M-XS 32-bit output hash (Jarzynski & Olano, "Hash Functions for GPU Rendering", 2020),
a bijection of u32. A call site is numbered in the order the frontend compiles the kernel's random calls,
so each call of an inlined @sp.func and each copy of an sp.static loop gets its own; `draw` counts the
thread's draws so far (a local slot), so a call in a loop, or in a `while` condition, gets new numbers every
iteration (outside loops the slot's values are constants the optimiser forwards). Integer ops and casts
carry no gradient: the numbers are constants for both autodiff modes.
"""
import math

from .. import types as T
from ..ir import nodes as N
from ..ir.ops import Op
from .rows import with_keywords

RANDOM_KEY = "random.key"   # the hidden u32 scalar parameter: no Python parameter can have this name
_MASK = 0xFFFFFFFF
_PCG_MUL, _PCG_INC, _PCG_OUT = 747796405, 2891336453, 277803737


# ---- the host side: the launch key, and what a compiled kernel needs ----------------------------------
def pcg_hash(v):
    """The device's `pcg` on a Python int (same bits)."""
    state = (v * _PCG_MUL + _PCG_INC) & _MASK
    word = (((state >> ((state >> 28) + 4)) ^ state) * _PCG_OUT) & _MASK
    return (word >> 22) ^ word


def launch_key(seed, launch):
    """The u32 key of forward launch number `launch` (counted per runtime) under `sp.init(random_seed=seed)`:
    each 32-bit word of both folded in with a bijective hash, so neighbouring seeds and launches give
    unrelated keys (32 bits: two launches share a key with probability 2**-32)."""
    h = 0
    for word in (seed & _MASK, seed >> 32, launch & _MASK, launch >> 32):
        h = pcg_hash(h ^ (word & _MASK))
    return h


def random_key_index(kernel):
    """Index of the hidden random key among `kernel.scalars` (IR), or None when it draws no random number."""
    for p in reversed(kernel.scalars):
        if p.name == RANDOM_KEY:
            return p.index
    return None


# ---- the frontend -------------------------------------------------------------------------------------
class RandomState:
    """Per kernel build: the hidden key parameter, the call sites numbered so far, each task's draw counter."""

    def __init__(self):
        self.key_param = None
        self.sites = 0
        self.draw_slots = {}      # task -> u32 Alloca counting the thread's draws


def random_call(b, name, args, kw):
    """`sp.random(dtype=sp.f32)` or `sp.randn(dtype=sp.f32)`: one number per call (the rows of CALLS)."""
    dtype = random_dtype(b, name, args, kw)
    if b.task is None:
        b.error(f"sp.{name}() must be called inside a loop or statement of the kernel body")
    if name == "randn":
        return normal_from(b, random_word(b), dtype)
    word = random_word(b)
    if dtype.is_int:
        return b.cast(word, dtype)   # i32: the same 32 bits
    return uniform_from(b, word, dtype)


def random_dtype(b, name, args, kw):
    unknown = set(kw) - {"dtype"}
    if unknown or len(args) + len(kw) > 1:
        b.error(f"sp.{name} takes one optional argument, the dtype (e.g. sp.{name}(sp.f32))")
    dtype = kw.get("dtype", args[0] if args else T.f32)
    dtype = {float: T.DEFAULT_FLOAT, int: T.DEFAULT_INT}.get(dtype, dtype)
    allowed = "sp.f32 or sp.f64" + (", sp.i32 or sp.u32" if name == "random" else "")
    if not isinstance(dtype, T.DType) or dtype.is_bool or (name == "randn" and not dtype.is_float):
        what = "bool (sp.u1)" if dtype == T.u1 else dtype.name if isinstance(dtype, T.DType) else repr(dtype)
        hint = "; for a random bool use sp.random(sp.u32) & 1 == 1" if dtype == T.u1 else ""
        b.error(f"sp.{name} draws {allowed} numbers, not {what}{hint}")
    return dtype


# ---- the key of one draw ----
def random_word(b):
    """A fresh u32 for this draw (call site, loop iteration) of this thread of this launch."""
    st = b.random
    if st.key_param is None:
        st.key_param = N.ScalarParam(RANDOM_KEY, T.u32, len(b.kernel.scalars))
        b.kernel.scalars.append(st.key_param)
    key = b.emit(N.ScalarArg(st.key_param))
    tid = b.cast(b.emit(N.ThreadIndex()), T.u32) if b.task.kind == "parallel" else u32(b, 0)
    thread_key = pcg(b, xor(b, key, pcg(b, tid)))
    word = pcg(b, xor(b, thread_key, u32(b, pcg_hash(st.sites))))
    st.sites += 1
    slot = st.draw_slots.get(b.task)
    if slot is None:
        slot = st.draw_slots[b.task] = b.new_slot(T.u32, "random_draws")
    draw = b.emit(N.LocalLoad(slot))
    b.emit(N.LocalStore(slot, b.compute(Op.ADD, draw, u32(b, 1))))
    return pcg(b, xor(b, word, pcg(b, draw)))


# ---- u32 arithmetic (wrapping, as on the device and in the interpreter) ----
def u32(b, value):
    return b.const(value & _MASK, T.u32)


def xor(b, x, y):
    return b.compute(Op.BIT_XOR, x, y)


def pcg(b, v):
    state = b.compute(Op.ADD, b.compute(Op.MUL, v, u32(b, _PCG_MUL)), u32(b, _PCG_INC))
    shift = b.compute(Op.ADD, b.compute(Op.SHR, state, u32(b, 28)), u32(b, 4))
    word = b.compute(Op.MUL, xor(b, b.compute(Op.SHR, state, shift), state), u32(b, _PCG_OUT))
    return xor(b, b.compute(Op.SHR, word, u32(b, 22)), word)


# ---- from words to numbers ----
def uniform_from(b, word, dtype, open_at_zero=False):
    """A float in [0, 1) from the top 24 (f32) or 53 (f64: two words) bits: every step is exact, so the
    device and the interpreter give the same bits. `open_at_zero`: in (0, 1] instead (for a log)."""
    if dtype == T.f32:
        bits = b.compute(Op.SHR, word, u32(b, 8))
        if open_at_zero:
            bits = b.compute(Op.ADD, bits, u32(b, 1))   # at most 2**24: still exact in f32
        return b.compute(Op.MUL, b.cast(bits, T.f32), b.const(2.0 ** -24, T.f32))
    high = b.cast(b.compute(Op.SHR, word, u32(b, 5)), T.f64)              # 27 bits
    low = b.cast(b.compute(Op.SHR, pcg(b, word), u32(b, 6)), T.f64)     # 26 bits
    value = b.compute(Op.ADD, b.compute(Op.MUL, high, b.const(2.0 ** 26, T.f64)), low)
    if open_at_zero:
        value = b.compute(Op.ADD, value, b.const(1.0, T.f64))   # at most 2**53: exact
    return b.compute(Op.MUL, value, b.const(2.0 ** -53, T.f64))


def normal_from(b, word, dtype):
    """Box-Muller: sqrt(-2 log u1) cos(2 pi u2), u1 in (0, 1] (no log of 0), u2 in [0, 1)."""
    second = pcg(b, word) if dtype == T.f32 else pcg(b, pcg(b, word))   # f64 uses two words each
    u1 = uniform_from(b, word, dtype, open_at_zero=True)
    u2 = uniform_from(b, second, dtype)
    radius = b.compute(Op.SQRT, b.compute(Op.MUL, b.const(-2.0, dtype), b.compute(Op.LOG, u1)))
    angle = b.compute(Op.MUL, b.const(2.0 * math.pi, dtype), u2)
    return b.compute(Op.MUL, radius, b.compute(Op.COS, angle))


CALLS = {"random": with_keywords(lambda b, args, kw: random_call(b, "random", args, kw)),
         "randn": with_keywords(lambda b, args, kw: random_call(b, "randn", args, kw))}

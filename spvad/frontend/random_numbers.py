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

RANDOM_BUILTINS = ("random", "randn")
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


class RandomMixin:
    def random_call(self, name, args, kw):
        """`sp.random(dtype=sp.f32)` or `sp.randn(dtype=sp.f32)`: one number per call."""
        dtype = self.random_dtype(name, args, kw)
        if self.task is None:
            self.error(f"sp.{name}() must be called inside a loop or statement of the kernel body")
        if name == "randn":
            return self.normal_from(self.random_word(), dtype)
        word = self.random_word()
        if dtype.is_int:
            return self.cast(word, dtype)   # i32: the same 32 bits
        return self.uniform_from(word, dtype)

    def random_dtype(self, name, args, kw):
        unknown = set(kw) - {"dtype"}
        if unknown or len(args) + len(kw) > 1:
            self.error(f"sp.{name} takes one optional argument, the dtype (e.g. sp.{name}(sp.f32))")
        dtype = kw.get("dtype", args[0] if args else T.f32)
        dtype = {float: T.DEFAULT_FLOAT, int: T.DEFAULT_INT}.get(dtype, dtype)
        allowed = "sp.f32 or sp.f64" + (", sp.i32 or sp.u32" if name == "random" else "")
        if not isinstance(dtype, T.DType) or dtype.is_bool or (name == "randn" and not dtype.is_float):
            what = "bool (sp.u1)" if dtype == T.u1 else dtype.name if isinstance(dtype, T.DType) else repr(dtype)
            hint = "; for a random bool use sp.random(sp.u32) & 1 == 1" if dtype == T.u1 else ""
            self.error(f"sp.{name} draws {allowed} numbers, not {what}{hint}")
        return dtype

    # ---- the key of one draw ----
    def random_word(self):
        """A fresh u32 for this draw (call site, loop iteration) of this thread of this launch."""
        st = self.random
        if st.key_param is None:
            st.key_param = N.ScalarParam(RANDOM_KEY, T.u32, len(self.kernel.scalars))
            self.kernel.scalars.append(st.key_param)
        key = self.emit(N.ScalarArg(st.key_param))
        tid = self.cast(self.emit(N.ThreadIndex()), T.u32) if self.task.kind == "parallel" else self.u32(0)
        thread_key = self.pcg(self.xor(key, self.pcg(tid)))
        word = self.pcg(self.xor(thread_key, self.u32(pcg_hash(st.sites))))
        st.sites += 1
        slot = st.draw_slots.get(self.task)
        if slot is None:
            slot = st.draw_slots[self.task] = self.new_slot(T.u32, "random_draws")
        draw = self.emit(N.LocalLoad(slot))
        self.emit(N.LocalStore(slot, self.compute(Op.ADD, draw, self.u32(1))))
        return self.pcg(self.xor(word, self.pcg(draw)))

    # ---- u32 arithmetic (wrapping, as on the device and in the interpreter) ----
    def u32(self, value):
        return self.const(value & _MASK, T.u32)

    def xor(self, a, b):
        return self.compute(Op.BIT_XOR, a, b)

    def pcg(self, v):
        state = self.compute(Op.ADD, self.compute(Op.MUL, v, self.u32(_PCG_MUL)), self.u32(_PCG_INC))
        shift = self.compute(Op.ADD, self.compute(Op.SHR, state, self.u32(28)), self.u32(4))
        word = self.compute(Op.MUL, self.xor(self.compute(Op.SHR, state, shift), state), self.u32(_PCG_OUT))
        return self.xor(self.compute(Op.SHR, word, self.u32(22)), word)

    # ---- from words to numbers ----
    def uniform_from(self, word, dtype, open_at_zero=False):
        """A float in [0, 1) from the top 24 (f32) or 53 (f64: two words) bits: every step is exact, so the
        device and the interpreter give the same bits. `open_at_zero`: in (0, 1] instead (for a log)."""
        if dtype == T.f32:
            bits = self.compute(Op.SHR, word, self.u32(8))
            if open_at_zero:
                bits = self.compute(Op.ADD, bits, self.u32(1))   # at most 2**24: still exact in f32
            return self.compute(Op.MUL, self.cast(bits, T.f32), self.const(2.0 ** -24, T.f32))
        high = self.cast(self.compute(Op.SHR, word, self.u32(5)), T.f64)              # 27 bits
        low = self.cast(self.compute(Op.SHR, self.pcg(word), self.u32(6)), T.f64)     # 26 bits
        value = self.compute(Op.ADD, self.compute(Op.MUL, high, self.const(2.0 ** 26, T.f64)), low)
        if open_at_zero:
            value = self.compute(Op.ADD, value, self.const(1.0, T.f64))   # at most 2**53: exact
        return self.compute(Op.MUL, value, self.const(2.0 ** -53, T.f64))

    def normal_from(self, word, dtype):
        """Box-Muller: sqrt(-2 log u1) cos(2 pi u2), u1 in (0, 1] (no log of 0), u2 in [0, 1)."""
        second = self.pcg(word) if dtype == T.f32 else self.pcg(self.pcg(word))   # f64 uses two words each
        u1 = self.uniform_from(word, dtype, open_at_zero=True)
        u2 = self.uniform_from(second, dtype)
        radius = self.compute(Op.SQRT, self.compute(Op.MUL, self.const(-2.0, dtype), self.compute(Op.LOG, u1)))
        angle = self.compute(Op.MUL, self.const(2.0 * math.pi, dtype), u2)
        return self.compute(Op.MUL, radius, self.compute(Op.COS, angle))

"""Weakly typed floats, as JAX types Python scalars: an f32 value whose type is only the default float's (a
Python number, an operation on such values, a local holding only such values) takes the type of the f64 value it
meets, computed again in f64 (exact literals); a local started from one is f64 when an f64 is stored into it, or
when it holds only weak values and meets an f64. Locals are widened by building the kernel again.
"""
from dataclasses import dataclass

from .. import types as T
from ..ir import nodes as N
from ..ir.emit import PY_SCALARS, Emitter
from ..ir.ops import Op


@dataclass(frozen=True)
class Widening:
    """What earlier builds of a kernel found, by local key (name, Loc, occurrence): the weak locals to make
    f64, and those an f32 value of their own type was stored into (strong: they keep f32)."""
    wide: frozenset = frozenset()
    strong: frozenset = frozenset()


class WeakFloats(Emitter):
    """Emitter that knows which f32 values are weak and widens them where they meet f64. Weakness is worked out
    only where an f64 is met (a cast to f64, a store of one, the end of a build that met one), not on every
    statement: kernels without f64 see no difference, and are built once, to the very same IR."""

    def __init__(self, plan=Widening()):
        super().__init__()
        self.plan = plan
        self.weakness = {}          # f32 statement -> whether its type is only the default float's (memo)
        self.first_values = {}      # f32 local -> the values it starts from: weak ones make it widenable
        self.widenable_memo = {}
        self.slot_keys = {}         # Alloca -> its key: the same local in every build
        self.key_counts = {}
        self.slot_groups = {}       # Alloca -> every slot of its vector / matrix local (one unit)
        self.stored_f64 = set()     # weak locals an f64 was stored into
        self.met_f64 = set()        # weak locals whose loads met an f64
        self.f32_stores = []        # (local, value): f32 values stored into locals that may be weak

    # ---- which values are weak ----
    def is_weak(self, v):
        """A Python number, or an f32 statement whose type is the default's."""
        if isinstance(v, PY_SCALARS):
            return True
        if not isinstance(v, N.Stmt):
            return False
        known = self.weakness.get(v)
        if known is None:
            dtype = v.dtype   # compared by name: cheaper than DType's __eq__
            known = self.weakness[v] = dtype is not None and dtype.name == "f32" and self.weak_result(v)
        return known

    def weak_result(self, s):
        if isinstance(s, N.Const):
            return True   # a number written in the program (an explicit conversion makes it strong)
        if isinstance(s, N.Compute):   # an integer value made float is f32 as numpy's default (`i / 3`)
            floats = [a for a in s.args if a.dtype.is_float]
            return s.op is not Op.CAST and bool(floats) and all(self.is_weak(a) for a in floats)
        if isinstance(s, N.LocalLoad):
            return self.holds_weak(s.slot)
        if isinstance(s, N.SlotSelect):
            return self.holds_weak(s.slots[0])
        return False

    def strong(self, v):
        """`v` after an explicit conversion (`sp.f32(0.0)`, `sp.cast`, an annotation): its type is meant."""
        if isinstance(v, N.Stmt):
            self.weakness[v] = False
        return v

    # ---- values meeting f64 ----
    def convert(self, v, dtype):
        if dtype.name == "f64" and self.is_weak(v):
            return self.widen(v, {})
        return super().convert(v, dtype)

    def widen(self, v, done):
        """Weak `v` in f64: its literals again in f64, and its operations on them; a weak local's load
        converted (the next build may make that local f64)."""
        if v in done:
            return done[v]
        if isinstance(v, N.Const):
            out = self.const(v.value, T.f64)
        elif isinstance(v, N.Compute):
            out = self.compute(v.op, *[self.widen(a, done) if self.is_weak(a) else a for a in v.args])
        else:
            self.met_f64.add(v.slots[0] if isinstance(v, N.SlotSelect) else v.slot)
            out = super().convert(v, T.f64)
        done[v] = out
        return out

    # ---- locals ----
    def local_slot(self, dtype, name, first_values):
        """A new local's Alloca; f64 when it is f32, all its `first_values` are weak and an earlier build
        widened it."""
        base = (name, self.loc)
        n = self.key_counts[base] = self.key_counts.get(base, -1) + 1
        key = base + (n,)
        slot = N.Alloca(dtype, name)
        self.slot_keys[slot] = key
        if first_values and dtype.name == "f32":
            self.first_values[slot] = first_values
            if key in self.plan.wide and self.widenable(slot):
                slot.dtype = T.f64
        return slot

    def widenable(self, slot):
        """An f32 local whose first values were weak: an f64 stored into it widens it."""
        known = self.widenable_memo.get(slot)
        if known is None:
            first = self.first_values.get(slot)
            known = self.widenable_memo[slot] = first is not None and all(map(self.is_weak, first))
        return known

    def holds_weak(self, slot):
        """Its loads are weak: widenable and no strong f32 was stored into it (in earlier builds)."""
        return self.widenable(slot) and self.slot_keys[slot] not in self.plan.strong

    def note_store(self, slot, value):
        """A store into a local (the first slot of a vector local addressed at run time); a return slot that
        funcs.py widened in place already takes what is stored."""
        if slot.dtype.name != "f32" or slot not in self.first_values:
            return
        if value.dtype.name == "f64":
            if self.widenable(slot):
                self.stored_f64.add(slot)
        else:
            self.f32_stores.append((slot, value))

    def next_widening(self):
        """What the next build should widen; `self.plan` itself when nothing more (the build is final)."""
        if not self.stored_f64 and not self.met_f64:
            return self.plan
        weak_stores, strong = [], set()
        for slot, value in self.f32_stores:
            if not self.widenable(slot):
                continue
            if self.is_weak(value):
                weak_stores.append((slot, value))
            else:
                strong.update(self.group(slot))
        wide = set().union(*map(self.group, self.stored_f64))
        wide.update(*[self.group(slot) for slot in self.met_f64 if not strong & set(self.group(slot))])
        sources = [(slot, weak_locals_read(self, value)) for slot, value in weak_stores]
        grew = True
        while grew:   # a weak value read from a widened local makes the local it is stored into f64 too
            grew = False
            for slot, read in sources:
                if slot not in wide and wide & read:
                    wide.update(self.group(slot))
                    grew = True
        keys = self.slot_keys
        return Widening(self.plan.wide | {keys[s] for s in wide}, self.plan.strong | {keys[s] for s in strong})

    def group(self, slot):
        """The slots widened with `slot`: every component of its vector or matrix local."""
        return self.slot_groups.get(slot, (slot,))


def weak_locals_read(b, value):
    """The weak locals whose loads the weak `value` is computed from."""
    found, todo, seen = set(), [value], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, N.LocalLoad):
            found.add(v.slot)
        elif isinstance(v, N.SlotSelect):
            found.update(v.slots)
        elif isinstance(v, N.Compute):
            todo.extend(a for a in v.args if b.is_weak(a))
    return found

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
    """Emitter marking weak f32 values and widening them where they meet f64. Kernels without f64 see no
    difference: nothing is widened, and they are built once, to the very same IR."""

    def __init__(self, plan=Widening()):
        super().__init__()
        self.plan = plan
        self.weak = set()           # f32 statements whose type is only the default float's
        self.widenable = set()      # f32 locals whose first value was weak: an f64 stored widens them
        self.weak_slots = set()     # those holding only weak values (in earlier builds): their loads are weak
        self.slot_keys = {}         # Alloca -> its key: the same local in every build
        self.key_counts = {}
        self.slot_groups = {}       # Alloca -> every slot of its vector / matrix local (one unit)
        self.stored_f64 = set()     # weak locals an f64 was stored into
        self.met_f64 = set()        # weak locals whose loads met an f64
        self.strong_stored = set()  # weak locals an f32 value of a strong type was stored into
        self.weak_stores = []       # (local, value): weak values stored into weak locals (how widening spreads)

    # ---- marking ----
    def emit(self, stmt):
        super().emit(stmt)
        dtype = stmt.dtype   # compared by name: on every statement, cheaper than DType's __eq__
        if dtype is not None and dtype.name == "f32" and self.weak_result(stmt):
            self.weak.add(stmt)
        return stmt

    def weak_result(self, s):
        if isinstance(s, N.Const):
            return True   # a number written in the program (an explicit conversion makes it strong)
        if isinstance(s, N.Compute):   # an integer value made float is f32 as numpy's default (`i / 3`)
            floats = [a for a in s.args if a.dtype.is_float]
            return s.op is not Op.CAST and bool(floats) and all(a in self.weak for a in floats)
        if isinstance(s, N.LocalLoad):
            return s.slot in self.weak_slots
        if isinstance(s, N.SlotSelect):
            return s.slots[0] in self.weak_slots
        return False

    def is_weak(self, v):
        """A Python number, or an f32 statement whose type is the default's."""
        return isinstance(v, PY_SCALARS) or (isinstance(v, N.Stmt) and v in self.weak)

    def strong(self, v):
        """`v` after an explicit conversion (`sp.f32(0.0)`, `sp.cast`, an annotation): its type is meant."""
        if isinstance(v, N.Stmt):
            self.weak.discard(v)
        return v

    # ---- values meeting f64 ----
    def cast(self, v, dtype):
        if isinstance(v, N.Stmt) and v in self.weak and dtype == T.f64:
            return self.widen(v, {})
        return super().cast(v, dtype)

    def widen(self, v, done):
        """Weak `v` in f64: its literals again in f64, and its operations on them; a weak local's load
        converted (the next build may make that local f64)."""
        if v in done:
            return done[v]
        if isinstance(v, N.Const):
            out = self.const(v.value, T.f64)
        elif isinstance(v, N.Compute):
            out = self.compute(v.op, *[self.widen(a, done) if a in self.weak else a for a in v.args])
        else:
            self.met_f64.add(v.slots[0] if isinstance(v, N.SlotSelect) else v.slot)
            out = super().cast(v, T.f64)
        done[v] = out
        return out

    # ---- locals ----
    def local_slot(self, dtype, name, weak):
        """A new local's Alloca, f64 for a weak f32 one an earlier build widened."""
        base = (name, self.loc)
        n = self.key_counts[base] = self.key_counts.get(base, -1) + 1
        key = base + (n,)
        weak = weak and dtype == T.f32
        slot = N.Alloca(T.f64 if weak and key in self.plan.wide else dtype, name)
        self.slot_keys[slot] = key
        if weak and slot.dtype == T.f32:
            self.widenable.add(slot)
            if key not in self.plan.strong:
                self.weak_slots.add(slot)
        return slot

    def note_store(self, slot, value):
        """A store into a local (the first slot of a vector local addressed at run time); a return slot that
        funcs.py widened in place already takes what is stored."""
        if slot not in self.widenable or slot.dtype != T.f32:
            return
        if value.dtype == T.f64:
            self.stored_f64.add(slot)
        elif value in self.weak:
            self.weak_stores.append((slot, value))
        else:
            self.strong_stored.add(slot)

    def next_widening(self):
        """What the next build should widen; `self.plan` itself when nothing more (the build is final)."""
        if not self.stored_f64 and not self.met_f64:
            return self.plan
        strong = {s for slot in self.strong_stored for s in self.group(slot)}
        wide = set().union(*map(self.group, self.stored_f64))
        wide.update(*[self.group(slot) for slot in self.met_f64 if not strong & set(self.group(slot))])
        sources = [(slot, weak_locals_read(self, value)) for slot, value in self.weak_stores]
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
            todo.extend(a for a in v.args if a in b.weak)
    return found

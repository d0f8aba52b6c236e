"""The count of a thread's loop steps against lavapipe's loop cap (whether a launch runs it: loop_cap.py).

gallivm runs a SIMD vector of lanes (a subgroup: 8 on lavapipe) through a loop while any lane is in it, and
takes one step off a limiter per vector at every pass, the last one too: the pass where no lane goes on,
whose body runs masked, entering once every loop inside it. So what is counted is the vector's count:
- 1 at every loop header a lane runs;
- when the lane leaves a loop at its header, every loop inside the body (the masked last pass); when it
  leaves by a break or a continue, every loop in the rest of the body;
- after an If holding loops, both branches: each as much as its lane that counted most there, or its
  loops once (masked) when no lane took it;
- after a loop, the subgroup's largest count: lanes that left it early or never ran it take the count of
  the lane that ran it longest, as the vector did (two lanes each running a different 40,000-step loop
  take 80,000 of the vector's steps, 40,001 of their own).
Measured on Mesa 22.3 (outer iterations lavapipe ran before its cap, the count off): a triple nest of
1-step loops costs 6 steps per outer iteration, not 5; a break followed by a loop 5, two loops 7. The step
is a specialisation constant: 0 removes it all.
"""
from .. import types as T
from ..ir import nodes as N
from .spec import Capability, GroupOperation, Op, Scope, StorageClass


def loops_under(stmts):
    """How many loops `stmts` hold, nested ones included: what a masked pass over them enters."""
    return sum(1 for _ in N.loops_in(N.Block(list(stmts))))


class LoopCount:
    def __init__(self, lowerer, step_spec_id):
        self.L, self.step_spec_id = lowerer, step_spec_id
        L = lowerer
        self.u32 = L.ty(T.u32)
        self.var = L.f.local_variable(L.m.type_pointer(StorageClass.Function, self.u32))
        L.f.emit_void(Op.OpStore, self.var, L.u32c(0))

    def step(self):
        return self.L.spec_constant(self.step_spec_id, 1)

    def add(self, amount):
        """count += amount * step (an id of a u32)."""
        f = self.L.f
        scaled = f.emit(Op.OpIMul, self.u32, amount, self.step())
        f.emit_void(Op.OpStore, self.var, f.emit(Op.OpIAdd, self.u32, f.emit(Op.OpLoad, self.u32, self.var), scaled))

    def header(self):
        self.add(self.L.u32c(1))

    def leaving_if(self, cond, loops):
        """When u1 `cond` holds the lane leaves and a masked pass enters `loops` loops."""
        if loops:
            L = self.L
            self.add(L.emit(Op.OpSelect, T.u32, cond, L.u32c(loops), L.u32c(0)))

    def jump(self, loops):
        """A break or continue, before `loops` loops the rest of the body enters masked."""
        if loops:
            self.add(self.L.u32c(loops))

    def _largest(self, value):
        L = self.L
        L.m.capability(Capability.GroupNonUniform)
        L.m.capability(Capability.GroupNonUniformArithmetic)
        return L.f.emit(Op.OpGroupNonUniformUMax, self.u32, L.u32c(Scope.Subgroup), GroupOperation.Reduce, value)

    def _where_counting(self, body):
        L = self.L
        L.when(L.emit(Op.OpINotEqual, T.u1, self.step(), L.u32c(0)), body)

    def after_loop(self):
        """count = the subgroup's largest count."""
        f = self.L.f
        self._where_counting(lambda: f.emit_void(Op.OpStore, self.var, self._largest(f.emit(Op.OpLoad, self.u32,
                                                                                           self.var))))

    def after_if(self, cond, before, then_loops, else_loops):
        """After an If holding loops: the vector ran both branches, each as long as its longest lane (or once
        masked, `*_loops`, when no lane took it): count = before + the then part + the else part."""
        L, u32 = self.L, self.u32

        def combine():
            f = L.f
            grown = f.emit(Op.OpISub, u32, f.emit(Op.OpLoad, u32, self.var), before)
            zero = L.u32c(0)
            parts = []
            for taken, other, loops in ((grown, zero, then_loops), (zero, grown, else_loops)):
                most = self._largest(L.emit(Op.OpSelect, T.u32, cond, taken, other))
                floor = L.u32c(loops)
                parts.append(L.emit(Op.OpSelect, T.u32, L.emit(Op.OpUGreaterThan, T.u1, most, floor), most, floor))
            f.emit_void(Op.OpStore, self.var, f.emit(Op.OpIAdd, u32, before, f.emit(Op.OpIAdd, u32, *parts)))
        self._where_counting(combine)

    def value(self):
        return self.L.f.emit(Op.OpLoad, self.u32, self.var)

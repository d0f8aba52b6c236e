"""An IR task packaged for the interpreter backend, with the launch interface of a lowered SPIR-V task
(spirv/lower.LoweredTask): which (array, field) each binding holds, the push-constant layout, the flag words.

Its push constants carry every scalar and every extent of every bound array (the interpreter indexes with
whole shapes); its flag words follow nodes.FLAG_WORDS_HEADER like the SPIR-V lowering's.
"""
import struct
from dataclasses import dataclass

from ...ir import nodes as N
from ...ir.print_format import formats_of
from ...spirv.lower_adstack import FUNCTION

_PUSH_CODES = {"f32": "f", "f64": "d", "i32": "i", "u32": "I", "u1": "I"}


@dataclass(eq=False)
class InterpTask:
    kernel: N.Kernel
    task: N.Task
    bindings: list        # binding k -> (array_index, field), first use order
    push_fields: list     # ("scalar", index, dtype) / ("shape", array_index, axis, i32)
    push_format: str
    push_size: int
    local_size: int
    adstacks: list
    flag_binding: object  # binding of the flag words after the arrays, or None (no adstacks)
    flag_words: int
    homes: tuple
    spec_ids: dict = None
    stack_heap: object = None   # the interpreter keeps every stack in its own memory
    bounds_word: object = None  # out-of-bounds accesses raise in the interpreter instead
    bounds_sites: tuple = ()
    bounds_axes: int = 0
    per_thread: int = 1         # one element per thread: the interpreter runs the IR as written
    tail: object = None
    rest: bool = False
    print_binding: object = None   # binding of the print buffer (ir/print_format.py), last; or None
    print_formats: tuple = ()      # (format id, pieces, value dtypes) of each Print
    fast_math: bool = True         # the interpreter computes as written either way (numpy, one rounding per op)
    addressed: frozenset = frozenset()   # interpreter buffers are never addressed (rhi/base.py)
    spilled_shapes: tuple = ()     # every extent is pushed: the interpreter has no push-constant budget

    @property
    def num_buffers(self):
        return len(self.bindings) + (self.flag_binding is not None) + (self.print_binding is not None)

    @property
    def code(self):
        return self

    def threads(self, n):
        return n


def lower_for_interp(kernel, task, *, local_size=1, homes=None):
    bindings = []
    for s in list(N.walk(task.header)) + list(N.walk(task.body)):   # a header may read arrays (its count)
        if type(s).ACCESSES_ARRAY and (s.array.index, s.field) not in bindings:
            bindings.append((s.array.index, s.field))
    shaped = sorted({ai for ai, _ in bindings} | {s.array.index for b in (task.header, task.body)
                                                  for s in N.walk(b) if isinstance(s, N.ArrayShape)})
    fields = [("scalar", p.index, p.dtype) for p in kernel.scalars]
    fields += [("shape", ai, axis, None) for ai in shaped for axis in range(kernel.arrays[ai].ndim)]
    fmt = "<" + "".join(_PUSH_CODES[f[2].name] if f[0] == "scalar" else "i" for f in fields)
    stacks = N.adstacks_of(task)
    formats = formats_of(task)
    return InterpTask(kernel, task, bindings, fields, fmt, struct.calcsize(fmt) if fields else 0,
                      local_size, stacks, len(bindings) if stacks else None,
                      N.FLAG_WORDS_HEADER + len(stacks) + 1 if stacks else 0,
                      tuple(homes) if homes else (FUNCTION,) * len(stacks), {},
                      print_binding=len(bindings) + bool(stacks) if formats else None, print_formats=formats)

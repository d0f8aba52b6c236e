"""Lowering of one IR task to a SPIR-V 1.3 compute module (Vulkan, GLSL450 memory model).

main() loads the push constants, computes the thread index, evaluates the task header and runs the body
under `if tid < num_threads`. Statements map to SPIR-V here (structured control flow, locals); math is the
LOWER table in lower_ops.py; buffers, atomics and adstacks are in lower_memory.py.
"""
from dataclasses import dataclass

from .. import types as T
from ..errors import SpvadError
from ..ir import nodes as N
from ..ir.print_format import formats_of
from . import lower_coarse
from .lower_adstack import AdStacks
from .lower_loop_cut import loop_cut
from .lower_memory import Memory, plan_layout
from .lower_ops import LOWER
from .lower_print import lower_print
from .lower_slots import SlotArrays
from .module import Module
from .spec import (BuiltIn, Capability, Decoration, ExecutionMode, ExecutionModel, LoopControl, Op,
                   SelectionControl, StorageClass)

LOCAL_SIZE_SPEC_ID = 1000   # specialisation constant of the workgroup width (adstack capacities use 0..)
LOOP_CHECK_SPEC_ID = 1001   # 1: the loop-cap check runs (lower_loop_cut.py); 0: a launch's loops stay far below it
DEFAULT_FEATURES = {"float64": True, "int64": True, "atomic_float32_add": False}
GLSL_SET = "GLSL.std.450"


class LoweringError(SpvadError):
    """An IR task that this device's SPIR-V cannot express (e.g. f64 without Float64)."""


@dataclass
class LoweredTask:
    spirv: bytes          # the module
    bindings: list        # binding k -> (array_index, field), field in "primal"/"grad"/"dual"; first use
    flag_binding: object  # int binding of the flag buffer (u32 words: lower_memory), after the arrays, or None
    push_fields: list     # ("scalar", scalar_index, dtype) or ("shape", array_index, axis, i32), in order
    push_format: str      # little-endian struct format of the push constants (padding included)
    push_size: int        # bytes, 0 when nothing is pushed
    local_size: int       # x size of the 1-D workgroup
    adstacks: list        # AdStackAlloca nodes in nodes.adstacks_of order (flag bit k <-> adstacks[k])
    spec_ids: dict        # spec id -> default value of every OpSpecConstant emitted
    homes: tuple = ()     # home of each adstack: "function" (arrays) or "buffer" (slices of stack_heap)
    stack_heap: object = None   # lower_adstack.StackHeap (binding after the flags, bytes per thread)
    flag_words: int = 0         # u32 words of the flag buffer (lower_memory.Layout.flag_words)
    bounds_word: int = None     # debug builds: first word of the bounds-violation record (lower_bounds.py)
    bounds_sites: tuple = ()    # lower_bounds.site_of of each checked access, by site number
    bounds_axes: int = 0        # index (and shape) words of the record
    per_thread: int = 1         # elements each thread handles (4: an elementwise task, lower_coarse.py)
    rest: bool = False          # the module of a coarsened task's last n % 4 elements, one per thread
    tail: object = None         # a coarsened task's `rest` module, dispatched after it when n % 4 != 0
    print_binding: int = None   # binding of the print buffer (lower_print.py), bound last, or None
    print_formats: tuple = ()   # (format id, pieces, value dtypes) of each Print, for the host's decoding
    fast_math: bool = True      # False: float arithmetic decorated NoContraction, compiled without fast math
    addressed: frozenset = frozenset()   # bindings that hold an address table (lower_addressed.py)
    shape_binding: int = None   # binding of the shape table (extents past the push budget, lower_memory.py)
    spilled_shapes: tuple = ()  # ("shape", array_index, axis, i32) of its entry, in order
    scalar_binding: int = None  # binding of the scalar table (scalars past the push budget), after the shape table
    spilled_scalars: tuple = ()  # ("scalar", scalar_index, dtype) of a launch's entry in it, in order
    cas_atomics: frozenset = frozenset()   # bindings whose atomics are compare-exchange loops (word views)

    def threads(self, n):
        """Threads a launch of `n` elements (the task header's count) needs."""
        return n % lower_coarse.WIDTH if self.rest else -(-n // self.per_thread)

    @property
    def num_buffers(self):
        return len(self.bindings) + (self.flag_binding is not None) + (self.stack_heap is not None) + (
            self.print_binding is not None) + (self.shape_binding is not None) + (self.scalar_binding is not None)

    @property
    def code(self):
        """What Device.create_pipeline takes."""
        return self.spirv


def lower_task(kernel, task, *, local_size=128, features=None, homes=None, bounds_check=False, coarsen=False,
               fast_math=True, addressed=frozenset(), vectors=True):
    """Lower `task` of `kernel` to SPIR-V; raise LoweringError when the device cannot run it. `homes`:
    "function" or "buffer" per adstack (nodes.adstacks_of order); None puts every stack in Function scope.
    `bounds_check` (debug builds): every global access checks its indices (lower_bounds.py). `fast_math`
    False: every float operation is computed as written (NoContraction: no FMA, no reassociation).
    `addressed`: the (array index, field) bindings that will hold addressed buffers (lower_addressed.py).
    `vectors`: view arrays of vector / matrix elements as vectors (lower_vectors.py)."""
    features = dict(DEFAULT_FEATURES if features is None else features)
    local_size = local_size if task.kind == "parallel" else 1
    options = dict(homes=homes, bounds_check=bounds_check, coarsen=coarsen, fast_math=fast_math,
                   addressed=frozenset(addressed), vectors=vectors)
    low = _Lowerer(kernel, task, local_size, features, **options).run()
    if low.per_thread > 1:
        low.tail = _Lowerer(kernel, task, local_size, features, rest=True, **options).run()
    return low


# lavapipe's loop cap (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS), for devices with feature "loop_iteration_cap"
LOOP_ITERATION_CAP = 65535


def _index_may_wrap(loop):
    """Whether the last index of range loop `loop` plus its step can leave i32 (unless its end is a constant
    that keeps it inside)."""
    if not isinstance(loop.end, N.Const):
        return True
    last = int(loop.end.value) - 1 if loop.step > 0 else int(loop.end.value) + 1
    return not -2**31 <= last + loop.step <= 2**31 - 1


class _Lowerer:
    def __init__(self, kernel, task, local_size, features, homes=None, bounds_check=False, coarsen=False,
                 addressed=frozenset(), rest=False, fast_math=True, vectors=True):
        self.kernel, self.task, self.local_size, self.features = kernel, task, local_size, features
        self.adaptive_local_size = task.kind == "parallel" and bool((features or {}).get("adaptive_local_size"))
        self.fast_math = fast_math
        self.m = m = Module(version=(1, 3), exact_float=not fast_math)
        m.capability(Capability.Shader)
        self.glsl_set = m.ext_inst_import(GLSL_SET)
        self.vals = {}         # IR value statement -> SPIR-V id
        self.lane_index = None  # a coarsened task's element being lowered alone (lower_coarse.py)
        self.rest = rest        # lower the `rest` module of a coarsened task
        self.locals = {}       # Alloca -> Function variable
        self.loop_vars = {}    # RangeFor -> i32 Function variable of its index
        self.loops = []        # innermost last: [merge label, continue label, broken?]
        self.spec_ids = {}     # spec id -> (default, constant id)
        self.cur_label = None
        self.layout = plan_layout(kernel, task, features, homes, bounds_check, coarsen, addressed, vectors)
        self.mem = Memory(self, self.layout)
        self.adstacks = AdStacks(self, self.mem, self.layout)
        self.slot_arrays = SlotArrays(self, task)

    def error(self, msg):
        return LoweringError(f"kernel {self.kernel.name}, task {self.task.name}: {msg}")

    # ---- types and constants ----
    def ty(self, dtype):
        """SPIR-V type of a value of `dtype` (bools are OpTypeBool)."""
        if dtype.is_bool:
            return self.m.type_bool()
        if dtype.is_float:
            if dtype.bits == 64 and not self.features.get("float64"):
                raise self.error("f64 needs a device with float64 support (Metal has none)")
            return self.m.type_float(dtype.bits)
        return self.m.type_int(32, dtype.kind == "i")

    def storage_ty(self, dtype):
        """Type of `dtype` in buffers and push constants (bools are u32 words)."""
        return self.m.type_int(32, False) if dtype.is_bool else self.ty(dtype)

    def const(self, dtype, value):
        return self.m.const(self.ty(dtype), bool(value) if dtype.is_bool else value)

    def u32c(self, v):
        return self.const(T.u32, v)

    def i32c(self, v):
        return self.const(T.i32, v)

    def spec_constant(self, spec_id, default):
        """The u32 OpSpecConstant with `spec_id` (one per id; its users must agree on the default)."""
        if spec_id in self.spec_ids:
            if self.spec_ids[spec_id][0] != default:
                raise self.error(f"spec id {spec_id} has defaults {self.spec_ids[spec_id][0]} and {default}")
            return self.spec_ids[spec_id][1]
        if not isinstance(default, int) or default < 1:
            raise self.error(f"spec-constant capacity {spec_id} needs a positive default, got {default!r}")
        cid = self.m.spec_const(self.m.type_int(32, False), default, spec_id)
        self.spec_ids[spec_id] = (default, cid)
        return cid

    # ---- instructions ----
    def emit(self, opcode, dtype, *operands):
        return self.f.emit(opcode, self.ty(dtype), *operands)

    def glsl(self, inst, dtype, *args, narrow=False):
        if narrow and dtype == T.f64:
            # GLSL.std.450 defines these only for 16/32-bit floats: compute in f32, convert back.
            narrowed = [self.emit(Op.OpFConvert, T.f32, a) for a in args]
            return self.emit(Op.OpFConvert, T.f64, self.glsl(inst, T.f32, *narrowed))
        return self.f.ext_inst(self.ty(dtype), self.glsl_set, inst, *args)

    def begin(self, label):
        self.f.begin_block(label)
        self.cur_label = label

    def value(self, s):
        return self.vals[s]

    # ---- the entry point ----
    def builtin(self, builtin, type_id, name):
        m = self.m
        var = m.variable(m.type_pointer(StorageClass.Input, type_id), StorageClass.Input)
        m.decorate(var, Decoration.BuiltIn, builtin)
        m.name(var, name)
        return var

    def run(self):
        m, lay = self.m, self.layout
        u32 = m.type_int(32, False)
        uvec3 = m.type_vector(u32, 3)
        wg_id = self.builtin(BuiltIn.WorkgroupId, uvec3, "gl_WorkGroupID")
        n_wg = self.builtin(BuiltIn.NumWorkgroups, uvec3, "gl_NumWorkGroups")
        local = self.builtin(BuiltIn.LocalInvocationIndex, u32, "gl_LocalInvocationIndex")
        void = m.type_void()
        self.f = f = m.function(void, m.type_function(void))
        m.name(f.id, "main")
        m.entry_point(ExecutionModel.GLCompute, f.id, "main", [wg_id, n_wg, local])
        m.execution_mode(f.id, ExecutionMode.LocalSize, self.local_size, 1, 1)
        group_x = self.u32c(self.local_size)
        if self.adaptive_local_size:
            # The workgroup width is a specialisation constant (WorkgroupSize overrides LocalSize), so a
            # launch of few threads can use a narrow group: lavapipe runs every lane of a group.
            group_x = m.spec_const(u32, self.local_size, LOCAL_SIZE_SPEC_ID)
            self.spec_ids[LOCAL_SIZE_SPEC_ID] = (self.local_size, group_x)
            size = m.spec_const_composite(uvec3, [group_x, self.u32c(1), self.u32c(1)])
            m.decorate(size, Decoration.BuiltIn, BuiltIn.WorkgroupSize)
        self.begin(f.new_label())
        self.push_values = self.mem.load_launch_values()
        # tid = (group.y * groups.x + group.x) * local_size + local index (launches fold into 2-D grids)
        wg, nwg = f.emit(Op.OpLoad, uvec3, wg_id), f.emit(Op.OpLoad, uvec3, n_wg)
        row = f.emit(Op.OpIMul, u32, f.emit(Op.OpCompositeExtract, u32, wg, 1),
                     f.emit(Op.OpCompositeExtract, u32, nwg, 0))
        group = f.emit(Op.OpIAdd, u32, row, f.emit(Op.OpCompositeExtract, u32, wg, 0))
        tid = f.emit(Op.OpIAdd, u32, f.emit(Op.OpIMul, u32, group, group_x),
                     f.emit(Op.OpLoad, u32, local))
        self.tid = self.emit(Op.OpBitcast, T.i32, tid)
        self.adstacks.declare(tid)
        self.mem.bounds.declare()
        self.block(self.task.header)
        n = self.value(self.task.num_threads)
        if lay.per_thread > 1 and self.rest:   # the last n % 4 elements, one per thread
            self.lane_index = lower_coarse.rest_index(self, n)
            self.if_then_else(self.emit(Op.OpSLessThan, T.u1, self.lane_index, n), self.task.body, None)
            self.lane_index = None
        elif lay.per_thread > 1:   # four elements per thread, whole quads only (lower_coarse.py)
            lower_coarse.emit(self, n)
        else:
            self.if_then_else(self.emit(Op.OpSLessThan, T.u1, self.tid, n), self.task.body, None)
        cut = None
        if lay.loop_check:   # whether lavapipe's loop cap cut a loop of this thread's SIMD vector
            cut = loop_cut(self, self.emit(Op.OpINotEqual, T.u1, self.spec_constant(LOOP_CHECK_SPEC_ID, 1),
                                           self.u32c(0)))
        self.mem.flag_thread_end(self.adstacks.overflows(), cut)
        self.mem.bounds.finish()   # the thread's first out-of-bounds access, if any, to the flag buffer
        if f.in_block:
            f.emit_void(Op.OpReturn)
        f.end()
        return LoweredTask(
            spirv=m.to_bytes(), bindings=list(lay.bindings), flag_binding=lay.flag_binding,
            push_fields=list(lay.push_fields), push_format=lay.push_format, push_size=lay.push_size,
            local_size=self.local_size, adstacks=list(lay.adstacks),
            spec_ids={k: v[0] for k, v in self.spec_ids.items()}, homes=lay.homes, stack_heap=lay.heap,
            flag_words=lay.flag_words, bounds_word=lay.bounds_word, bounds_sites=lay.bounds_sites,
            bounds_axes=lay.bounds_axes, per_thread=lay.per_thread, rest=self.rest,
            print_binding=lay.print_binding, print_formats=formats_of(self.task), fast_math=self.fast_math,
            cas_atomics=frozenset(lay.word_view),
            addressed=lay.addressed, shape_binding=lay.shape_binding, spilled_shapes=lay.spilled_shapes,
            scalar_binding=lay.scalar_binding, spilled_scalars=lay.spilled_scalars)

    # ---- statements ----
    def block(self, block):
        """Lower statements in order; stop once the current SPIR-V block has terminated (after a
        Break/Continue, or an If whose branches all left): the rest is unreachable."""
        self.mem.plan_block(block)   # whole vector elements moved at once (lower_vectors.py)
        for s in block.stmts:
            if not self.f.in_block:
                return
            getattr(self, "lower_" + type(s).__name__)(s)

    def lower_Const(self, s):
        self.vals[s] = self.const(s.dtype, s.value)

    def lower_ScalarArg(self, s):
        self.vals[s] = self.push_values[("scalar", s.param.index)]

    def lower_ArrayShape(self, s):
        self.vals[s] = self.push_values[("shape", s.array.index, s.axis)]

    def lower_ThreadIndex(self, s):
        self.vals[s] = self.tid if self.lane_index is None else self.lane_index

    def lower_Compute(self, s):
        m = self.m
        if s.exact and not m.exact_float:   # a math library step (ir/libm/): NoContraction under fast math too
            m.exact_float = True
            try:
                self.vals[s] = LOWER[s.op](self, s, [self.value(a) for a in s.args])
            finally:
                m.exact_float = False
            return
        self.vals[s] = LOWER[s.op](self, s, [self.value(a) for a in s.args])

    def lower_Alloca(self, s):
        var = self.locals.get(s)
        if var is None:
            var = self.slot_arrays.pointer(s)   # an element of its group's array (lower_slots.py), or a variable
            if var is None:
                var = self.f.local_variable(self.m.type_pointer(StorageClass.Function, self.ty(s.dtype)))
                if s.name:
                    self.m.name(var, s.name)
            self.locals[s] = var
        self.f.emit_void(Op.OpStore, var, self.const(s.dtype, 0))   # zero at the statement, each time

    def lower_LocalLoad(self, s):
        self.vals[s] = self.emit(Op.OpLoad, s.dtype, self.locals[s.slot])

    def lower_LocalStore(self, s):
        self.f.emit_void(Op.OpStore, self.locals[s.slot], self.value(s.value))

    def lower_SlotSelect(self, s):
        self.vals[s] = self.slot_arrays.load(s)

    def lower_SlotStore(self, s):
        self.slot_arrays.store(s)

    def lower_GlobalLoad(self, s):
        self.vals[s] = self.mem.global_load(s)

    def lower_GlobalStore(self, s):
        self.mem.global_store(s)

    def lower_AtomicRMW(self, s):
        self.vals[s] = self.mem.atomic(s)

    def lower_If(self, s):
        self.if_then_else(self.value(s.cond), s.then_body, s.else_body)

    def if_then_else(self, cond, then_body, else_body):
        f = self.f
        then, other, merge = f.new_label(), f.new_label(), f.new_label()
        f.emit_void(Op.OpSelectionMerge, merge, SelectionControl.NONE)
        f.emit_void(Op.OpBranchConditional, cond, then, other if else_body else merge)
        reaches_merge = else_body is None or not else_body.stmts
        for label, body in ((then, then_body), (other, else_body)):
            if body is None or (body is else_body and not body.stmts):
                continue
            self.begin(label)
            self.block(body)
            if f.in_block:
                f.emit_void(Op.OpBranch, merge)
                reaches_merge = True
        self.begin(merge)
        if not reaches_merge:   # both branches left by break/continue: nothing after the If runs
            f.emit_void(Op.OpUnreachable)

    def lower_RangeFor(self, s):
        f, i32 = self.f, self.ty(T.i32)
        var = self.loop_vars.get(s)
        if var is None:
            var = self.loop_vars[s] = f.local_variable(self.m.type_pointer(StorageClass.Function, i32))
        f.emit_void(Op.OpStore, var, self.value(s.begin))
        header, body, cont, merge = (f.new_label() for _ in range(4))
        f.emit_void(Op.OpBranch, header)
        self.begin(header)
        i = f.emit(Op.OpLoad, i32, var)
        cmp = Op.OpSLessThan if s.step > 0 else Op.OpSGreaterThan
        go = self.emit(cmp, T.u1, i, self.value(s.end))
        f.emit_void(Op.OpLoopMerge, merge, cont, LoopControl.NONE)
        f.emit_void(Op.OpBranchConditional, go, body, merge)
        self.loop_body(body, s, cont, merge)
        self.begin(cont)
        i = f.emit(Op.OpLoad, i32, var)
        following = f.emit(Op.OpIAdd, i32, i, self.i32c(s.step))
        if _index_may_wrap(s):
            # Python's range ends where i + step leaves i32, whose addition would wrap back into the range
            # (range(2**31 - 10, 2**31 - 1, 5) runs twice): the index becomes `end` there, and the loop ends.
            edge = (2**31 - 1 - s.step) if s.step > 0 else (-2**31 - s.step)
            past = self.emit(Op.OpSGreaterThan if s.step > 0 else Op.OpSLessThan, T.u1, i, self.i32c(edge))
            following = self.emit(Op.OpSelect, T.i32, past, self.value(s.end), following)
        f.emit_void(Op.OpStore, var, following)
        f.emit_void(Op.OpBranch, header)
        self.begin(merge)

    def lower_While(self, s):
        f = self.f
        header, body, cont, merge = (f.new_label() for _ in range(4))
        f.emit_void(Op.OpBranch, header)
        self.begin(header)
        f.emit_void(Op.OpLoopMerge, merge, cont, LoopControl.NONE)
        f.emit_void(Op.OpBranch, body)
        broken = self.loop_body(body, s, cont, merge)
        self.begin(cont)
        f.emit_void(Op.OpBranch, header)
        self.begin(merge)
        if not broken and not self.mem.lay.loop_check:
            f.emit_void(Op.OpUnreachable)   # no Break: the loop never ends (a capped driver ends it: checked)

    def when(self, cond, body):
        """if cond { body() }: `body` emits the branch itself (for IR blocks, see if_then_else)."""
        f = self.f
        then, merge = f.new_label(), f.new_label()
        f.emit_void(Op.OpSelectionMerge, merge, SelectionControl.NONE)
        f.emit_void(Op.OpBranchConditional, cond, then, merge)
        self.begin(then)
        body()
        f.emit_void(Op.OpBranch, merge)
        self.begin(merge)

    def loop_body(self, label, loop, cont, merge):
        """Lower the body of `loop` starting at `label`; returns whether the loop can be left (its exit
        flag or a Break)."""
        self.loops.append([merge, cont, False])
        self.begin(label)
        if loop.exit_flag is not None:
            # the exit flag's test as a plain conditional branch to the merge block, the shape glslang
            # emits: lavapipe (Mesa 22.3) lost divergent breaks taken from selection constructs of a loop.
            done = self.emit(Op.OpLoad, T.u1, self.locals[loop.exit_flag])
            rest = self.f.new_label()
            self.f.emit_void(Op.OpBranchConditional, done, merge, rest)
            self.loops[-1][2] = True
            self.begin(rest)
        self.block(loop.body)
        if self.f.in_block:
            self.f.emit_void(Op.OpBranch, cont)
        return self.loops.pop()[2]

    def lower_LoopIndex(self, s):
        self.vals[s] = self.emit(Op.OpLoad, T.i32, self.loop_vars[s.loop])

    def lower_Break(self, s):
        self.loops[-1][2] = True
        self.f.emit_void(Op.OpBranch, self.loops[-1][0])

    def lower_Continue(self, s):
        self.f.emit_void(Op.OpBranch, self.loops[-1][1])

    def lower_Print(self, s):
        lower_print(self, s)

    # ---- adstacks ----
    def lower_AdStackAlloca(self, s):
        self.adstacks.alloca(s)

    def lower_AdStackPush(self, s):
        self.adstacks.push(s)

    def lower_AdStackPop(self, s):
        self.adstacks.pop(s)

    def lower_AdStackLoadTop(self, s):
        self.vals[s] = self.adstacks.load(s, "primal")

    def lower_AdStackLoadTopAdj(self, s):
        self.vals[s] = self.adstacks.load(s, "adjoint")

    def lower_AdStackAccAdjoint(self, s):
        self.adstacks.acc_adjoint(s)

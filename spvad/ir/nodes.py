"""IR node kinds, declared once: typed statements in nested blocks with structured control flow.

A statement that produces a value *is* that value (SSA by object identity). Mutable Python locals are
`Alloca` slots read and written with `LocalLoad`/`LocalStore`. Loops and branches own nested `Block`s.
"""
import copy
import itertools
from dataclasses import dataclass, field
from typing import Optional

from ..types import DType, i32, u32
from .ops import Op

_ids = itertools.count()


@dataclass(frozen=True)
class Loc:
    """Where a statement came from, for error messages and the access checker."""
    filename: str
    lineno: int
    source: str

    def __str__(self):
        return f"{self.filename}:{self.lineno}: {self.source.strip()}"


@dataclass(eq=False)
class ArrayParam:
    """An ndarray bound to a kernel (argument or captured global). `index` is its position in Kernel.arrays.
    `element_shape`: the static extents of its last axes that hold one vector (matrix) element of an ndarray of
    vec2 (mat2, ...), () for scalar elements; `ndim` counts them."""
    name: str
    dtype: DType
    ndim: int
    index: int
    needs_grad: bool = False
    needs_dual: bool = False
    element_shape: tuple = ()


@dataclass(eq=False)
class ScalarParam:
    """A scalar kernel argument, passed in push constants."""
    name: str
    dtype: DType
    index: int


class Stmt:
    """Base of all statements. `dtype` is None for statements that produce no value."""
    dtype: Optional[DType] = None
    loc: Optional[Loc] = None
    VALUE_FIELDS = ()   # names of attributes holding operand statements (or tuples of them)
    BLOCK_FIELDS = ()   # names of attributes holding nested blocks
    # Traits of the node kind, declared here once; passes ask `type(s).PURE`, never a list of classes.
    PURE = False              # a function of its operands (and of its thread / loop position): CSE'd, and
                              # removed when unused
    READS_MEMORY = False      # reads a slot, an array element or an adstack: never CSE'd (a write may intervene)
    HAS_SIDE_EFFECTS = False  # writes a slot, an array element or an adstack
    WRITES_ARRAY = False      # writes an array element (a store or an atomic)
    ACCESSES_ARRAY = False    # addresses an array element (`array`, `indices`, `field`)
    HEADER_OK = False         # allowed in a task header, which the host evaluates too (to size the launch)

    def __post_init__(self):
        self.id = next(_ids)

    def operands(self):
        out = []
        for name in self.VALUE_FIELDS:
            v = getattr(self, name)
            if isinstance(v, tuple):
                out.extend(v)
            elif v is not None:
                out.append(v)
        return out

    def replace_operands(self, mapping):
        """Swap operand statements found in `mapping` (a dict old -> new), in place; a field none of whose
        operands is in it is left as it is (passes call this on every statement, most often unchanged)."""
        if not mapping:
            return
        for name in self.VALUE_FIELDS:
            v = getattr(self, name)
            if isinstance(v, tuple):
                if any(x in mapping for x in v):
                    setattr(self, name, tuple(mapping.get(x, x) for x in v))
            elif v is not None and v in mapping:
                setattr(self, name, mapping[v])

    def blocks(self):
        return [getattr(self, name) for name in self.BLOCK_FIELDS]


@dataclass(eq=False)
class Block:
    stmts: list = field(default_factory=list)

    def append(self, stmt):
        self.stmts.append(stmt)
        return stmt

    def __iter__(self):
        return iter(self.stmts)

    def __len__(self):
        return len(self.stmts)


def walk(block):
    """Every statement under `block`, pre-order (a statement before the blocks it owns). A stack of
    iterators, not nested generators: passes walk whole kernels many times per compile."""
    stack = [iter(block.stmts)]
    while stack:
        for s in stack[-1]:
            yield s
            if s.BLOCK_FIELDS:   # its blocks next, then the statements after it
                stack.append(_statements_of(s.blocks()))
                break
        else:
            stack.pop()


def _statements_of(blocks):
    for b in blocks:
        yield from b.stmts


def may_write(array, field, distinct):
    """What a write to `field` of `array` may change, as the optimiser's load forwarding and hoisting see it:
    with `distinct` (the launch binds its own buffer to every array and companion: pipeline.Mode) only that
    array's field; else every array of its dtype (one ndarray may be bound to two parameters, or one's .grad
    passed as another)."""
    return (array, field) if distinct else array.dtype


def clone_stmt(s, mapping):
    """A copy of `s` with a fresh id whose operands (and a LoopIndex's loop) found in `mapping` (old -> new)
    are swapped; records `mapping[s] = copy`. Blocks are shared: a construct's caller gives the copy its own."""
    new = copy.copy(s)
    new.id = next(_ids)
    new.replace_operands(mapping)
    if isinstance(new, LoopIndex):
        new.loop = mapping.get(s.loop, s.loop)
    mapping[s] = new
    return new


# ---- values -------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Const(Stmt):
    value: object
    dtype: DType
    PURE = HEADER_OK = True


@dataclass(eq=False)
class ScalarArg(Stmt):
    param: ScalarParam
    PURE = HEADER_OK = True

    @property
    def dtype(self):
        return self.param.dtype


@dataclass(eq=False)
class ArrayShape(Stmt):
    array: ArrayParam
    axis: int
    dtype: DType = i32
    PURE = HEADER_OK = True


@dataclass(eq=False)
class ThreadIndex(Stmt):
    """Linear index of this thread within its parallel task (0 .. num_threads-1)."""
    dtype: DType = i32
    PURE = True


@dataclass(eq=False)
class Compute(Stmt):
    op: Op
    args: tuple
    dtype: DType
    exact: bool = False   # computed as written also under fast math (NoContraction): the math library's steps
    VALUE_FIELDS = ("args",)
    PURE = HEADER_OK = True


# ---- locals -------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Alloca(Stmt):
    """A mutable local slot of `dtype` (zero-initialised). Its uses are LocalLoad/LocalStore."""
    dtype: DType
    name: str = ""
    HAS_SIDE_EFFECTS = True   # zeroes the slot wherever it runs


@dataclass(eq=False)
class LocalLoad(Stmt):
    slot: Alloca
    VALUE_FIELDS = ("slot",)
    READS_MEMORY = True

    @property
    def dtype(self):
        return self.slot.dtype


@dataclass(eq=False)
class LocalStore(Stmt):
    slot: Alloca
    value: Stmt
    VALUE_FIELDS = ("slot", "value")
    HAS_SIDE_EFFECTS = True


# A vector or matrix local indexed at run time: its component slots (Allocas, row-major) form one group,
# addressed by a flat index. Primal kernels lower a group to one Function-scope array; derivative kernels
# first expand these two statements into selects over the slots (ir/slot_arrays.py), which both autodiff
# modes differentiate exactly.
@dataclass(eq=False)
class SlotSelect(Stmt):
    """slots[index], or slots[0] when index is outside [0, len(slots))."""
    slots: tuple
    index: Stmt
    VALUE_FIELDS = ("slots", "index")
    READS_MEMORY = True

    @property
    def dtype(self):
        return self.slots[0].dtype


@dataclass(eq=False)
class SlotStore(Stmt):
    """slots[index] = value; nothing when index is outside [0, len(slots))."""
    slots: tuple
    index: Stmt
    value: Stmt
    VALUE_FIELDS = ("slots", "index", "value")
    HAS_SIDE_EFFECTS = True


# ---- global memory ------------------------------------------------------------------------------------
# `field` picks the buffer: "primal", "grad" (the array's .grad) or "dual" (its .dual).
@dataclass(eq=False)
class GlobalLoad(Stmt):
    """`guard` (a u1 value, or None): when false the load reads nothing and gives 0. A load moved out of a
    loop that may not run carries the loop's trip condition (ir/licm.py), so it goes out of bounds only
    where the loop would have."""
    array: ArrayParam
    indices: tuple
    field: str = "primal"
    guard: Optional[Stmt] = None
    VALUE_FIELDS = ("indices", "guard")
    READS_MEMORY = ACCESSES_ARRAY = True

    @property
    def dtype(self):
        return self.array.dtype


@dataclass(eq=False)
class GlobalStore(Stmt):
    array: ArrayParam
    indices: tuple
    value: Stmt
    field: str = "primal"
    VALUE_FIELDS = ("indices", "value")
    HAS_SIDE_EFFECTS = WRITES_ARRAY = ACCESSES_ARRAY = True


@dataclass(eq=False)
class AtomicRMW(Stmt):
    """Atomic read-modify-write `a[idx] = op(a[idx], value)`, `op` in ops.ATOMICS; its value is the element's
    old value."""
    op: Op
    array: ArrayParam
    indices: tuple
    value: Stmt
    field: str = "primal"
    VALUE_FIELDS = ("indices", "value")
    READS_MEMORY = HAS_SIDE_EFFECTS = WRITES_ARRAY = ACCESSES_ARRAY = True

    @property
    def dtype(self):
        return self.array.dtype


# ---- output -------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Print(Stmt):
    """`print(...)` in a kernel: a record of the format `pieces` (ir/print_format.py, which gives its id) and
    the scalar `values` its slots take, appended to the launch's print buffer; the host prints its text at the
    next sync. Derivative kernels leave it out (a gradient launch prints nothing)."""
    pieces: tuple
    values: tuple
    VALUE_FIELDS = ("values",)
    HAS_SIDE_EFFECTS = True   # writes the print buffer


# ---- control flow -------------------------------------------------------------------------------------
@dataclass(eq=False)
class RangeFor(Stmt):
    """Serial loop `for i in range(begin, end, step)` inside a thread; `step` is a nonzero Python int.

    `exit_flag` (a u1 Alloca, from autodiff/loop_exits.py): the loop also ends when it is set, checked at
    the top of every iteration, before the body (the only way out besides the bound)."""
    begin: Stmt
    end: Stmt
    step: int
    body: Block
    exit_flag: Optional["Alloca"] = None
    VALUE_FIELDS = ("begin", "end", "exit_flag")
    BLOCK_FIELDS = ("body",)


@dataclass(eq=False)
class LoopIndex(Stmt):
    """The current index of an enclosing RangeFor."""
    loop: RangeFor
    dtype: DType = i32
    PURE = True


@dataclass(eq=False)
class While(Stmt):
    """Loop until `exit_flag` is set (checked at the top of every iteration, as for RangeFor). Before
    autodiff/loop_exits.py the body leaves with Break instead (the frontend puts `if not cond: break` first)."""
    body: Block
    exit_flag: Optional["Alloca"] = None
    VALUE_FIELDS = ("exit_flag",)
    BLOCK_FIELDS = ("body",)


@dataclass(eq=False)
class If(Stmt):
    cond: Stmt
    then_body: Block
    else_body: Block
    VALUE_FIELDS = ("cond",)
    BLOCK_FIELDS = ("then_body", "else_body")


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


# ---- adstacks (reverse mode) --------------------------------------------------------------------------
@dataclass(eq=False)
class AdStackAlloca(Stmt):
    """A per-thread stack of `dtype` with room for `capacity` entries (primal + adjoint per entry).

    `capacity` is an int, or None until sizing; `capacity_spec_id` names a specialisation constant when
    the capacity is chosen at launch."""
    dtype: DType
    capacity: Optional[int] = None
    name: str = ""
    capacity_spec_id: Optional[int] = None
    HAS_SIDE_EFFECTS = True   # empties the stack wherever it runs


@dataclass(eq=False)
class AdStackPush(Stmt):
    stack: AdStackAlloca
    value: Stmt
    VALUE_FIELDS = ("stack", "value")
    HAS_SIDE_EFFECTS = True


@dataclass(eq=False)
class AdStackPop(Stmt):
    stack: AdStackAlloca
    VALUE_FIELDS = ("stack",)
    HAS_SIDE_EFFECTS = True


@dataclass(eq=False)
class AdStackLoadTop(Stmt):
    stack: AdStackAlloca
    VALUE_FIELDS = ("stack",)
    READS_MEMORY = True

    @property
    def dtype(self):
        return self.stack.dtype


@dataclass(eq=False)
class AdStackLoadTopAdj(Stmt):
    stack: AdStackAlloca
    VALUE_FIELDS = ("stack",)
    READS_MEMORY = True

    @property
    def dtype(self):
        return self.stack.dtype


@dataclass(eq=False)
class AdStackAccAdjoint(Stmt):
    stack: AdStackAlloca
    value: Stmt
    VALUE_FIELDS = ("stack", "value")
    READS_MEMORY = HAS_SIDE_EFFECTS = True


# ---- derivatives inside kernels (sp.grad & co; expanded by autodiff/inline_derivatives.py, the first pass) --
@dataclass(eq=False)
class Derivative(Stmt):
    """Forward-mode derivative of `body` (an inlined @sp.func) in `width` tangent directions at once. Inside
    `body`, Seed statements are its active inputs and Tangent statements read tangents; results leave
    through local slots stored in `body`. No other pass sees this node: the first one expands it."""
    body: Block
    width: int
    BLOCK_FIELDS = ("body",)
    HAS_SIDE_EFFECTS = True


@dataclass(eq=False)
class Seed(Stmt):
    """Inside a Derivative: `value` (defined before it) as an active input, whose tangent in direction j is
    `tangents[j]` (a Const zero: none)."""
    value: Stmt
    tangents: tuple
    VALUE_FIELDS = ("value", "tangents")

    @property
    def dtype(self):
        return self.value.dtype


@dataclass(eq=False)
class Tangent(Stmt):
    """Inside a Derivative: the tangent of `value` in direction `direction` of the innermost Derivative."""
    value: Stmt
    direction: int
    VALUE_FIELDS = ("value",)

    @property
    def dtype(self):
        return self.value.dtype


# ---- kernels ------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Task:
    """One dispatch. `header` computes `num_threads` from scalars and shapes (the host evaluates it too, to
    size the launch), or of a parallel task also from array contents (then only the device can: see
    ir/thread_count.py); `body` runs once per thread, `ThreadIndex` giving the thread's index."""
    name: str
    kind: str                 # "parallel" or "serial"
    header: Block
    num_threads: Stmt
    body: Block
    source: Optional[int] = None   # a derivative task: index of the primal task it was built from
    # a gradient task with adstacks: its autodiff.adstack.StackSizer, and when some capacities are measured
    # at launch, the counting kernel doing so with its number of counters (autodiff/depth_probe.py)
    stack_sizes: object = None
    depth_probe: Optional[tuple] = None


@dataclass(eq=False)
class Kernel:
    name: str
    arrays: list
    scalars: list
    tasks: list
    filename: str = "<unknown>"
    # derivative kernels: (kind, user array index) of each scratch array parameter after the user's arrays,
    # which the launcher supplies (see autodiff/extremum_ties.py)
    scratch: tuple = ()
    # (array index, array index, message): parameters a launch must not find bound to one ndarray (a value read
    # from the first while the kernel writes the second: frontend/array_reads.py, pipeline's counts)
    distinct: tuple = ()


def loops_in(block):
    """Every loop under `block`."""
    return (s for s in walk(block) if isinstance(s, (RangeFor, While)))


def adstacks_of(task):
    return [s for s in walk(task.body) if isinstance(s, AdStackAlloca)]


# Flag buffer layout shared by lowering, interpreter and runtime: word 0 = overflow bits (bit k set when
# stack k of the task overflowed), words 1.. = depth each stack would have needed (atomic max).
FLAG_WORDS_HEADER = 1
FLAG_DTYPE = u32

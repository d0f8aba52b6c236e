"""SPIR-V module builder: one word list per section of the spec's logical layout, one id allocator,
de-duplicated types and constants, and a FunctionBuilder that keeps Function-scope variables in the
entry block. Emits words only; every opcode and enum value comes from the generated spec.py."""
import array
import struct
import sys

from .spec import (HAS_RESULT, HAS_RESULT_TYPE, MAGIC, AddressingModel, Capability, Decoration,
                   FunctionControl, MemoryModel, Op, StorageClass, name_of)

# Scalar widths other than 32 need a capability; the builder declares it when it makes the type.
WIDTH_CAPABILITY = {("int", 8): Capability.Int8, ("int", 16): Capability.Int16, ("int", 64): Capability.Int64,
                    ("float", 16): Capability.Float16, ("float", 64): Capability.Float64}
TERMINATORS = frozenset({Op.OpBranch, Op.OpBranchConditional, Op.OpSwitch, Op.OpReturn, Op.OpReturnValue,
                         Op.OpKill, Op.OpUnreachable, Op.OpTerminateInvocation})
# Float arithmetic a driver may reassociate or fuse (a*b+c into an FMA) unless its result is decorated
# NoContraction, which forbids both (SPIR-V 2.16 "NoContraction"); an exact_float module decorates each one.
FLOAT_ARITHMETIC = frozenset({Op.OpFNegate, Op.OpFAdd, Op.OpFSub, Op.OpFMul, Op.OpFDiv, Op.OpFRem, Op.OpFMod,
                              Op.OpVectorTimesScalar, Op.OpMatrixTimesScalar, Op.OpVectorTimesMatrix,
                              Op.OpMatrixTimesVector, Op.OpMatrixTimesMatrix, Op.OpOuterProduct, Op.OpDot})


def literal_string(text):
    """UTF-8, NUL-terminated, zero-padded to a whole number of little-endian words."""
    data = text.encode("utf-8") + b"\0"
    data += b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def encode_operands(operands):
    """Ints become one word (negatives in two's complement), strings literal strings; lists are spliced."""
    for op in operands:
        if type(op) is not int or not 0 <= op <= 0xFFFFFFFF:
            break
    else:   # ids and enum values only, each a word as it is (most instructions)
        return list(operands)
    words = []
    for op in operands:
        if type(op) is not int:   # (plain ints, ids and enum values, are most operands)
            if isinstance(op, str):
                words += literal_string(op)
                continue
            if isinstance(op, (list, tuple)):
                words += encode_operands(op)
                continue
            op = int(op)
        if not -(1 << 31) <= op < (1 << 32):
            raise ValueError(f"operand {op} does not fit in one 32-bit word")
        words.append(op & 0xFFFFFFFF)
    return words


def instruction(opcode, *operands):
    """Words of one instruction: (word count << 16 | opcode) then the operands."""
    words = encode_operands(operands)
    if len(words) + 1 > 0xFFFF:
        raise ValueError(f"{name_of(Op, opcode)} has too many operand words ({len(words)})")
    return [((len(words) + 1) << 16) | int(opcode)] + words


def encode_scalar(info, value):
    """Literal words of a numeric constant of type `info` (('int', width, signed) or ('float', width));
    64-bit values take two words, low-order word first."""
    kind, width = info[0], info[1]
    if kind == "float":
        if width == 16:
            return [struct.unpack("<H", struct.pack("<e", value))[0]]
        if width == 32:
            return [struct.unpack("<I", struct.pack("<f", value))[0]]
        if width == 64:
            return list(struct.unpack("<2I", struct.pack("<d", value)))
    elif kind == "int":
        value = int(value)
        if not -(1 << (width - 1)) <= value < (1 << width):
            raise ValueError(f"{value} does not fit a {width}-bit integer")
        value &= (1 << width) - 1
        if width < 32 and info[2] and value >> (width - 1):  # narrow signed types are sign-extended
            value |= 0xFFFFFFFF ^ ((1 << width) - 1)
        if width <= 32:
            return [value]
        if width == 64:
            return [value & 0xFFFFFFFF, value >> 32]
    raise ValueError(f"cannot encode a constant of type {info}")


class Module:
    """A SPIR-V module under construction. Sections are kept apart and joined by words(). `exact_float`:
    every float arithmetic result is decorated NoContraction (computed as written, no FMA, no reassociation)."""

    def __init__(self, version=(1, 3), exact_float=False):
        self.version = version
        self.exact_float = exact_float
        self.bound = 1
        self._capabilities, self._extensions = {}, {}   # dicts: ordered sets
        self._ext_imports = {}                          # name -> id
        self._memory_model = None
        self._entry_points, self._execution_modes = [], []
        self._debug_names, self._annotations = [], []
        self._globals = []                              # types, constants and module-scope variables
        self._functions = []
        self._cache = {}                                # dedup key -> id (types and constants)
        self._type_ids = {}                             # info tuple -> id of a de-duplicated type
        self._const_ids = {}                            # (type id, Python int / non-zero float) -> id
        self._types = {}                                # type id -> info tuple, e.g. ('int', 32, True)

    def new_id(self):
        self.bound += 1
        return self.bound - 1

    # ---- header sections ----
    def capability(self, cap):
        self._capabilities[int(cap)] = None

    def extension(self, name):
        self._extensions[name] = None

    def ext_inst_import(self, name):
        if name not in self._ext_imports:
            self._ext_imports[name] = self.new_id()
        return self._ext_imports[name]

    def memory_model(self, addressing, model):
        self._memory_model = instruction(Op.OpMemoryModel, addressing, model)

    def entry_point(self, model, func_id, name, interface_ids=()):
        self._entry_points += instruction(Op.OpEntryPoint, model, func_id, name, list(interface_ids))

    def execution_mode(self, func_id, mode, *literals):
        self._execution_modes += instruction(Op.OpExecutionMode, func_id, mode, *literals)

    def name(self, target, text):
        self._debug_names += instruction(Op.OpName, target, text)

    def member_name(self, struct_id, member, text):
        self._debug_names += instruction(Op.OpMemberName, struct_id, member, text)

    def decorate(self, target, decoration, *literals):
        self._annotations += instruction(Op.OpDecorate, target, decoration, *literals)

    def member_decorate(self, struct_id, member, decoration, *literals):
        self._annotations += instruction(Op.OpMemberDecorate, struct_id, member, decoration, *literals)

    # ---- types ----
    def _type(self, info, opcode, *operands, unique=False):
        if not unique and info in self._type_ids:   # (info names a type as its operands do: no encoding)
            return self._type_ids[info]
        key = (int(opcode),) + tuple(encode_operands(operands))
        if not unique and key in self._cache:
            return self._cache[key]
        tid = self.new_id()
        self._globals += instruction(opcode, tid, *operands)
        self._types[tid] = info
        if not unique:
            self._cache[key] = self._type_ids[info] = tid
        return tid

    def type_info(self, type_id):
        """What a type id denotes: ('void',), ('bool',), ('int', width, signed), ('float', width),
        ('vector', elem, n), ('array', elem, length_id), ('runtime_array', elem), ('struct', members),
        ('pointer', storage_class, pointee) or ('function', ret, params)."""
        return self._types[type_id]

    def type_void(self):
        return self._type(("void",), Op.OpTypeVoid)

    def type_bool(self):
        return self._type(("bool",), Op.OpTypeBool)

    def type_int(self, width, signed):
        if ("int", width) in WIDTH_CAPABILITY:
            self.capability(WIDTH_CAPABILITY["int", width])
        return self._type(("int", width, bool(signed)), Op.OpTypeInt, width, int(bool(signed)))

    def type_float(self, width):
        if ("float", width) in WIDTH_CAPABILITY:
            self.capability(WIDTH_CAPABILITY["float", width])
        return self._type(("float", width), Op.OpTypeFloat, width)

    def type_vector(self, elem, n):
        return self._type(("vector", elem, n), Op.OpTypeVector, elem, n)

    def type_array(self, elem, length=None, *, length_id=None):
        """Fixed-size array; `length` is a Python int (a u32 constant is made) or `length_id` a
        constant or spec-constant id."""
        if (length is None) == (length_id is None):
            raise ValueError("type_array needs exactly one of length and length_id")
        if length_id is None:
            length_id = self.const(self.type_int(32, False), length)
        return self._type(("array", elem, length_id), Op.OpTypeArray, elem, length_id)

    def type_runtime_array(self, elem):
        return self._type(("runtime_array", elem), Op.OpTypeRuntimeArray, elem)

    def type_struct(self, members, unique=False):
        """Struct of member type ids; `unique=True` always makes a new id (Block structs carry
        their own decorations, so they must not be shared)."""
        members = tuple(members)
        return self._type(("struct", members), Op.OpTypeStruct, list(members), unique=unique)

    def type_pointer(self, storage_class, pointee):
        return self._type(("pointer", int(storage_class), pointee), Op.OpTypePointer,
                          storage_class, pointee)

    def type_function(self, ret, params=()):
        params = tuple(params)
        return self._type(("function", ret, params), Op.OpTypeFunction, ret, list(params))

    # ---- constants ----
    def _constant(self, key, opcode, type_id, *operands):
        if key in self._cache:
            return self._cache[key]
        cid = self.new_id()
        self._globals += instruction(opcode, type_id, cid, *operands)
        self._cache[key] = cid
        return cid

    def const(self, type_id, value):
        """Constant of a scalar int/float/bool type; same (type, encoded value) -> same id."""
        info = self._types[type_id]
        if info[0] == "bool":
            opcode = Op.OpConstantTrue if value else Op.OpConstantFalse
            return self._constant(("const", type_id, int(opcode)), opcode, type_id)
        # values equal in Python encode alike, but for 0.0 and -0.0 (and bools, handled above)
        fast = (type_id, value) if type(value) is int or (type(value) is float and value != 0) else None
        if fast in self._const_ids:
            return self._const_ids[fast]
        words = encode_scalar(info, value)
        cid = self._constant(("const", type_id, *words), Op.OpConstant, type_id, words)
        if fast is not None:
            self._const_ids[fast] = cid
        return cid

    def const_bool(self, value):
        return self.const(self.type_bool(), value)

    def const_null(self, type_id):
        return self._constant(("null", type_id), Op.OpConstantNull, type_id)

    def const_composite(self, type_id, parts):
        parts = tuple(parts)
        return self._constant(("composite", type_id, parts), Op.OpConstantComposite, type_id, list(parts))

    def spec_const(self, type_id, default, spec_id):
        """OpSpecConstant (or SpecConstantTrue/False) decorated SpecId; never de-duplicated."""
        info = self._types[type_id]
        cid = self.new_id()
        if info[0] == "bool":
            opcode = Op.OpSpecConstantTrue if default else Op.OpSpecConstantFalse
            self._globals += instruction(opcode, type_id, cid)
        else:
            self._globals += instruction(Op.OpSpecConstant, type_id, cid, encode_scalar(info, default))
        self.decorate(cid, Decoration.SpecId, spec_id)
        return cid

    def spec_const_composite(self, type_id, parts):
        """OpSpecConstantComposite (a composite whose parts may be spec constants); never de-duplicated."""
        cid = self.new_id()
        self._globals += instruction(Op.OpSpecConstantComposite, type_id, cid, list(parts))
        return cid

    # ---- globals and functions ----
    def variable(self, ptr_type, storage_class, initializer=None):
        """Module-scope OpVariable."""
        vid = self.new_id()
        extra = () if initializer is None else (initializer,)
        self._globals += instruction(Op.OpVariable, ptr_type, vid, storage_class, *extra)
        return vid

    def function(self, return_type, function_type, control=FunctionControl.NONE):
        f = FunctionBuilder(self, return_type, function_type, control)
        self._functions.append(f)
        return f

    # ---- serialisation ----
    def words(self):
        unfinished = [f.id for f in self._functions if not f.ended]
        if unfinished:
            raise ValueError(f"function(s) {unfinished} not ended: call FunctionBuilder.end()")
        memory_model = self._memory_model or instruction(Op.OpMemoryModel, AddressingModel.Logical,
                                                         MemoryModel.GLSL450)
        major, minor = self.version
        out = array.array("I", [MAGIC, (major << 16) | (minor << 8), 0, self.bound, 0])
        for cap in self._capabilities:
            out.extend(instruction(Op.OpCapability, cap))
        for ext in self._extensions:
            out.extend(instruction(Op.OpExtension, ext))
        for name, iid in self._ext_imports.items():
            out.extend(instruction(Op.OpExtInstImport, iid, name))
        for section in (memory_model, self._entry_points, self._execution_modes, self._debug_names,
                        self._annotations, self._globals):
            out.extend(section)
        for f in self._functions:
            out.extend(f.words())
        return out

    def to_bytes(self):
        words = self.words()
        if sys.byteorder != "little":
            words.byteswap()
        return words.tobytes()


class FunctionBuilder:
    """One function: OpFunction and its parameters, the entry block's label, the Function-scope
    variables (always hoisted to the top of the entry block, as SPIR-V requires), then the body."""

    def __init__(self, module, return_type, function_type, control=FunctionControl.NONE):
        self.module = module
        self.id = module.new_id()
        self._head = instruction(Op.OpFunction, return_type, self.id, control, function_type)
        self._entry_label, self._locals, self._body = [], [], []
        self.in_block = False     # True between begin_block() and the block's terminator
        self.ended = False

    def param(self, type_id):
        if self._entry_label:
            raise ValueError("parameters must be declared before the first block")
        pid = self.module.new_id()
        self._head += instruction(Op.OpFunctionParameter, type_id, pid)
        return pid

    def new_label(self):
        return self.module.new_id()

    def begin_block(self, label_id=None):
        """Place OpLabel (a fresh label when none is given) and return its id."""
        if self.in_block:
            raise ValueError("the previous block has no terminator")
        label_id = self.new_label() if label_id is None else label_id
        target = self._body if self._entry_label else self._entry_label
        target += instruction(Op.OpLabel, label_id)
        self.in_block = True
        return label_id

    def local_variable(self, ptr_type, initializer=None):
        """Function-scope OpVariable, placed at the top of the entry block whenever it is requested."""
        vid = self.module.new_id()
        extra = () if initializer is None else (initializer,)
        self._locals += instruction(Op.OpVariable, ptr_type, vid, StorageClass.Function, *extra)
        return vid

    def emit(self, opcode, result_type, *operands, result_id=None):
        """Instruction with a result type and result id; returns the id (or uses `result_id`)."""
        if opcode not in HAS_RESULT_TYPE:
            raise ValueError(f"{name_of(Op, opcode)} has no result type: use emit_void")
        rid = self.module.new_id() if result_id is None else result_id
        self._append(opcode, instruction(opcode, result_type, rid, *operands))
        if self.module.exact_float and opcode in FLOAT_ARITHMETIC:
            self.module.decorate(rid, Decoration.NoContraction)
        return rid

    def emit_void(self, opcode, *operands):
        """Instruction without a result (OpStore, OpBranch, OpReturn, OpLoopMerge, barriers...)."""
        if opcode in HAS_RESULT:
            raise ValueError(f"{name_of(Op, opcode)} defines a result: use emit")
        self._append(opcode, instruction(opcode, *operands))

    def ext_inst(self, result_type, set_id, inst, *args):
        return self.emit(Op.OpExtInst, result_type, set_id, inst, *args)

    def _append(self, opcode, words):
        if not self.in_block:
            raise ValueError(f"{name_of(Op, opcode)} emitted outside a block: call begin_block first")
        self._body += words
        if opcode in TERMINATORS:
            self.in_block = False

    def end(self):
        if self.in_block:
            raise ValueError(f"function %{self.id}: last block has no terminator")
        if self.ended:
            raise ValueError(f"function %{self.id} ended twice")
        if self._locals and not self._entry_label:
            raise ValueError(f"function %{self.id} has local variables but no block")
        self.ended = True

    def words(self):
        return self._head + self._entry_label + self._locals + self._body + instruction(Op.OpFunctionEnd)

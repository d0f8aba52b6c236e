"""SPIR-V -> Metal Shading Language through SPIRV-Cross, with an explicit, checked buffer-index mapping: binding k
(arrays, adstack flags, adstack heap, print buffer, shape table, scalar table) -> [[buffer(k)]], push constants ->
[[buffer(n)]], n = number of bindings.
Pure (no Metal): tested on Linux."""
import re
import struct
from dataclasses import dataclass, field

from ...errors import SpvadError
from ...spirv import tools
from ...spirv.spec import MAGIC, Decoration, ExecutionMode, Op, StorageClass

# What the lowering may emit for Metal: no fp64 (Metal has none), no 64-bit integers, and float atomics as
# compare-exchange loops (the Debian 2021.01 SPIRV-Cross turns OpAtomicFAddEXT into invalid `atomicAdd(`).
METAL_FEATURES = {"float64": False, "int64": False, "atomic_float32_add": False, "int64_atomics": False}
MSL_VERSION = 20100   # MSL 2.1 (macOS 10.14+); subgroup ops need >= 2.0
# --msl-decoration-binding: [[buffer(k)]] = the SPIR-V Binding k. The push-constant block has no binding and
# would collide with buffer(0), so `metal_module` gives it Binding n in the copy handed to SPIRV-Cross.
MSL_OPTIONS = ("--msl-decoration-binding",)
SPEC_TYPES = {"uint": "<I", "int": "<i", "float": "<f", "bool": "<?"}


class MslTranslationError(SpvadError):
    """SPIRV-Cross failed, or its MSL does not follow the buffer-index mapping."""


@dataclass
class MslProgram:
    """One translated compute entry point and how a Metal pipeline must bind and specialise it."""
    source: str              # MSL text (spec constants at their defaults)
    entry: str               # kernel function name in `source` (SPIRV-Cross renames main -> main0)
    num_buffers: int         # storage buffers at [[buffer(0..num_buffers-1)]], binding k -> index k
    push_index: object       # [[buffer(push_index)]] of the push-constant block (setBytes), or None
    local_size: tuple        # threadsPerThreadgroup (the SPIR-V LocalSize)
    buffer_args: list = field(default_factory=list)   # parsed (address space, type, name, index)
    spec_constants: dict = field(default_factory=dict)  # spec id -> (form "macro"|"function", MSL type)

    @property
    def buffer_indices(self):
        """binding -> Metal buffer index (the identity, checked against the MSL at translation)."""
        return {k: k for k in range(self.num_buffers)}

    def specialized_source(self, values=None):
        """`source` with the macro-form spec constants set (see `specialize_source`)."""
        return specialize_source(self.source, self.spec_constants, values or {})

    def function_constants(self, values=None):
        """[(function-constant index, MSL type, packed bytes)] for MTLFunctionConstantValues."""
        return function_constant_values(self.spec_constants, values or {})


def translate(lowered, name="kernel"):
    """MslProgram of a LoweredTask (compiled with METAL_FEATURES for valid MSL). Its bindings are the arrays,
    then the adstack flag buffer, then the adstack heap (buffer-home stacks), then the print buffer
    (kernel print), then the shape table (extents past the push-constant budget), then the scalar table
    (scalars past it), numbered without gaps."""
    extra = [("flag buffer", lowered.flag_binding)]
    heap = getattr(lowered, "stack_heap", None)
    if heap is not None:
        extra.append(("adstack heap", heap.binding))
    extra.append(("print buffer", getattr(lowered, "print_binding", None)))
    extra.append(("shape table", getattr(lowered, "shape_binding", None)))
    extra.append(("scalar table", getattr(lowered, "scalar_binding", None)))
    expected = len(lowered.bindings)
    for what, binding in extra:
        if binding is not None:
            if binding != expected:
                raise MslTranslationError(f"kernel {name}: the {what} should be binding {expected}, "
                                          f"got {binding}")
            expected += 1
    return translate_spirv(lowered.spirv, name, expected, lowered.push_size)


def translate_spirv(spirv, name, num_buffers, push_size):
    """MslProgram of a SPIR-V compute module whose storage buffers are bindings 0..num_buffers-1 of set 0."""
    push_index = num_buffers if push_size else None
    module = metal_module(bytes(spirv), num_buffers)
    try:
        source = tools.to_msl(module, msl_version=MSL_VERSION, extra_args=MSL_OPTIONS)
    except SpvadError as exc:
        raise MslTranslationError(f"kernel {name}: SPIR-V -> MSL failed ({exc})") from None
    entry, args = parse_entry(source)
    check_mapping(args, num_buffers, push_index, name)
    return MslProgram(source, entry, num_buffers, push_index, local_size_of(spirv), args,
                      parse_spec_constants(source))


# ---- SPIR-V words ---------------------------------------------------------------------------------------
def instructions(spirv):
    """(word offset, opcode, operand words) of every instruction after the 5-word header."""
    if len(spirv) < 20 or len(spirv) % 4 or struct.unpack_from("<I", spirv)[0] != MAGIC:
        raise MslTranslationError(f"not a SPIR-V module ({len(spirv)} bytes)")
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    at = 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0:
            raise MslTranslationError(f"malformed SPIR-V: zero word count at word {at}")
        yield at, opcode, words[at + 1:at + count]
        at += count


def metal_module(spirv, push_binding):
    """A copy of `spirv` whose push-constant variable is decorated `Binding push_binding`.

    Only SPIRV-Cross sees it (spirv-val rejects a Binding on a PushConstant variable; SPIRV-Cross's
    --msl-decoration-binding then places the block at [[buffer(push_binding)]] instead of buffer(0))."""
    push_vars, first_annotation = [], None
    for at, opcode, ops in instructions(spirv):
        if opcode == Op.OpVariable and ops[2] == StorageClass.PushConstant:
            push_vars.append(ops[1])
        if first_annotation is None and opcode in (Op.OpDecorate, Op.OpMemberDecorate):
            first_annotation = at
    if not push_vars:
        return spirv
    if first_annotation is None:   # the push block's struct is always decorated Block
        raise MslTranslationError("SPIR-V push-constant block without decorations")
    extra = b"".join(struct.pack("<4I", 4 << 16 | Op.OpDecorate, var, Decoration.Binding, push_binding)
                     for var in push_vars)
    return spirv[:4 * first_annotation] + extra + spirv[4 * first_annotation:]


def local_size_of(spirv):
    """(x, y, z) of the module's OpExecutionMode LocalSize (the threadgroup size Metal dispatches)."""
    for _, opcode, ops in instructions(bytes(spirv)):
        if opcode == Op.OpExecutionMode and ops[1] == ExecutionMode.LocalSize:
            return tuple(ops[2:5])
    raise MslTranslationError("SPIR-V module has no LocalSize execution mode")


# ---- parsing the MSL ------------------------------------------------------------------------------------
_KERNEL = re.compile(r"\bkernel\s+void\s+(\w+)\s*\((.*?)\)\s*\{", re.S)
_BUFFER_ARG = re.compile(r"^(?:const\s+)?(device|constant)\s+(.+?)\s*[&*]\s*(\w+)\s*\[\[buffer\((\d+)\)\]\]$")
_MACRO = re.compile(r"^constant\s+(\w+)\s+\w+\s*=\s*SPIRV_CROSS_CONSTANT_ID_(\d+)\s*;", re.M)
_FUNCTION_CONSTANT = re.compile(r"^constant\s+(\w+)\s+\w+\s*\[\[function_constant\((\d+)\)\]\]\s*;", re.M)


def split_args(text):
    """Split a parameter list at top-level commas (not inside (), [], <>)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def parse_entry(source):
    """(entry name, [(address space, type, name, index)] of its [[buffer(k)]] parameters)."""
    kernels = _KERNEL.findall(source)
    if len(kernels) != 1:
        raise MslTranslationError(f"expected one kernel function in the MSL, found {len(kernels)}")
    entry, params = kernels[0]
    args = []
    for p in split_args(params):
        if "[[buffer(" in p:
            m = _BUFFER_ARG.match(" ".join(p.split()))
            if m is None:
                raise MslTranslationError(f"unexpected buffer parameter in the MSL: {p!r}")
            args.append((m[1], m[2], m[3], int(m[4])))
    return entry, args


def check_mapping(args, num_buffers, push_index, name="kernel"):
    """Raise unless: indices are unique, storage buffers (`device`) use 0..num_buffers-1 and the
    push-constant block (the only `constant` buffer) uses push_index."""
    problems, seen = [], {}
    for space, _type, arg, index in args:
        if index in seen:
            problems.append(f"{arg} and {seen[index]} share [[buffer({index})]]")
        seen[index] = arg
        if space == "device" and not 0 <= index < num_buffers:
            problems.append(f"storage buffer {arg} at [[buffer({index})]], outside 0..{num_buffers - 1}")
        if space == "constant" and index != push_index:
            problems.append(f"push constants {arg} at [[buffer({index})]], expected {push_index}")
    if problems:
        raise MslTranslationError(f"kernel {name}: the MSL breaks the buffer mapping: " + "; ".join(problems))


def parse_spec_constants(source):
    """{spec id: (form, MSL type)}. SPIRV-Cross writes a spec constant that sizes an array (adstack
    capacities) as a preprocessor macro SPIRV_CROSS_CONSTANT_ID_k, any other as a Metal function constant."""
    out = {int(k): ("macro", ty) for ty, k in _MACRO.findall(source)}
    out.update({int(k): ("function", ty) for ty, k in _FUNCTION_CONSTANT.findall(source)})
    return out


def _literal(ty, value, spec_id):
    if ty == "bool":
        return "true" if value else "false"
    if ty == "float":
        v = float(value)
        if v != v or v in (float("inf"), float("-inf")):
            raise MslTranslationError(f"spec constant {spec_id}: {value!r} is not finite")
        return f"{v!r}f"
    if ty not in ("uint", "int") or isinstance(value, float):
        raise MslTranslationError(f"spec constant {spec_id}: cannot give {value!r} to an MSL {ty}")
    v = int(value)
    lo, hi = (0, 2**32) if ty == "uint" else (-2**31, 2**31)
    if not lo <= v < hi:
        raise MslTranslationError(f"spec constant {spec_id}: {v} does not fit an MSL {ty}")
    return f"{v}u" if ty == "uint" else f"({v})"


def specialize_source(source, spec_constants, values):
    """Prepend `#define SPIRV_CROSS_CONSTANT_ID_k <value>` for every macro-form spec constant in `values`
    (SPIRV-Cross guards its default with #ifndef). Ids the module does not have are ignored (as in Vulkan)."""
    defines = [f"#define SPIRV_CROSS_CONSTANT_ID_{k} {_literal(spec_constants[k][1], v, k)}\n"
               for k, v in sorted(values.items()) if spec_constants.get(k, ("",))[0] == "macro"]
    return "".join(defines) + source


def function_constant_values(spec_constants, values):
    """[(index, MSL type, little-endian bytes)] of the function-form spec constants given in `values`."""
    out = []
    for k, v in sorted(values.items()):
        form, ty = spec_constants.get(k, (None, None))
        if form == "function":
            _literal(ty, v, k)   # range and type check
            out.append((k, ty, struct.pack(SPEC_TYPES[ty], bool(v) if ty == "bool" else
                                           float(v) if ty == "float" else int(v))))
    return out

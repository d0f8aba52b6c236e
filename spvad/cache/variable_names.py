"""The names a function's code reads as variables (globals, builtins, closure cells; not attribute names), for the
changed-globals check (cache.global_values): from its load instructions, nested code included."""
import dis
import functools
import sys
import types


@functools.lru_cache(maxsize=1024)
def variable_names(code):
    """The sorted names `code` (and code nested in it) loads as variables: a code object never changes, and
    disassembling it cost ~1 ms of each compile of MPM's p2g."""
    return tuple(sorted(set(loaded_names(code))))


def loaded_names(code, scan=None):
    scan = scan or (scanned_loads if SCAN_LOADS else disassembled_loads)
    yield from scan(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from loaded_names(c, scan)


def disassembled_loads(code, loads=("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF")):
    return [ins.argval for ins in dis.get_instructions(code) if ins.opname in loads]


# CPython 3.11-3.13 encode these loads alike (LOAD_GLOBAL: name index << 1 | push-null bit; LOAD_DEREF: an index
# into the fast locals and cells), so their operands are read without dis's Instruction tuples (positions, labels,
# reprs): 0.02 instead of 0.2-0.3 ms of a process's first compile of a kernel. Elsewhere dis decodes them;
# tests/cache/test_variable_names.py checks both ways agree.
SCAN_LOADS = (3, 11) <= sys.version_info[:2] <= (3, 13) and hasattr(dis, "_unpack_opargs")
_LOAD_GLOBAL, _LOAD_NAME = dis.opmap["LOAD_GLOBAL"], dis.opmap["LOAD_NAME"]
_LOAD_CELLS = {dis.opmap[n] for n in ("LOAD_DEREF", "LOAD_CLASSDEREF") if n in dis.opmap}


def scanned_loads(code):
    names, cell, out = code.co_names, code._varname_from_oparg, []
    for _, op, arg in dis._unpack_opargs(code.co_code):
        if op == _LOAD_GLOBAL or op == _LOAD_NAME:
            out.append(names[arg >> 1 if op == _LOAD_GLOBAL else arg])
        elif op in _LOAD_CELLS:
            out.append(cell(arg))
    return out

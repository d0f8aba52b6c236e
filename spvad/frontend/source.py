"""A Python function's source, AST and namespaces, as the frontend needs them (file, line, names)."""
import ast
import inspect
import linecache
import textwrap

from ..errors import CompileError
from ..ir.nodes import Loc

_MISSING = object()
# The deepest nesting a kernel or func may have (levels of the AST: `a + b + c` nests one per operator): far past
# what hand-written code needs, and what compiles in seconds; deeper code is refused with the line to split.
# (Past the caller's recursion limit, the compile runs on a deep stack: ir/deep_stack.py.)
MAX_NESTING = 10_000
_parsed = {}   # code object -> (AST, file name, first line, lines)
_variables = {}   # id of a function's AST -> (the AST, FunctionSource.variables of it)


def _parse(fn):
    if getattr(fn, "__name__", None) == "<lambda>":   # its source lines may not even parse alone
        code = fn.__code__
        raise CompileError("a lambda cannot be compiled as a kernel or @sp.func: define the function with def",
                           code.co_filename, code.co_firstlineno,
                           linecache.getline(code.co_filename, code.co_firstlineno).strip())
    found = _block_by_indentation(fn)
    if found is not None:
        lines, first, module = found
    else:
        try:
            lines, first = inspect.getsourcelines(fn)
            module = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError) as e:
            raise CompileError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}") from None
    tree = next((n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if not isinstance(tree, ast.FunctionDef):
        raise CompileError(f"{fn.__name__} is not a plain function definition")
    filename = inspect.getsourcefile(fn) or "<unknown>"
    depth, lineno = _deepest(tree)
    if depth > MAX_NESTING:
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        raise CompileError(f"{fn.__name__}: an expression here is nested too deeply ({depth:,} levels; spvad "
                           f"compiles at most {MAX_NESTING:,}): split it into several statements, e.g. partial "
                           "sums", filename, first + lineno - 1, text[:120] + (" ..." if len(text) > 120 else ""))
    return tree, filename, first, lines


def _deepest(tree):
    """(depth, line in the parsed block) of the most deeply nested node of `tree`; walked in a loop, not by
    recursion (one expression may nest thousands of operators)."""
    best, line = 0, 1
    pending = [(tree, 1, 1)]
    while pending:
        node, depth, lineno = pending.pop()
        lineno = getattr(node, "lineno", lineno)
        if depth > best:
            best, line = depth, lineno
        pending.extend((child, depth + 1, lineno) for child in ast.iter_child_nodes(node))
    return best, line


def _block_by_indentation(fn):
    """(lines, first line, parsed module) of `fn`'s definition, cut where the indentation returns to the
    `def` line's: the lines inspect.getsourcelines gives, without its tokenizer (milliseconds on a process's
    first kernel). None when that cut does not parse as one function (a line of a string or bracket further
    left), so the caller asks inspect."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename, getattr(fn, "__globals__", None))
    start = code.co_firstlineno - 1
    if not 0 <= start < len(lines):
        return None
    k = start
    while k < len(lines) and lines[k].lstrip().startswith("@"):
        k += 1
    if k == len(lines) or not lines[k].lstrip().startswith(("def ", "async def ")):
        return None
    base = len(lines[k]) - len(lines[k].lstrip())
    end = k + 1
    while end < len(lines):
        text = lines[end].strip()
        if text and not text.startswith("#") and len(lines[end]) - len(lines[end].lstrip()) <= base \
                and not text.startswith((")", "]", "}")):
            break
        end += 1
    while end > k + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1   # trailing blank lines and comments belong to what follows
    block = lines[start:end]
    try:
        module = ast.parse(textwrap.dedent("".join(block)))
    except SyntaxError:
        return None
    return (block, start + 1, module) if len(module.body) == 1 else None


class GlobalName:
    """Where a free name of a kernel or func is bound: a closure cell or a module's globals. `get()` reads
    what the name refers to now (Python's rule: a launch binds the ndarray the name refers to then)."""
    __slots__ = ("name", "cell", "namespace", "key")

    def __init__(self, name, cell=None, namespace=None):
        self.name, self.cell, self.namespace = name, cell, namespace
        self.key = (id(cell if cell is not None else namespace), name)   # one binding, however reached

    def get(self, default=None):
        if self.cell is None:
            return self.namespace.get(self.name, default)
        try:
            return self.cell.cell_contents
        except ValueError:   # the enclosing function deleted it
            return default

    @classmethod
    def of(cls, fn, name):
        """The binding `name` resolves through in `fn` now: a filled closure cell, else its module's globals
        (FunctionSource.lookup's order)."""
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if var == name and cls(name, cell=cell).get(_MISSING) is not _MISSING:
                return cls(name, cell=cell)
        return cls(name, namespace=fn.__globals__)


class FunctionSource:
    def __init__(self, fn, tree, filename, first_line, lines):
        self.fn, self.tree, self.filename = fn, tree, filename
        self.first_line, self.lines = first_line, lines
        self.name = fn.__name__
        # cells, not their contents: a func's source is kept, and a closure may be re-bound later
        self.cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        self.globals = fn.__globals__

    @classmethod
    def of(cls, fn):
        """The source of `fn` now: its closure and globals as they are, its text and AST parsed once per code
        object (a kernel's gradient compiles it again; the frontend never changes an AST)."""
        parsed = _parsed.get(getattr(fn, "__code__", None))
        if parsed is None:
            parsed = _parse(fn)
            if len(_parsed) > 512:
                _parsed.clear()
                _variables.clear()
            _parsed[fn.__code__] = parsed
        tree, filename, first, lines = parsed
        return cls(fn, tree, filename, first, lines)

    def site(self, name):
        """The GlobalName that `name` resolves through now."""
        return GlobalName.of(self.fn, name)

    def loc(self, node):
        lineno = getattr(node, "lineno", 1)
        k = lineno - 1
        text = self.lines[k] if 0 <= k < len(self.lines) else ""
        return Loc(self.filename, self.first_line + lineno - 1, text.rstrip("\n"))

    def lookup(self, name, default=_MISSING):
        cell = self.cells.get(name)
        if cell is not None:
            try:
                return cell.cell_contents
            except ValueError:   # not yet filled (e.g. a func defined later in the enclosing scope)
                pass
        if name in self.globals:
            return self.globals[name]
        builtins = self.globals.get("__builtins__", {})
        builtins = builtins if isinstance(builtins, dict) else vars(builtins)
        if name in builtins:
            return builtins[name]
        return default

    def body_without_docstring(self):
        body = self.tree.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        return body

    def variables(self):
        """Names assigned somewhere other than a plain top-level `name = expr` (inside loops or ifs, or by
        augmented assignment): those are variables, never lazily re-evaluated expressions. Worked out once
        per AST (a kernel's gradient builds it again)."""
        known = _variables.get(id(self.tree))
        if known is not None and known[0] is self.tree:
            return known[1]
        top_level = {id(t) for st in self.body_without_docstring() if isinstance(st, ast.Assign) for t in st.targets}
        out = set()
        for node in ast.walk(self.tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
            for t in targets:
                if id(t) not in top_level:
                    out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
                elif isinstance(t, (ast.Subscript, ast.Attribute)):   # `v[0] = 1.0` at the top level: v is a local
                    out |= {n.id for n in ast.walk(t.value) if isinstance(n, ast.Name)}
        _variables[id(self.tree)] = (self.tree, frozenset(out))
        return _variables[id(self.tree)][1]

    def assigned_names(self):
        """Names the function assigns to, whole or in part (`v = ..`, `v[k] = ..`, `v.x += ..`)."""
        out = set()
        for n in ast.walk(self.tree):
            if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
                while isinstance(n, (ast.Subscript, ast.Attribute)):
                    n = n.value
                if isinstance(n, ast.Name):
                    out.add(n.id)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
        return out

"""The house (docs/architecture.md): no import circles, lazy imports included; the package root holds the public
face and what every layer shares; no module past 500 lines; every package says what it owns."""
import ast
from pathlib import Path

import pytest

import spvad
from spvad.cache import source_stamp

PACKAGE = Path(spvad.__file__).resolve().parent
GENERATED = {"spvad.spirv.spec"}   # from the Khronos grammar (ci/gen_spirv_spec.py)
MAX_LINES = 500
MAX_ROOT_MODULES = 10              # beside __init__.py and __main__.py


def module_names(package_dir):
    """{dotted module name: path} of every .py file under `package_dir` (a package named as its folder)."""
    root = package_dir.parent
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_modules(name, path, modules):
    """The modules of `modules` that module `name` imports anywhere in its file: at the top, in functions
    (lazy imports), under `if`/`try`, and `importlib.import_module("...")` with a constant name."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()

    def resolve(target):   # the most specific module of `modules` that `target` names
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
            base = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:   # `from pkg import sub` imports the module pkg.sub when there is one
                resolve(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) ==
              "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            resolve(node.args[0].value)
    return found


def import_graph(package_dir):
    modules = module_names(package_dir)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def describe(component, graph):
    """Each import between the modules of a circle, as 'a -> b' lines."""
    return "\n".join(f"  {a} -> {b}" for a in component for b in sorted(graph[a]) if b in component)


def test_no_import_circles():
    graph = import_graph(PACKAGE)
    assert "spvad.kernel" in graph["spvad"] and "spvad.ir.nodes" in graph["spvad.ir.print_format"]   # it reads
    found = circles(graph)
    assert not found, "import circles (lazy imports count: a lower layer takes a registration instead):\n" + \
        "\n\n".join(describe(c, graph) for c in found)


def test_a_lazy_circle_is_found(tmp_path):
    """The check can fail: a circle closed by an import inside a function, and one through `from . import`."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from .sub import b\n\ndef f():\n    return b.g()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def g():\n    from ..a import f\n    return f\n")
    (pkg / "sub" / "c.py").write_text("from . import d\n")
    (pkg / "sub" / "d.py").write_text("import importlib\nc = importlib.import_module('pkg.sub.c')\n")
    assert circles(import_graph(pkg)) == [["pkg.a", "pkg.sub.b"], ["pkg.sub.c", "pkg.sub.d"]]


def test_the_root_holds_the_face_and_what_every_layer_shares():
    root_modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(root_modules) <= MAX_ROOT_MODULES, f"{len(root_modules)} modules at spvad/: {root_modules}"
    for package in ("tape", "cache", "frontend", "ir", "autodiff", "spirv", "launch", "rhi", "interop"):
        assert (PACKAGE / package / "__init__.py").is_file(), package


@pytest.mark.parametrize("name", sorted(module_names(PACKAGE)))
def test_module_size_and_opening_line(name):
    path = module_names(PACKAGE)[name]
    text = path.read_text()
    if name not in GENERATED:
        assert len(text.splitlines()) <= MAX_LINES, f"{path} has {len(text.splitlines())} lines: split it by " \
            "responsibility"
    if text.strip():   # (an empty __init__.py marks a folder of backend modules)
        assert ast.get_docstring(ast.parse(text)), f"{path} opens with no docstring saying what it owns"


def test_the_source_stamp_covers_the_whole_package():
    """The compile cache's key hashes every spvad source: a changed compiler never loads an old entry."""
    assert Path(source_stamp.ROOT).resolve() == PACKAGE


def test_the_map_names_every_package_and_root_module():
    """docs/architecture.md keeps up with the layout: a new package or root module gets its line."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    modules = [p.name for p in PACKAGE.glob("*.py")]
    missing = [f"{n}/" for n in packages if f"`{n}/`" not in text] + [n for n in modules if f"`{n}`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"

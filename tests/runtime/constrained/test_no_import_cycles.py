"""runtime/constrained has no import cycles, between modules or between its subpackages, and its subpackages
depend on each other only downwards (automata <- ir, schema, vocab <- parser <- compiler). Every import
counts: module level, inside functions, and under `if TYPE_CHECKING:` (a typing cycle is still a cycle)."""
from __future__ import annotations

import ast
from pathlib import Path

import sglite.runtime.constrained as constrained
from tests.import_graph import find_cycle

ROOT = Path(constrained.__file__).parent
PACKAGE = "sglite.runtime.constrained"

# unit -> units it may import from (a unit is a subpackage, or a module at the package's top)
LAYERS = {
    "errors": set(),
    "budget": {"errors"},
    "cache": set(),
    "automata": {"errors", "budget"},
    "ir": {"automata", "budget"},
    "vocab": {"automata", "cache"},
    "schema": {"automata", "ir", "errors", "budget"},
    "parser": {"automata", "ir", "vocab", "errors", "budget", "cache"},
    "cfg": {"automata", "ir", "errors", "budget"},          # a frontend, as schema is: it lowers to ir
    "footprint": {"automata", "cache"},
    "compiler": {"automata", "ir", "vocab", "schema", "parser", "cfg", "errors", "budget", "footprint", "cache"},
    "__init__": {"compiler", "errors", "parser", "cfg", "budget"},
}


def _modules() -> dict[str, Path]:
    """Dotted name relative to the package ('' for its __init__, 'schema' for schema/__init__) -> file."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, is_package: bool, node: ast.ImportFrom | ast.Import, known: set[str]) -> set[str]:
    """The package modules an import statement in module `name` refers to."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
        bases = [t[len(PACKAGE) + 1:] if t.startswith(PACKAGE + ".") else "" if t == PACKAGE else None
                 for t in targets]
        return {b for b in bases if b is not None and b in known}
    if node.level == 0:
        if node.module != PACKAGE and not (node.module or "").startswith(PACKAGE + "."):
            return set()
        base = node.module[len(PACKAGE) + 1:] if node.module != PACKAGE else ""
    else:
        pkg = name.split(".") if name else []
        if not is_package:
            pkg = pkg[:-1]
        if node.level - 1 > len(pkg):
            return set()
        pkg = pkg[:len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    out = set()
    for alias in node.names:            # `from . import x` may name a submodule
        sub = f"{base}.{alias.name}" if base else alias.name
        out.add(sub if sub in known else base)
    return {m for m in out if m in known}


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports (anywhere in its source)."""
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _resolve(name, path.name == "__init__.py", node, known)
        deps.discard(name)
        graph[name] = deps
    return graph


def unit(module: str) -> str:
    """The subpackage a module belongs to, or the module itself at the package's top."""
    return module.split(".")[0] if module else "__init__"


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, deps in graph.items():
        out.setdefault(unit(a), set()).update(unit(b) for b in deps if unit(b) != unit(a))
    return out


def test_imports_are_resolved():
    g = import_graph()
    assert "automata.byte_dfa" in g["automata.dfa_lowering"]
    assert "compiler" in g[""] and "errors" in g["automata.regex"]


def test_no_module_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_subpackage_cycles_and_layers_hold():
    units = unit_graph(import_graph())
    cycle = find_cycle(units)
    assert cycle is None, "subpackage cycle: " + " -> ".join(cycle)
    assert set(units) == set(LAYERS), "a new top-level unit: add it to LAYERS with what it may import"
    for u, deps in units.items():
        assert deps <= LAYERS[u], f"{u} imports {sorted(deps - LAYERS[u])}, outside its layer"

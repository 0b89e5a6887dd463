"""The import graph of a package tree, read from source: every import counts, at module level, inside functions
and under `if TYPE_CHECKING:` (a typing cycle is still a cycle)."""
from __future__ import annotations

import ast
from pathlib import Path


def modules(package: str, root: Path) -> dict[str, Path]:
    """Dotted name -> file for every module under `root`, which is imported as `package`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _targets(name: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute dotted names an import statement in module `name` may refer to."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = name.split(".")
        if not is_package:
            pkg = pkg[:-1]
        if node.level - 1 > len(pkg):
            return []
        pkg = pkg[:len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" for a in node.names] + [base]   # `from . import x` may name a submodule


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `mods` it imports, anywhere in its source."""
    graph = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found = [t for t in _targets(name, path.name == "__init__.py", node) if t in mods]
                # `from pkg import sub` names the submodule; `from pkg import func` names the package
                subs = [t for t in found if isinstance(node, ast.ImportFrom) and t != found[-1]]
                deps |= set(subs) if subs and len(subs) == len(node.names) else set(found)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None

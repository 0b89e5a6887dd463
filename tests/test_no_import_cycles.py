"""The whole package has no import cycles: sglite/, runtime/ (sglite.runtime) and kernels/ (sglite.kernels).
Every import counts, inside functions and under TYPE_CHECKING too: an import moved into a function hides a
cycle from Python, not from a reader."""
from __future__ import annotations

from pathlib import Path

from tests.import_graph import find_cycle, import_graph, modules

REPO = Path(__file__).resolve().parent.parent
TREES = {"sglite": REPO / "sglite", "sglite.runtime": REPO / "runtime", "sglite.kernels": REPO / "kernels"}


def package_graph() -> dict[str, set[str]]:
    mods: dict = {}
    for package, root in TREES.items():
        mods.update(modules(package, root))
    return import_graph(mods)


def test_graph_sees_imports_inside_functions_and_across_trees():
    g = package_graph()
    assert "sglite.runtime.engine.engine" in g and "sglite.kernels.w4a8_cpu" in g
    # sglite/cli.py imports its commands inside main(); relative imports resolve to runtime/ through sglite.runtime
    assert "sglite.server.launch" in g["sglite.cli"]
    assert any(d.startswith("sglite.runtime.") for d in g["sglite.runtime.engine.engine"])


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles():
    cycle = find_cycle(package_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)

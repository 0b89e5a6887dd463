"""What the README's base install (`pip install -e .`) brings is enough for every command `sglite` has: each
third-party module that the package imports outside the optional extras' code is a base dependency."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# code that runs only with an optional extra installed: Ray (`--ray`), Triton (GPU kernels), test helpers
OPTIONAL = {"ray", "triton"}


def base_dependencies() -> set[str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}


def third_party_imports(folder: Path) -> dict[str, str]:
    """top-level module -> a file importing it, for imports that are neither stdlib nor the package itself."""
    out = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "sglite":
                    out.setdefault(top, str(path.relative_to(REPO)))
    return out


def test_the_language_server_and_cli_need_only_base_dependencies():
    dists = packages_distributions()
    base = base_dependencies()
    missing = []
    for module, where in sorted(third_party_imports(REPO / "sglite").items()):
        if module in OPTIONAL:
            continue
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        if not names & base:
            missing.append(f"{module} (imported in {where}; distributions {sorted(names)})")
    assert not missing, "not in pyproject's base dependencies: " + "; ".join(missing)


def test_serve_help_works_after_the_base_install():
    out = subprocess.run([sys.executable, "-m", "sglite.cli", "serve", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--port" in out.stdout

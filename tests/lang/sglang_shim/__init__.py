"""Run SGLang's own frontend programs against sglite: while `aliased()` is active, `import sglang` (and the
few submodules SGLang's test programs import) gives sglite's modules instead.

Nothing of SGLang's is copied here. The programs come from SGLang's installed package
(`pip install --no-deps sglang`), read from `sglang/test/test_programs.py` without importing `sglang` itself
(its `__init__` pulls in SGLang's server, torch extensions and many packages)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# SGLang's module -> the sglite module that answers for it
ALIASES = {
    "sglang": "sglite",
    "sglang.lang": "sglite.lang",
    "sglang.lang.api": "sglite.lang.api",
    "sglang.lang.ir": "sglite.lang.ir",
    "sglang.lang.choices": "sglite.lang.choices",
    "sglang.lang.global_config": "sglite.lang.global_config",
}


def _is_hip() -> bool:
    """SGLang's `sglang.srt.utils.is_hip`: whether torch is a ROCm build."""
    import torch
    return torch.version.hip is not None


def _srt_stand_ins() -> dict[str, types.ModuleType]:
    """`sglang.srt.utils` is SGLang's server utility package (it imports torch and SGLang's kernels); the test
    programs take only `is_hip` from it at import. Anything else under `sglang.srt` stays missing, so a
    program that needs SGLang's server modules fails with ModuleNotFoundError naming the module."""
    srt = types.ModuleType("sglang.srt")
    srt.__path__ = []   # a package, so `import sglang.srt.x` looks for submodules (and finds none)
    utils = types.ModuleType("sglang.srt.utils")
    utils.__path__ = []
    utils.is_hip = _is_hip
    srt.utils = utils
    return {"sglang.srt": srt, "sglang.srt.utils": utils}


def programs_path() -> Path | None:
    """Where the installed SGLang package keeps its frontend test programs, or None if it is not installed.
    Finds the package without importing it."""
    spec = importlib.util.find_spec("sglang") if "sglang" not in sys.modules else None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "test" / "test_programs.py"
    return path if path.is_file() else None


@contextmanager
def aliased() -> Iterator[None]:
    """`sglang` and its submodules in ALIASES resolve to sglite's while inside; sys.modules is restored after."""
    modules = {name: importlib.import_module(target) for name, target in ALIASES.items()}
    modules.update(_srt_stand_ins())
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load_programs(path: Path) -> types.ModuleType:
    """Import SGLang's test_programs.py (call inside `aliased()`: it runs `import sglang as sgl`)."""
    spec = importlib.util.spec_from_file_location("sglang_test_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

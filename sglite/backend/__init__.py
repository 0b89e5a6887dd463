"""Language backends: in-process `Runtime`, HTTP `RuntimeEndpoint`, and `OpenAI`-compatible servers.
Imported lazily so `import sglite` stays light."""
from __future__ import annotations

from typing import Any

_LAZY = {
    "Backend": "base", "Prompt": "base", "Completion": "base", "UsageStats": "base",
    "EngineBackend": "engine_backend", "Runtime": "runtime", "RuntimeEndpoint": "runtime_endpoint",
    "OpenAI": "openai", "RayRuntime": "ray_runtime",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)

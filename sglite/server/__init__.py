"""HTTP server: OpenAI-compatible API and SGLang's native /generate around one Engine.

    from sglite.server import create_app, ModelInfo, ServerThread
"""
from __future__ import annotations

from typing import Any

__all__ = ["create_app", "ModelInfo", "ServerThread"]


def __getattr__(name: str) -> Any:  # lazy: `import sglite.server` stays light
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "ModelInfo":
        from .model_info import ModelInfo
        return ModelInfo
    if name == "ServerThread":
        from .launch import ServerThread
        return ServerThread
    raise AttributeError(f"module 'sglite.server' has no attribute {name!r}")

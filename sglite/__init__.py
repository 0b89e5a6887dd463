"""sglite: a small structured-generation language and runtime for LLMs, source-compatible with SGLang's
frontend (`import sglite as sgl`).

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=64))

Importing this package is light: the language is plain Python; backends and the engine (torch) load on first
use."""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    # language
    **{name: "sglite.lang" for name in (
        "function", "gen", "gen_int", "gen_string", "select", "system", "user", "assistant", "system_begin",
        "system_end", "user_begin", "user_end", "assistant_begin", "assistant_end", "image", "video",
        "set_default_backend", "get_default_backend", "global_config", "flush_cache", "get_server_info",
        "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
        "SglFunction", "ProgramState", "ProgramStateGroup", "ProgramError", "SamplingParams", "RequestError")},
    # backends
    "Runtime": "sglite.backend.runtime",
    "RuntimeEndpoint": "sglite.backend.runtime_endpoint",
    "OpenAI": "sglite.backend.openai",
    "RayRuntime": "sglite.backend.ray_runtime",   # imports Ray only when started
    # engine (imports torch)
    "Engine": "sglite.runtime.engine",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sglite' has no attribute {name!r}")
    mod = importlib.import_module(module)
    if name == "Engine" and not hasattr(mod, "Engine"):   # until the package re-exports it
        mod = importlib.import_module("sglite.runtime.engine.engine")
    value = getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = list(_LAZY)

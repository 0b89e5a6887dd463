"""What the server needs to know about the served model, apart from the engine: its name, tokenizer (for chat
templates and token counts) and context length."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelInfo:
    name: str
    tokenizer: Any          # sglite.runtime.tokenizer.Tokenizer
    max_context: int
    path: str | None = None
    tokenizer_path: str | None = None  # what a client passes to load_tokenizer() to tokenize as we do

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.vocab_size)

    def token_bytes(self, token_id: int) -> bytes:
        try:
            return self.tokenizer.token_bytes(token_id)
        except (AttributeError, IndexError):
            return self.tokenizer.decode([token_id]).encode()

    @classmethod
    def from_engine(cls, engine: Any, name: str | None = None, path: str | None = None,
                    tokenizer_path: str | None = None) -> "ModelInfo":
        """From an Engine: engine.tokenizer (or engine.model.tokenizer) and engine.max_context (which an engine
        option may set below the model's own)."""
        model = getattr(engine, "model", None)
        tokenizer = getattr(engine, "tokenizer", None) or getattr(model, "tokenizer", None)
        max_context = getattr(engine, "max_context", None) or getattr(getattr(model, "config", None), "max_context",
                                                                      None)
        if tokenizer is None or max_context is None:
            raise ValueError("cannot find the engine's tokenizer and context length; pass model_info to create_app")
        return cls(name=name or _default_name(path), tokenizer=tokenizer, max_context=int(max_context), path=path,
                   tokenizer_path=tokenizer_path)

def _default_name(path: str | None) -> str:
    if not path:
        return "default"
    return str(path).rstrip("/").rsplit("/", 1)[-1]

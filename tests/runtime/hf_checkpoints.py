"""Tiny random-weight Hugging Face checkpoints written by transformers itself, one per family and config style.

Each `Variant` names a transformers config class and its settings, plus an optional edit of the written
config.json (to produce the legacy styles older transformers versions wrote). Weights are re-drawn with a wider
spread than transformers' init (std 0.02 gives near-flat logits, where a greedy argmax is decided by rounding).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

# mixed English / Chinese / code, as in the issue
PROMPT = "Revenue rose 12% in Q3. 你好，世界！def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
VOCAB = 49152  # the SmolLM2 tokenizer the checkpoints reuse
WINDOW = 16    # sliding windows shorter than PROMPT, so that windowed layers mask
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=512)


@dataclass(frozen=True)
class Variant:
    name: str
    config_class: str                      # transformers class name, e.g. "LlamaConfig"
    settings: dict = field(default_factory=dict)
    edit: Callable[[dict], None] | None = None  # rewrites config.json after save_pretrained (legacy styles)
    template_file: bool = True             # chat template as chat_template.jinja (else in tokenizer_config.json)

    def __repr__(self) -> str:
        return self.name


def legacy_theta(cfg: dict) -> None:
    """transformers 4.x style: a top-level rope_theta and no rope_parameters."""
    cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]


def legacy_scaling(cfg: dict) -> None:
    """transformers 4.x style: top-level rope_theta plus a rope_scaling dict using the old "type" key."""
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params.pop("rope_theta")
    params["type"] = params.pop("rope_type")
    cfg["rope_scaling"] = params


def gemma3_legacy(cfg: dict, pattern: int) -> None:
    """transformers 4.x style Gemma 3: rope_theta and rope_local_base_freq, a sliding_window_pattern, no
    layer_types."""
    params = cfg.pop("rope_parameters")
    cfg["rope_theta"] = params["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = params["sliding_attention"]["rope_theta"]
    cfg.pop("layer_types")
    cfg.pop("_sliding_window_pattern", None)
    cfg["sliding_window_pattern"] = pattern


def rope(theta: float, **scaling) -> dict:
    return {"rope_parameters": {"rope_theta": theta, "rope_type": scaling.pop("rope_type", "default"), **scaling}}


VARIANTS = [
    Variant("llama-legacy-theta", "LlamaConfig", rope(50000.0), edit=legacy_theta, template_file=False),
    Variant("llama-rope_parameters", "LlamaConfig", rope(50000.0)),
    Variant("llama-linear-legacy", "LlamaConfig", rope(20000.0, rope_type="linear", factor=4.0), edit=legacy_scaling),
    Variant("llama-dynamic", "LlamaConfig", rope(10000.0, rope_type="dynamic", factor=2.0)),
    Variant("llama-llama3", "LlamaConfig", rope(50000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0, original_max_position_embeddings=64)),
    Variant("llama-yarn-mscale-legacy", "LlamaConfig",
            rope(10000.0, rope_type="yarn", factor=4.0, original_max_position_embeddings=128, mscale=0.707,
                 mscale_all_dim=1.0, beta_fast=16, beta_slow=2), edit=legacy_scaling),
    Variant("llama-bias-untied", "LlamaConfig", dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=False)),
    Variant("mistral-sliding", "MistralConfig", dict(sliding_window=WINDOW, **rope(1e6))),
    Variant("qwen2-bias", "Qwen2Config", dict(tie_word_embeddings=False, **rope(1e6))),
    Variant("qwen2-sliding-tied", "Qwen2Config", dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                                                      tie_word_embeddings=True)),
    Variant("qwen3-qknorm", "Qwen3Config", dict(head_dim=32, **rope(1e6))),
    Variant("qwen3-bias-yarn", "Qwen3Config", dict(head_dim=16, attention_bias=True, tie_word_embeddings=True,
                                                   **rope(1e6, rope_type="yarn", factor=2.0,
                                                          original_max_position_embeddings=256))),
    Variant("phi3-partial", "Phi3Config", dict(pad_token_id=0, eos_token_id=2, bos_token_id=1,
                                               **rope(10000.0, partial_rotary_factor=0.5))),
    Variant("phi3-longrope", "Phi3Config", dict(
        pad_token_id=0, eos_token_id=2, bos_token_id=1, original_max_position_embeddings=128,
        **rope(10000.0, rope_type="longrope", short_factor=[1.0 + 0.25 * i for i in range(8)],
               long_factor=[2.0 + i for i in range(8)]))),
    Variant("gemma", "GemmaConfig", dict(head_dim=32, pad_token_id=0, eos_token_id=2, bos_token_id=1)),
    Variant("gemma2-softcap", "Gemma2Config", dict(head_dim=32, query_pre_attn_scalar=24, sliding_window=WINDOW,
                                                    attn_logit_softcapping=None, final_logit_softcapping=5.0,
                                                    pad_token_id=0, eos_token_id=2, bos_token_id=1)),
    Variant("gemma2-attn-softcap", "Gemma2Config", dict(head_dim=32, query_pre_attn_scalar=24, sliding_window=WINDOW,
                                                         attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                                                         pad_token_id=0, eos_token_id=2, bos_token_id=1)),
    Variant("gemma3", "Gemma3TextConfig", dict(
        num_hidden_layers=3, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], pad_token_id=0, eos_token_id=2,
        bos_token_id=1, rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})),
    Variant("gemma3-legacy", "Gemma3TextConfig", dict(
        num_hidden_layers=4, num_key_value_heads=1, head_dim=32, sliding_window=WINDOW, pad_token_id=0,
        eos_token_id=2, bos_token_id=1, final_logit_softcapping=6.0,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 20000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}),
            edit=lambda cfg: gemma3_legacy(cfg, pattern=2)),
]
FAMILIES = sorted({v.config_class for v in VARIANTS})


def _redraw(model: torch.nn.Module, seed: int) -> None:
    """Weights with O(1) activations: norms ~ 1 (Gemma: offsets ~ 0), matrices ~ N(0, 1/fan_in)."""
    g = torch.Generator().manual_seed(seed)
    gemma = "gemma" in type(model).__name__.lower()  # Gemma norms multiply by (1 + weight)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name:
                p.copy_(noise * 0.1 + (0.0 if gemma else 1.0))
            elif name.endswith("bias"):
                p.copy_(noise * 0.1)
            elif "embed_tokens" in name:
                p.copy_(noise * 0.3)   # tied heads reuse it: keeps logits O(10)
            else:
                p.copy_(noise * p.shape[-1] ** -0.5)


def write_checkpoint(folder: Path, variant: Variant, tokenizer, seed: int = 0) -> Path:
    """save_pretrained of a random model of `variant`, plus the SmolLM2 tokenizer files. Returns folder."""
    import transformers

    cls = getattr(transformers, variant.config_class)
    config = cls(**{**TINY, **variant.settings})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _redraw(model, seed)
    model.save_pretrained(folder)
    if variant.edit is not None:
        path = folder / "config.json"
        cfg = json.loads(path.read_text())
        variant.edit(cfg)
        path.write_text(json.dumps(cfg, indent=2))
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    tok_cfg = {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}
    if variant.template_file:
        (folder / "chat_template.jinja").write_text(tokenizer.chat_template)
    else:
        tok_cfg["chat_template"] = tokenizer.chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return folder


def load_reference(folder: Path):
    """transformers' own reading of the folder: the reference every sglite result is compared with."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="eager")
    return model.eval()


@torch.no_grad()
def reference_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float()


@torch.no_grad()
def reference_greedy(model, ids: list[int], n: int) -> list[int]:
    """n greedy tokens from transformers' forward with its own KV cache (prefill, then one token per step)."""
    step = model(torch.tensor([ids]), use_cache=True)
    out = []
    for _ in range(n):
        out.append(int(step.logits[0, -1].argmax()))
        step = model(torch.tensor([[out[-1]]]), cache=step.cache, use_cache=True)
    return out

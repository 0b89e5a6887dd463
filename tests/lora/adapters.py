"""LoRA adapters for tests, made by peft itself on a base transformers loads, and llama.cpp-layout GGUF copies.

`make_peft_adapter` wraps the base in peft with random (non-zero) A and B, scaled so that the adapter moves the
logits by O(1), and saves the folder as peft does. `write_gguf_lora` writes the same factors the way
convert_lora_to_gguf.py lays them out: blk.N.<tensor>.weight.lora_a [r, in] / lora_b [out, r], adapter.lora.alpha,
and Q/K rows of lora_b permuted as the llama converter permutes the base's Q/K weights."""
from __future__ import annotations

import json
from pathlib import Path

import torch

GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
ALL_MODULES = list(GGUF_NAMES)


def make_peft_adapter(base, out: Path, *, r: int = 8, alpha: float = 16.0, targets=ALL_MODULES, seed: int = 0,
                      spread: float = 1.0, **lora_kwargs) -> Path:
    """Saves a peft LoRA of `base` (a transformers model; left unchanged) to `out` and returns it. A and B are
    drawn N(0, 1/fan_in) times `spread`, so B is not zero as peft's own init leaves it."""
    import copy

    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets),
                                                           lora_dropout=0.0, bias="none", **lora_kwargs))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5 * spread)
    model.save_pretrained(out)
    return out


def peft_model(base, folder: Path):
    """transformers + peft running the saved adapter: the reference."""
    import copy

    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base), folder).eval()


def permute_rows(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's Q/K row order: within each head, the two rotary halves interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def write_gguf_lora(peft_folder: Path, out: Path, arch: str, num_heads: int, num_kv_heads: int) -> Path:
    """The peft adapter of `peft_folder` as a llama.cpp GGUF LoRA file (float32)."""
    import gguf
    from safetensors.torch import load_file

    cfg = json.loads((peft_folder / "adapter_config.json").read_text())
    tensors = load_file(str(peft_folder / "adapter_model.safetensors"))
    w = gguf.GGUFWriter(str(out), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(cfg["lora_alpha"]))
    for key, t in sorted(tensors.items()):
        # base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
        parts = key.split(".")
        i, module, half = int(parts[parts.index("layers") + 1]), parts[-3], parts[-2][-1].lower()
        t = t.float()
        if half == "b" and module in ("q_proj", "k_proj"):
            t = permute_rows(t, num_heads if module == "q_proj" else num_kv_heads)
        w.add_tensor(f"blk.{i}.{GGUF_NAMES[module]}.weight.lora_{half}", t.contiguous().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out

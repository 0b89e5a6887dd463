"""llama.cpp's GGUF LoRA files, as its convert_lora_to_gguf.py writes them: general.type = "adapter",
adapter.type = "lora", adapter.lora.alpha, and per adapted tensor `blk.{i}.{name}.weight.lora_a` ([r, in]) and
`.lora_b` ([out, r]). The converter permutes the Q and K rows of lora_b like the base's (see gguf_loader.py);
they are un-permuted here, so the factors are in the base model's row order."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from ..config import ModelConfig
from .adapter import LoraError, ModuleFactors

GGUF_MODULES = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
                "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj"}
_NAME = re.compile(r"^blk\.(\d+)\.(\w+)\.weight\.lora_([ab])$")


def is_gguf_file(path: Path) -> bool:
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types and f.types[0].name == "STRING" else v.tolist()[0]


def read_gguf_lora(path: Path, config: ModelConfig) -> dict[tuple[int, str], ModuleFactors]:
    """{(layer, module): factors} of a GGUF LoRA file, for a base of `config`. Raises LoraError naming the
    problem: not an adapter, another architecture, a tensor of another kind."""
    from gguf import GGUFReader, quants

    from ..gguf_loader import PERMUTED_QK, unpermute_rotary_rows

    where = f"LoRA adapter {str(path)!r}"
    try:
        reader = GGUFReader(str(path))
    except Exception as e:
        raise LoraError(f"{where}: not a readable GGUF file: {e}") from None
    kind, adapter = _field(reader, "general.type"), _field(reader, "adapter.type")
    if kind != "adapter" or adapter != "lora":
        raise LoraError(f"{where}: a GGUF file of general.type={kind!r} adapter.type={adapter!r}, not a LoRA adapter "
                        "(general.type='adapter', adapter.type='lora', as convert_lora_to_gguf.py writes)")
    arch = _field(reader, "general.architecture")
    if arch != config.architecture:
        raise LoraError(f"{where}: an adapter for architecture {arch!r}, but the base model is "
                        f"{config.architecture!r}")
    alpha = _field(reader, "adapter.lora.alpha") or 0.0
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for t in reader.tensors:
        m = _NAME.match(t.name)
        if m is None or m.group(2) not in GGUF_MODULES:
            raise LoraError(f"{where}: tensor {t.name!r} is not a LoRA factor of a projection sglite adapts "
                            f"({', '.join(GGUF_MODULES)}); it would be ignored")
        try:
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise LoraError(f"{where}: cannot read tensor {t.name!r} ({t.tensor_type.name}): {e}") from None
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
        layer, module = int(m.group(1)), GGUF_MODULES[m.group(2)]
        if m.group(3) == "b" and config.architecture in PERMUTED_QK and module in ("q_proj", "k_proj"):
            heads = config.num_heads if module == "q_proj" else config.num_kv_heads
            if w.shape[0] % heads == 0 and (w.shape[0] // heads) % 2 == 0:   # else fuse() names the bad shape
                w = unpermute_rotary_rows(w, heads)
        halves.setdefault((layer, module), {})[m.group(3)] = torch.from_numpy(np.array(w, order="C"))
    out = {}
    for (layer, module), ab in sorted(halves.items()):
        if set(ab) != {"a", "b"}:
            raise LoraError(f"{where}: layer {layer} {module} has lora_{''.join(ab)} but not its pair")
        rank = ab["a"].shape[0]
        scaling = alpha / rank if alpha else 1.0     # llama.cpp: alpha 0 means a scale of 1
        out[layer, module] = ModuleFactors(ab["a"], ab["b"], float(scaling))
    return out

"""PEFT's saved LoRA adapters: a folder with adapter_config.json and adapter_model.safetensors (or .bin), as
`PeftModel.save_pretrained` writes them. Only what sglite computes is accepted; every other option is refused by
name, since ignoring it would run a different model than the one trained."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from .adapter import MODULES, LoraError, ModuleFactors

# lora weights: ...layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}[.{adapter name}].weight
_KEY = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.[^.]+)?\.weight$")

# options that change the computation and that sglite does not compute: (key, value that is harmless)
_REFUSED = {"use_dora": (False, None), "fan_in_fan_out": (False, None), "modules_to_save": (None, []),
            "lora_bias": (False, None), "use_qalora": (False, None), "target_parameters": (None, []),
            "trainable_token_indices": (None, {}, []), "alora_invocation_tokens": (None, []),
            "layer_replication": (None, []), "arrow_config": (None,), "use_bdlora": (None, False),
            "kasa_config": (None,), "monteclora_config": (None,)}


def is_peft_folder(path: Path) -> bool:
    return path.is_dir() and (path / "adapter_config.json").is_file()


def _pattern_value(patterns: dict[str, Any], module_key: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern lookup: the first key that matches the end of the module's name."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module_key):
            return value
    return default


def read_peft_config(folder: Path) -> dict[str, Any]:
    where = f"LoRA adapter {str(folder)!r}"
    try:
        cfg = json.loads((folder / "adapter_config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LoraError(f"{where}: adapter_config.json is unreadable: {e}") from None
    if not isinstance(cfg, dict):
        raise LoraError(f"{where}: adapter_config.json is not a JSON object")
    kind = cfg.get("peft_type", "LORA")
    if str(kind).upper() != "LORA":
        raise LoraError(f"{where}: peft_type is {kind!r}; sglite runs LORA adapters only")
    for key, harmless in _REFUSED.items():
        if key in cfg and cfg[key] not in harmless:
            raise LoraError(f"{where}: adapter_config.json sets {key}={cfg[key]!r}, which sglite does not compute "
                            f"(it computes plain LoRA on {', '.join(MODULES)})")
    if cfg.get("bias", "none") != "none":
        raise LoraError(f"{where}: adapter_config.json sets bias={cfg['bias']!r}; sglite computes bias='none' only")
    for key in ("r", "lora_alpha"):
        if not isinstance(cfg.get(key), (int, float)) or isinstance(cfg.get(key), bool) or cfg[key] <= 0:
            raise LoraError(f"{where}: adapter_config.json needs a positive number {key!r}, got {cfg.get(key)!r}")
    targets = cfg.get("target_modules")
    unknown = [t for t in targets if t not in MODULES] if isinstance(targets, list) else []   # a str: a regex
    if unknown:
        raise LoraError(f"{where}: target module(s) {unknown} are not projections sglite adapts "
                        f"({', '.join(MODULES)})")
    return cfg


def _load_tensors(folder: Path) -> dict[str, torch.Tensor]:
    st, binary = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    try:
        if st.is_file():
            from safetensors.torch import load_file
            return load_file(str(st))
        if binary.is_file():
            return torch.load(str(binary), map_location="cpu", weights_only=True)
    except Exception as e:   # a truncated or foreign file: the reader's own message says which
        raise LoraError(f"LoRA adapter {str(folder)!r}: cannot read its weights: {e}") from None
    raise LoraError(f"LoRA adapter {str(folder)!r} has adapter_config.json but no adapter_model.safetensors "
                    "(or adapter_model.bin)")


def read_peft(folder: Path) -> dict[tuple[int, str], ModuleFactors]:
    """{(layer, module): factors} of a PEFT LoRA folder. Raises LoraError naming an unsupported option or a
    tensor of another kind (embeddings, biases, DoRA magnitudes, modules outside MODULES)."""
    cfg = read_peft_config(folder)
    where = f"LoRA adapter {str(folder)!r}"
    tensors = _load_tensors(folder)
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, t in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise LoraError(f"{where}: tensor {key!r} is not a LoRA factor of a projection sglite adapts "
                            f"({', '.join(MODULES)}); it would be ignored")
        layer, module, half = int(m.group(1)), m.group(2), m.group(3)
        if module not in MODULES:
            raise LoraError(f"{where}: tensor {key!r} adapts {module!r}, not a projection sglite adapts "
                            f"({', '.join(MODULES)})")
        halves.setdefault((layer, module), {})[half] = t.float()
    rslora = bool(cfg.get("use_rslora", False))
    out = {}
    for (layer, module), ab in sorted(halves.items()):
        if set(ab) != {"A", "B"}:
            raise LoraError(f"{where}: layer {layer} {module} has lora_{''.join(ab)} but not its pair")
        key = f"model.layers.{layer}.{'mlp' if module in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}" \
              f".{module}"
        r = _pattern_value(cfg.get("rank_pattern") or {}, key, cfg["r"])
        alpha = _pattern_value(cfg.get("alpha_pattern") or {}, key, cfg["lora_alpha"])
        if ab["A"].shape[0] != r:
            raise LoraError(f"{where}: layer {layer} {module}'s lora_A has rank {ab['A'].shape[0]} but "
                            f"adapter_config.json says r={r}")
        scaling = alpha / math.sqrt(r) if rslora else alpha / r
        out[layer, module] = ModuleFactors(ab["A"].contiguous(), ab["B"].contiguous(), float(scaling))
    return out

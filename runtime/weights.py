"""Loads a model's weights into one naming scheme (GGUF's), from a GGUF file or a Hugging Face folder."""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

import torch

from .config import ModelConfig, UnsupportedModelError

# Hugging Face parameter name suffix -> GGUF tensor name suffix (per layer), for every family
_HF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.gate_proj.bias": "ffn_gate.bias",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.up_proj.bias": "ffn_up.bias",
    "mlp.down_proj.weight": "ffn_down.weight", "mlp.down_proj.bias": "ffn_down.bias",
}
# Gemma 2 normalizes after attention too: its post_attention_layernorm is not the pre-MLP norm
_GEMMA2_LAYER_NAMES = {**_HF_LAYER_NAMES, "post_attention_layernorm.weight": "post_attention_norm.weight",
                       "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                       "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
_HF_GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                    "lm_head.weight": "output.weight"}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
log = logging.getLogger("sglite.runtime")
# how the reduced kernel formats (w4a16, w4a8: runtime/linear.py) run a GGUF tensor type's exact values; a type
# not listed is dequantized and runs as the plan's other formats do (int8 per output channel under 4-bit plans,
# which rounds it), with a log line saying so. Float types run as themselves in fp32/bf16.
GGUF_FAST_PATHS = {"Q4_0": "4-bit blocks", "Q4_1": "4-bit blocks", "Q4_K": "4-bit blocks (sub-blocks of 32)",
                   "Q5_0": "8-bit blocks", "Q5_1": "8-bit blocks", "Q8_0": "8-bit blocks",
                   "Q5_K": "8-bit blocks (sub-blocks of 32)"}
# the types only the W8A8 kernel runs exactly (blocks of 16, or the IQ4 table's integers), where it is built with
# VNNI (kernels/w8a8_cpu.py); elsewhere they are dequantized as the types not listed above
GGUF_W8A8_PATHS = {"Q2_K": "8-bit blocks (sub-blocks of 16)", "Q3_K": "8-bit blocks (sub-blocks of 16)",
                   "Q6_K": "8-bit blocks (sub-blocks of 16)", "IQ4_NL": "8-bit blocks (the table's integers)",
                   "IQ4_XS": "8-bit blocks (the table's integers)"}


def gguf_fast_paths() -> dict[str, str]:
    """GGUF tensor type -> how the kernel formats run its exact values on this machine."""
    from sglite.kernels import registry

    return {**GGUF_FAST_PATHS, **(GGUF_W8A8_PATHS if registry.use("w8a8_cpu") else {})}


_FLOAT_TYPES = ("F32", "F16", "BF16")  # buffers some older checkpoints saved; recomputed from the config


def config_from_hf(folder: Path) -> ModelConfig:
    from .hf_config import config_from_dict

    return config_from_dict(json.loads((folder / "config.json").read_text()), source=str(folder))


def _safetensors_files(folder: Path) -> list[Path]:
    """The files transformers would read: the index's shards, else model.safetensors, else every *.safetensors."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(folder.glob("*.safetensors"))


def _split_fused(name: str, t: torch.Tensor, config: ModelConfig) -> dict[str, torch.Tensor]:
    """Phi-3's fused projections -> the separate tensors the other families have. rows: [q | k | v], [gate | up]."""
    if name.endswith("attn_qkv.weight"):
        q, k, v = t.split([config.q_size, config.kv_size, config.kv_size])
        base = name[: -len("attn_qkv.weight")]
        return {base + "attn_q.weight": q, base + "attn_k.weight": k, base + "attn_v.weight": v}
    if name.endswith("ffn_gate_up.weight"):
        gate, up = t.split([config.intermediate_size, config.intermediate_size])
        base = name[: -len("ffn_gate_up.weight")]
        return {base + "ffn_gate.weight": gate, base + "ffn_up.weight": up}
    return {name: t}


def weights_from_hf(folder: Path, config: ModelConfig | None = None) -> dict[str, torch.Tensor]:
    """float32 tensors under GGUF names. Raises on a tensor no supported family has (it would be ignored)."""
    from safetensors.torch import load_file

    config = config or config_from_hf(folder)
    files = _safetensors_files(folder)
    if not files:
        raise FileNotFoundError(f"model folder {str(folder)!r} has no *.safetensors files")
    out = {}
    for f in files:
        out.update(_hf_to_gguf(folder, config, load_file(str(f)), where=f" in {f.name}"))
    return out


_QUANT_PARTS = ("qweight", "qzeros", "scales", "g_idx")


class HFQuantTensors(Mapping):
    """{GGUF name: float32 tensor} over an AWQ/GPTQ folder (runtime/hf_quant.py): the quantized projections kept
    packed and read as their 4-bit block grids (`grid(name)`, with `input_perm(name)` for act-order), their float
    values computed only when asked (`m[name]`); the other tensors (embedding, norms, an unquantized head) float32."""

    def __init__(self, folder: Path, config: ModelConfig, spec):
        from safetensors.torch import load_file

        self.spec = spec
        files = _safetensors_files(folder)
        if not files:
            raise FileNotFoundError(f"model folder {str(folder)!r} has no *.safetensors files")
        dense, packed = {}, {}
        for f in files:
            for name, t in load_file(str(f)).items():
                base, _, part = name.rpartition(".")
                if part in _QUANT_PARTS:
                    packed.setdefault(base, {})[part] = t
                else:
                    dense[name] = t
        self._dense = _hf_to_gguf(folder, config, dense)
        self._packed: dict[str, dict] = {}
        for base, parts in packed.items():
            missing = [p for p in _QUANT_PARTS[:3] if p not in parts]
            if missing:
                raise UnsupportedModelError(f"{folder}: {base} has {sorted(parts)} but lacks {missing}")
            gguf = _hf_to_gguf(folder, config, {base + ".weight": parts["qweight"]}, check_only=True)
            self._packed[gguf] = parts
        self._recent: dict[str, tuple] = {}

    def _unpacked(self, name: str):
        from .hf_quant import unpack_awq, unpack_gptq

        if name not in self._recent:
            p = self._packed[name]
            self._recent[name] = unpack_awq(p["qweight"], p["qzeros"], p["scales"], self.spec) \
                if self.spec.method == "awq" else \
                unpack_gptq(p["qweight"], p["qzeros"], p["scales"], p.get("g_idx"), self.spec)
            while len(self._recent) > 3:
                self._recent.pop(next(iter(self._recent)))
        return self._recent[name]

    def __getitem__(self, name: str) -> torch.Tensor:
        from .hf_quant import dequantize

        if name in self._dense:
            return self._dense[name]
        return dequantize(self._unpacked(name))

    def __iter__(self):
        return iter([*self._dense, *self._packed])

    def __len__(self) -> int:
        return len(self._dense) + len(self._packed)

    def __contains__(self, name: object) -> bool:
        return name in self._dense or name in self._packed

    def grid(self, name: str):
        if name not in self._packed:
            return None
        q, scale, lo, _ = self._unpacked(name)
        return q, scale, lo, 4

    def input_perm(self, name: str):
        return self._unpacked(name)[3] if name in self._packed else None

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self._dense:
            return tuple(self._dense[name].shape)
        p = self._packed[name]
        return (p["scales"].shape[1], p["qweight"].shape[0] * (8 if self.spec.method == "gptq" else 1))

    def numel(self, name: str) -> int:
        shape = self.shape(name)
        return shape[0] * (shape[1] if len(shape) > 1 else 1)

    def qtype(self, name: str) -> str:
        return "Q4_1" if name in self._packed else "F32"     # 4 bits, a step and a minimum per block


def _hf_to_gguf(folder: Path, config: ModelConfig, tensors: dict, check_only: bool = False, where: str = ""):
    """HF names -> GGUF names (float32 values); with check_only, the one GGUF name of a single tensor."""
    layer_names = dict(_GEMMA2_LAYER_NAMES if config.sandwich_norms else _HF_LAYER_NAMES)
    layer_names.update({"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_gate_up.weight"})
    out = {}
    for name, t in tensors.items():
        if name.endswith(_IGNORED_SUFFIXES):
            continue
        if name in _HF_GLOBAL_NAMES:
            if check_only:
                return _HF_GLOBAL_NAMES[name]
            out[_HF_GLOBAL_NAMES[name]] = t.float()
            continue
        parts = name.split(".")  # model.layers.{i}.{rest}
        rest = ".".join(parts[3:])
        if len(parts) > 3 and parts[:2] == ["model", "layers"] and rest in layer_names:
            gguf = f"blk.{parts[2]}.{layer_names[rest]}"
            if check_only:
                if gguf.endswith(("attn_qkv.weight", "ffn_gate_up.weight")):
                    raise UnsupportedModelError(f"{folder}: fused quantized projection {name!r} is not supported")
                return gguf
            out.update(_split_fused(gguf, t.float(), config))
            continue
        raise UnsupportedModelError(f"{folder}: tensor {name!r}{where} is not part of the {config.architecture} "
                                    "layout sglite computes; it would be ignored")
    return out


def load_config_and_weights(path: Path) -> tuple[ModelConfig, "Mapping[str, torch.Tensor]"]:
    """The config and the weights under GGUF names: a dict of float32 tensors (an HF folder), or a GGUF file's
    lazy GGUFTensors (each dequantized when read; exact block grids where the type has them)."""
    if path.is_dir():
        config = config_from_hf(path)
        quant = json.loads((path / "config.json").read_text()).get("quantization_config")
        if quant:
            from .hf_quant import QuantSpec
            return config, HFQuantTensors(path, config, QuantSpec.from_config(quant, str(path)))
        return config, weights_from_hf(path, config)
    from .gguf_loader import open_gguf

    f = open_gguf(str(path.resolve()))
    config = f.config()
    f.check_tensor_types()
    kinds = f.tensor_types()
    fast = gguf_fast_paths()
    slow = [k for k in kinds if k not in fast and k not in _FLOAT_TYPES]
    if slow:
        log.info("%s: tensor types %s have no fast kernel path: they are dequantized exactly and run in the "
                 "plan's dense formats (int8 per output channel under 4-bit plans); %s", path.name,
                 ", ".join(f"{k} x{kinds[k]}" for k in slow),
                 ", ".join(f"{k}: {fast[k]}" for k in kinds if k in fast) or "")
    return config, f.tensors()

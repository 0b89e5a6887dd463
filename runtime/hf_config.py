"""config.json -> ModelConfig, the way transformers 5.x reads it for each family sglite runs.

Every key a family's transformers config class defines is either honoured here, declared inert (dropout, ids,
bookkeeping), or refused by name when set to something sglite does not compute. Defaults for absent keys are the
family's transformers defaults (tests/runtime/test_hf_config.py checks both against the installed transformers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import ModelConfig, UnsupportedModelError
from .rope import SCALED_ROPE_TYPES, RopeScaling, UnsupportedRopeError

# keys that do not change a forward pass in eval mode, or that are checked elsewhere
INERT_KEYS = frozenset({
    "initializer_range", "use_cache", "attention_dropout", "resid_pdrop", "embd_pdrop", "pad_token_id",
    "bos_token_id", "eos_token_id", "pretraining_tp",  # pretraining_tp only splits the same matmuls
    "transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype", "torch_dtype",
    "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type", "model_type",
    "_name_or_path", "tokenizer_class", "max_window_layers", "layer_types",
    "sliding_window_pattern", "_sliding_window_pattern",  # Gemma 3: read by _window when layer_types is absent
})
REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")
ROPE_KEYS = frozenset({"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor",
                       "rope_local_base_freq"})
LAYER_TYPES = ("full_attention", "sliding_attention")

MOE_MODEL_TYPES = frozenset({
    "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2", "deepseek_v3", "dbrx", "jamba", "olmoe",
    "phimoe", "granitemoe", "granitemoeshared", "gpt_oss", "llama4", "minimax", "glm4_moe", "ernie4_5_moe",
    "hunyuan_v1_moe", "switch_transformers", "nllb_moe", "jetmoe", "arctic", "grok-1"})
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
MULTIMODAL_KEYS = ("vision_config", "audio_config", "text_config", "image_token_index", "image_token_id")


@dataclass(frozen=True)
class Family:
    """How one transformers model_type reads its config. `defaults` are transformers' class defaults for the
    keys that change the math (tested against the installed transformers)."""
    architecture: str
    defaults: dict[str, Any]
    qkv_bias: str              # "attention_bias" (key decides), "always" or "never"
    out_bias: str              # same, for the output projection
    act_key: str = "hidden_act"
    mlp_bias_key: str | None = None
    window: str = "none"       # "none", "all" (sliding_window on every layer), "layer_types" (per layer)
    window_pattern: int = 0    # layer_types absent: every window_pattern-th layer is global (0: max_window_layers)
    partial_rotary: bool = False
    rope_types: tuple[str, ...] = ("default",) + SCALED_ROPE_TYPES


_COMMON = {"head_dim": None, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "hidden_act": "silu", "num_key_value_heads": None}
FAMILIES: dict[str, Family] = {
    "llama": Family("llama", {**_COMMON, "attention_bias": False, "mlp_bias": False},
                    qkv_bias="attention_bias", out_bias="attention_bias", mlp_bias_key="mlp_bias"),
    "mistral": Family("mistral", {**_COMMON, "max_position_embeddings": 131072, "num_key_value_heads": 8,
                                  "sliding_window": 4096},
                      qkv_bias="never", out_bias="never", window="all"),
    "qwen2": Family("qwen2", {**_COMMON, "max_position_embeddings": 32768, "num_key_value_heads": 32,
                              "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28},
                    qkv_bias="always", out_bias="never", window="layer_types"),
    "qwen3": Family("qwen3", {**_COMMON, "head_dim": 128, "max_position_embeddings": 32768,
                              "num_key_value_heads": 32, "attention_bias": False, "use_sliding_window": False,
                              "sliding_window": 4096, "max_window_layers": 28},
                    qkv_bias="attention_bias", out_bias="attention_bias", window="layer_types"),
    "phi3": Family("phi3", {**_COMMON, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                            "sliding_window": None, "original_max_position_embeddings": 4096},
                   qkv_bias="never", out_bias="never", window="all", partial_rotary=True,
                   rope_types=("default", "longrope")),
    "gemma": Family("gemma", {**_COMMON, "head_dim": 256, "max_position_embeddings": 8192,
                              "num_key_value_heads": 16, "tie_word_embeddings": True,
                              "hidden_act": "gelu_pytorch_tanh", "attention_bias": False,
                              "use_bidirectional_attention": None},
                    qkv_bias="attention_bias", out_bias="attention_bias"),
    "gemma2": Family("gemma2", {**{k: v for k, v in _COMMON.items() if k != "hidden_act"}, "head_dim": 256,
                                "max_position_embeddings": 8192, "num_key_value_heads": 4,
                                "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
                                "attention_bias": False, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                                "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
                                "use_bidirectional_attention": None},
                     qkv_bias="attention_bias", out_bias="attention_bias", act_key="hidden_activation",
                     window="layer_types", window_pattern=2),
    "gemma3_text": Family("gemma3", {**{k: v for k, v in _COMMON.items() if k != "hidden_act"}, "head_dim": 256,
                                     "max_position_embeddings": 131072, "num_key_value_heads": 4,
                                     "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
                                     "attention_bias": False, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                                     "final_logit_softcapping": None, "attn_logit_softcapping": None,
                                     "use_bidirectional_attention": False},
                          qkv_bias="attention_bias", out_bias="attention_bias", act_key="hidden_activation",
                          window="layer_types", window_pattern=6),
}
GEMMA = ("gemma", "gemma2", "gemma3")
SANDWICH = ("gemma2", "gemma3")     # RMSNorm after attention and after the MLP too
_ACTIVATION_ALIASES = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_pytorch_tanh", "gelu": "gelu"}


def handled_keys(model_type: str) -> frozenset[str]:
    """Every config key the parser reads for this family or knows to be inert."""
    return frozenset(FAMILIES[model_type].defaults) | set(REQUIRED_KEYS) | ROPE_KEYS | INERT_KEYS


def _refuse(source: str, what: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"{source}: {what}")


def _check_model_type(cfg: dict, source: str) -> Family:
    model_type = cfg.get("model_type")
    if model_type is None:
        raise _refuse(source, "config.json has no 'model_type'; it is not a transformers checkpoint")
    if model_type in MOE_MODEL_TYPES or any(cfg.get(k) for k in MOE_KEYS):
        raise _refuse(source, f"mixture-of-experts checkpoint ({model_type!r}) is not supported; sglite runs "
                              f"dense models: {', '.join(FAMILIES)}")
    multimodal = [k for k in MULTIMODAL_KEYS if k in cfg]
    if multimodal:
        raise _refuse(source, f"multimodal checkpoint ({model_type!r}, has {multimodal[0]}) is not supported; "
                              "sglite runs text-only causal LMs")
    if model_type not in FAMILIES:
        raise _refuse(source, f"unknown architecture {model_type!r}; sglite runs {', '.join(FAMILIES)}")
    for arch in cfg.get("architectures") or []:
        if not arch.endswith("ForCausalLM"):
            raise _refuse(source, f"architectures lists {arch!r}; sglite runs *ForCausalLM checkpoints")
    if cfg.get("quantization_config"):
        from .hf_quant import QuantSpec
        QuantSpec.from_config(cfg["quantization_config"], source)   # AWQ / GPTQ 4-bit, or refused by name
    return FAMILIES[model_type]


def _local_rope(cfg: dict, fam: Family, source: str) -> tuple[dict, float | None]:
    """Gemma 3: (the global layers' rope settings as a flat config, the windowed layers' rope base) as transformers'
    Gemma3TextConfig reads them: per layer type in rope_parameters, or the legacy rope_theta /
    rope_local_base_freq / rope_scaling (which scales the global layers only). Other families: (cfg, None)."""
    if fam.architecture != "gemma3":
        return cfg, None
    params = cfg.get("rope_parameters") or {}
    if params and not set(params) <= set(LAYER_TYPES):
        raise _refuse(source, f"gemma3 rope_parameters must be keyed by layer type ({', '.join(LAYER_TYPES)}), "
                              f"got keys {sorted(params)}")
    scaling = dict(cfg.get("rope_scaling") or {})
    if "type" in scaling:
        scaling["rope_type"] = scaling.pop("type")
    full = {"rope_type": "default", **(params.get("full_attention") or {}), **scaling}
    full.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
    local = {"rope_type": "default", **(params.get("sliding_attention") or {})}
    local.setdefault("rope_theta", cfg.get("rope_local_base_freq", 10_000.0))
    if local.get("rope_type", local.get("type")) != "default":
        raise _refuse(source, f"rope_type {local.get('rope_type', local.get('type'))!r} on the sliding layers is "
                              "not supported (sglite rotates them with the default rope at their own base)")
    flat = {k: v for k, v in cfg.items() if k not in ("rope_parameters", "rope_scaling", "rope_theta")}
    return {**flat, "rope_parameters": full}, float(local["rope_theta"])


def _rope(cfg: dict, fam: Family, head_dim: int, mpe: int, source: str
          ) -> tuple[float, int | None, RopeScaling | None, int, str]:
    """(theta, partial rotary dim or None, scaling, context cap, reason) as transformers standardizes them:
    legacy `rope_scaling` wins over `rope_parameters`; a theta inside the dict wins over a top-level one."""
    params = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    layer_keyed = [k for k in params if k in LAYER_TYPES]
    if layer_keyed:
        raise _refuse(source, f"rope_parameters per layer type ({', '.join(layer_keyed)}) are not supported")
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    top_prf = cfg.get("partial_rotary_factor")
    prf = float(params.get("partial_rotary_factor", 1.0 if top_prf is None else top_prf))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if fam.architecture == "phi3" and rope_type in ("su", "yarn"):
        rope_type = "longrope"  # transformers' Phi-3 reads these legacy names as longrope
    if rope_type not in ("default",) + SCALED_ROPE_TYPES:
        raise _refuse(source, f"unknown rope_type {rope_type!r}; sglite computes "
                              f"{', '.join(('default',) + SCALED_ROPE_TYPES)}")
    if rope_type not in fam.rope_types:
        raise _refuse(source, f"rope_type {rope_type!r} is not valid for {fam.architecture} checkpoints "
                              f"(transformers accepts {', '.join(fam.rope_types)})")
    partial = None
    if prf != 1.0:
        if not fam.partial_rotary:
            raise _refuse(source, f"partial_rotary_factor={prf}: transformers' {fam.architecture} rotates the "
                                  "whole head and ignores it, so the checkpoint's intent is unclear")
        partial = int(head_dim * prf)
    if rope_type == "default":
        return theta, partial, None, mpe, ""
    original = params.get("original_max_position_embeddings")
    if rope_type in ("llama3", "yarn", "longrope"):
        top = cfg.get("original_max_position_embeddings", fam.defaults.get("original_max_position_embeddings"))
        original = top if top is not None else (original if original is not None else mpe)
    tup = (lambda v: None if v is None else tuple(float(x) for x in v))
    try:
        scaling = RopeScaling(
            rope_type=rope_type, max_position_embeddings=mpe, factor=params.get("factor"),
            original_max_position_embeddings=original, low_freq_factor=params.get("low_freq_factor"),
            high_freq_factor=params.get("high_freq_factor"), beta_fast=params.get("beta_fast"),
            beta_slow=params.get("beta_slow"), attention_factor=params.get("attention_factor"),
            mscale=params.get("mscale"), mscale_all_dim=params.get("mscale_all_dim"),
            truncate=params.get("truncate", True), short_factor=tup(params.get("short_factor")))
    except UnsupportedRopeError as e:
        raise _refuse(source, str(e)) from None
    if rope_type == "longrope" and original < mpe:
        return theta, partial, scaling, original, (
            f"longrope: beyond original_max_position_embeddings={original} transformers switches to long_factor "
            "for the whole sequence, which a KV cache cannot follow")
    return theta, partial, scaling, mpe, ""


def _window(cfg: dict, fam: Family, get, num_layers: int, source: str
            ) -> tuple[int | None, tuple[bool, ...] | None]:
    """(the sliding window if any layer uses one, which layers do: None for all) by transformers' per-family
    rules; (None, None) without a window."""
    if fam.window == "none":
        return None, None
    window = get("sliding_window")
    if fam.architecture in ("qwen2", "qwen3") and not get("use_sliding_window"):
        window = None
    if window is None:
        return None, None
    if int(window) <= 0:
        raise _refuse(source, f"sliding_window={window} must be positive")
    if fam.window == "all":
        return int(window), None
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        if fam.window_pattern:
            pattern = int(cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", fam.window_pattern)))
            layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
        else:
            mwl = get("max_window_layers")
            layer_types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(num_layers)]
    unknown = sorted(set(layer_types) - set(LAYER_TYPES))
    if unknown or len(layer_types) != num_layers:
        raise _refuse(source, f"layer_types {layer_types!r} must list 'full_attention'/'sliding_attention' "
                              f"once per layer ({num_layers})")
    if "sliding_attention" not in layer_types:
        return None, None
    return int(window), tuple(t == "sliding_attention" for t in layer_types)


def config_from_dict(cfg: dict, source: str = "config.json") -> ModelConfig:
    """The ModelConfig transformers would build from this config.json, or UnsupportedModelError naming the field."""
    fam = _check_model_type(cfg, source)

    def get(key: str) -> Any:
        if key in cfg:
            return cfg[key]
        return fam.defaults[key]

    missing = [k for k in REQUIRED_KEYS if cfg.get(k) is None]
    if missing:
        raise _refuse(source, f"config.json lacks {', '.join(missing)}")
    hidden, n_heads, n_layers = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
    head_dim = int(get("head_dim") or hidden // n_heads)
    mpe = int(get("max_position_embeddings"))
    rope_cfg, local_theta = _local_rope(cfg, fam, source)
    theta, partial, scaling, context, reason = _rope(rope_cfg, fam, head_dim, mpe, source)
    window, sliding_layers = _window(cfg, fam, get, n_layers, source)
    act = _ACTIVATION_ALIASES.get(get(fam.act_key))
    if fam.architecture == "gemma" and get("hidden_act") == "gelu":
        act = "gelu_pytorch_tanh"  # transformers' Gemma reads the legacy "gelu" as the tanh approximation
    if act is None:
        raise _refuse(source, f"{fam.act_key}={get(fam.act_key)!r} is not supported; sglite computes "
                              f"{', '.join(_ACTIVATION_ALIASES)}")
    if fam.architecture == "gemma3" and get("attn_logit_softcapping") is not None:
        raise _refuse(source, f"attn_logit_softcapping={get('attn_logit_softcapping')}: transformers' Gemma 3 "
                              "ignores it (its attention does not soft-cap), so the checkpoint's intent is unclear")
    if "use_bidirectional_attention" in fam.defaults and get("use_bidirectional_attention"):
        raise _refuse(source, "use_bidirectional_attention=true is not supported (sglite attention is causal)")

    def bias(rule: str) -> bool:
        return rule == "always" or (rule == "attention_bias" and bool(get("attention_bias")))

    gemma = fam.architecture in GEMMA
    sandwich = fam.architecture in SANDWICH
    n_kv = get("num_key_value_heads")
    return ModelConfig(
        architecture=fam.architecture,
        num_layers=n_layers,
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_heads=n_heads,
        num_kv_heads=int(n_kv if n_kv is not None else n_heads),
        vocab_size=int(cfg["vocab_size"]),
        head_dim=head_dim,
        rope_theta=theta,
        rms_norm_eps=float(get("rms_norm_eps")),
        max_context=context,
        tie_word_embeddings=bool(get("tie_word_embeddings")),
        attention_bias=bias(fam.qkv_bias),
        partial_rotary_dim=partial if partial != head_dim else None,
        rope_scaling=scaling,
        attention_out_bias=bias(fam.out_bias),
        mlp_bias=bool(fam.mlp_bias_key and get(fam.mlp_bias_key)),
        qk_norm=fam.architecture in ("qwen3", "gemma3"),
        hidden_act=act,
        norm_weight_offset=1.0 if gemma else 0.0,
        embedding_multiplier=hidden ** 0.5 if gemma else 1.0,
        sandwich_norms=sandwich,
        attention_scale=float(get("query_pre_attn_scalar")) ** -0.5 if sandwich else None,
        final_logit_softcapping=get("final_logit_softcapping") if sandwich else None,
        attn_logit_softcapping=get("attn_logit_softcapping") if sandwich else None,
        sliding_window=window,
        sliding_layers=sliding_layers,
        rope_local_theta=local_theta,
        checkpoint_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
        context_limit_reason=reason,
    )

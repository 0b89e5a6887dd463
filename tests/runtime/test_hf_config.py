"""config.json parsing: what changes the math is read as transformers reads it, or refused naming the field."""
from __future__ import annotations

import dataclasses
import json

import pytest

from sglite.runtime.config import UnsupportedModelError
from sglite.runtime.hf_config import FAMILIES, config_from_dict, handled_keys
from sglite.runtime.model import load_model

CLASSES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
           "phi3": "Phi3Config", "gemma": "GemmaConfig", "gemma2": "Gemma2Config",
           "gemma3_text": "Gemma3TextConfig"}
BASE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


def cfg(**changes) -> dict:
    return {**BASE, **changes}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_defaults_are_transformers_defaults(model_type):
    """Keys absent from a config.json take the value transformers' config class would give them."""
    import transformers

    fields = {f.name: f.default for f in dataclasses.fields(getattr(transformers, CLASSES[model_type]))}
    for key, ours in FAMILIES[model_type].defaults.items():
        if key not in fields:   # read when present (transformers: getattr), derived when absent
            assert key == "head_dim" and ours is None, key
            continue
        assert fields[key] == ours, (model_type, key, fields[key], ours)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_transformers_config_field_is_handled(model_type):
    """No field of the family's transformers config class is silently ignored: each is honoured or known inert."""
    import transformers

    names = {f.name for f in dataclasses.fields(getattr(transformers, CLASSES[model_type]))}
    assert names - handled_keys(model_type) == set()


@pytest.mark.parametrize("config, match", [
    (cfg(rope_parameters={"rope_type": "foo", "rope_theta": 1e4}), "unknown rope_type 'foo'"),
    (cfg(rope_scaling={"type": "su", "factor": 2.0}), "unknown rope_type 'su'"),
    (cfg(model_type="foo"), "unknown architecture 'foo'"),
    (cfg(model_type="mixtral", num_local_experts=8), "mixture-of-experts checkpoint \\('mixtral'\\)"),
    (cfg(model_type="qwen2", num_experts=4), "mixture-of-experts"),
    (cfg(model_type="llava", vision_config={}), "multimodal checkpoint \\('llava', has vision_config\\)"),
    (cfg(model_type="gemma3_text", attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0: transformers' Gemma 3"),
    (cfg(model_type="gemma3_text", rope_parameters={"rope_type": "linear", "factor": 2.0}),
     "gemma3 rope_parameters must be keyed by layer type"),
    (cfg(model_type="gemma3_text", rope_parameters={"sliding_attention": {"rope_type": "linear", "factor": 2.0}}),
     "rope_type 'linear' on the sliding layers"),
    (cfg(model_type="gemma3_text", sliding_window=0), "sliding_window=0 must be positive"),
    (cfg(model_type="phi3", rope_parameters={"rope_type": "linear", "factor": 2.0}),
     "rope_type 'linear' is not valid for phi3"),
    (cfg(partial_rotary_factor=0.5), "partial_rotary_factor=0.5"),
    (cfg(hidden_act="relu2"), "hidden_act='relu2'"),
    (cfg(quantization_config={"quant_method": "gptq"}), "quantization_config \\('gptq'\\)"),
    (cfg(architectures=["LlamaForSequenceClassification"]), "LlamaForSequenceClassification"),
    (cfg(model_type="gemma", use_bidirectional_attention=True), "use_bidirectional_attention"),
    (cfg(rope_parameters={"rope_type": "llama3", "factor": 8.0}), "llama3' needs low_freq_factor"),
    (cfg(model_type="qwen3", use_sliding_window=True, layer_types=["full_attention", "chunked_attention"]),
     "layer_types"),
    ({k: v for k, v in BASE.items() if k != "vocab_size"}, "lacks vocab_size"),
])
def test_refused_by_name(config, match):
    with pytest.raises(UnsupportedModelError, match=match):
        config_from_dict(config)


def test_refusal_reaches_load_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(cfg(model_type="foo")))
    with pytest.raises(ValueError, match="unknown architecture 'foo'"):
        load_model(tmp_path)


def test_rope_precedence_matches_transformers():
    """Legacy rope_scaling wins over rope_parameters; a theta inside the dict wins over the top-level one."""
    c = config_from_dict(cfg(rope_theta=5.0, rope_parameters={"rope_type": "default", "rope_theta": 7.0}))
    assert c.rope_theta == 7.0 and c.rope_scaling is None
    c = config_from_dict(cfg(rope_theta=5.0, rope_scaling={"type": "linear", "factor": 2.0},
                             rope_parameters={"rope_type": "default", "rope_theta": 7.0}))
    assert c.rope_theta == 5.0 and c.rope_scaling.rope_type == "linear" and c.rope_scaling.factor == 2.0
    assert config_from_dict(cfg()).rope_theta == 10000.0


def test_per_family_layer_rules():
    assert config_from_dict(cfg(model_type="qwen2")).attention_bias          # always on Q/K/V
    assert not config_from_dict(cfg(model_type="qwen2")).attention_out_bias
    llama = config_from_dict(cfg(attention_bias=True))
    assert llama.attention_bias and llama.attention_out_bias
    assert config_from_dict(cfg(model_type="qwen3")).head_dim == 128          # Qwen3's default, not hidden/heads
    mistral = config_from_dict(cfg(model_type="mistral"))                      # default window 4096
    assert mistral.sliding_window == 4096 and mistral.sliding_layers is None      # every layer, context not capped
    assert mistral.max_context == 131072 and mistral.layer_window(1) == 4096
    gemma3 = config_from_dict(cfg(model_type="gemma3_text", num_hidden_layers=12))  # transformers' defaults
    assert gemma3.sliding_layers == tuple((i + 1) % 6 != 0 for i in range(12)) and gemma3.sliding_window == 4096
    assert gemma3.layer_rope(0) == (10000.0, None) and gemma3.layer_rope(5) == (1e6, None)
    assert gemma3.qk_norm and gemma3.sandwich_norms and gemma3.attention_scale == 256 ** -0.5
    assert gemma3.hidden_act == "gelu_pytorch_tanh" and gemma3.embedding_multiplier == 8.0
    legacy = config_from_dict(cfg(model_type="gemma3_text", num_hidden_layers=4, sliding_window_pattern=2,
                                  rope_theta=5e5, rope_local_base_freq=50.0,
                                  rope_scaling={"rope_type": "linear", "factor": 8.0}))
    assert legacy.sliding_layers == (True, False, True, False) and legacy.layer_rope(0) == (50.0, None)
    assert legacy.layer_rope(1)[0] == 5e5 and legacy.layer_rope(1)[1].factor == 8.0
    qwen = config_from_dict(cfg(model_type="qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=2))
    assert qwen.sliding_window is None                                        # no layer >= max_window_layers
    gemma = config_from_dict(cfg(model_type="gemma", hidden_act="gelu"))
    assert gemma.hidden_act == "gelu_pytorch_tanh" and gemma.tie_word_embeddings
    assert config_from_dict(cfg(dtype="bfloat16")).checkpoint_dtype == "bfloat16"
    assert config_from_dict(cfg(torch_dtype="float16")).checkpoint_dtype == "float16"

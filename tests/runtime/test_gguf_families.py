"""GGUF files as llama.cpp writes them: rope metadata (freq_base, linear/yarn scaling, llama3 rope_freqs), Qwen2/3
layouts and SentencePiece vocabularies load with the same logits as transformers' forward of the source model,
and with the same token ids and logits as transformers' own GGUF loader. Unsupported metadata is refused by key."""
from __future__ import annotations

import pytest
import torch

from sglite.runtime.gguf_loader import GGUFError
from sglite.runtime.model import load_model
from sglite.runtime.tokenizer import load_tokenizer

from .gguf_checkpoints import SPM_CORPUS, llama3_rope_freqs, spm_vocab, write_gguf
from .hf_checkpoints import _redraw, reference_logits

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, max_position_embeddings=256)
LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
# (name, transformers config class, its rope_parameters and settings, GGUF arch, GGUF metadata, llama3 freqs?)
CASES = [
    ("llama-theta", "LlamaConfig", {"rope_theta": 50000.0}, {}, "llama", {}, False),
    ("llama-linear", "LlamaConfig", {"rope_theta": 10000.0, "rope_type": "linear", "factor": 4.0}, {}, "llama",
     {"rope_scaling_type": "linear", "rope_scaling_factor": 4.0}, False),
    ("llama-llama3-rope_freqs", "LlamaConfig", {"rope_theta": 50000.0, "rope_type": "llama3", **LLAMA3}, {},
     "llama", {}, True),
    ("llama-yarn", "LlamaConfig", {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 64}, {}, "llama",
     {"rope_scaling_type": "yarn", "rope_scaling_factor": 4.0, "rope_scaling_orig_ctx_len": 64}, False),
    ("qwen2-bias", "Qwen2Config", {"rope_theta": 1e6}, {}, "qwen2", {}, False),
    ("qwen3-qknorm", "Qwen3Config", {"rope_theta": 1e6}, {"head_dim": 32, "tie_word_embeddings": True}, "qwen3", {},
     False),
]


def make_model(class_name: str, rope: dict, settings: dict):
    import transformers

    vocab = len(spm_vocab()[0])
    config = getattr(transformers, class_name)(**TINY, vocab_size=vocab, rope_parameters={"rope_type": "default",
                                                                                            **rope}, **settings)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    _redraw(model, 0)
    return model.eval()


def _write_case(folder, case):
    name, cls, rope, settings, arch, metadata, llama3 = case
    import gguf

    model = make_model(cls, rope, settings)
    if "rope_scaling_type" in metadata:
        metadata = {**metadata, "rope_scaling_type": gguf.RopeScalingType(metadata["rope_scaling_type"])}
    freqs = llama3_rope_freqs(rope["rope_theta"], 16, LLAMA3["factor"], LLAMA3["low_freq_factor"],
                              LLAMA3["high_freq_factor"], LLAMA3["original_max_position_embeddings"]) if llama3 else None
    return model, write_gguf(folder / f"{name}.gguf", model, arch, metadata, rope_freqs=freqs)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gguf_matches_transformers_forward(tmp_path, case):
    model, path = _write_case(tmp_path, case)
    ours = load_model(path)
    ids = ours.tokenizer.encode(" ".join(SPM_CORPUS))
    assert (ours.logits(ids) - reference_logits(model, ids)).abs().max().item() < 1e-4


@pytest.fixture(scope="module")
def llama_gguf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    _, path = _write_case(folder, CASES[0])
    return path


def test_sentencepiece_ids_match_transformers_gguf_loader(llama_gguf):
    import transformers

    ours = load_tokenizer(llama_gguf)
    ref = transformers.AutoTokenizer.from_pretrained(llama_gguf.parent, gguf_file=llama_gguf.name)
    assert not ours.byte_level
    for text in SPM_CORPUS:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == ref.decode(ids), text
    assert ours.encode("<|im_end|>") == [259]            # a control token stays whole
    text = "café 🎉"                                       # 'é' and the emoji are not pieces: byte fallback
    assert b"".join(ours.token_bytes(i) for i in ours.encode(text)) == b" " + text.encode()  # + the prepended space


def test_logits_match_transformers_gguf_loader(llama_gguf):
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(llama_gguf.parent, gguf_file=llama_gguf.name,
                                                            dtype=torch.float32).eval()
    ours = load_model(llama_gguf)
    ids = ours.tokenizer.encode(" ".join(SPM_CORPUS))
    assert (ours.logits(ids) - reference_logits(ref, ids)).abs().max().item() < 1e-4


def _refusal_model():
    return make_model("LlamaConfig", {"rope_theta": 10000.0}, {})


@pytest.mark.parametrize("kwargs, match", [
    (dict(metadata={"rope_scaling_type": "longrope", "rope_scaling_factor": 2.0}),
     "llama.rope.scaling.type = 'longrope'"),
    (dict(metadata={"rope_scaling_type": "yarn", "rope_scaling_factor": 2.0, "rope_scaling_yarn_beta_fast": 8.0}),
     "llama.rope.scaling.yarn_beta_fast = 8.0"),
    (dict(metadata={"expert_count": 4}), "mixture-of-experts \\(llama.expert_count = 4\\)"),
    (dict(metadata={"rope_dimension_count": 8}), "llama.rope.dimension_count = 8"),
    (dict(tokenizer_metadata={"add_space_prefix": False}), "tokenizer.ggml.add_space_prefix = false"),
    (dict(extra_tensors={"blk.0.attn_sinks.weight": torch.zeros(4).numpy()}), "tensor 'blk.0.attn_sinks.weight'"),
])
def test_unsupported_metadata_is_refused_by_key(tmp_path, kwargs, match):
    import gguf

    metadata = dict(kwargs.pop("metadata", {}))
    if "rope_scaling_type" in metadata:
        metadata["rope_scaling_type"] = gguf.RopeScalingType(metadata["rope_scaling_type"])
    path = write_gguf(tmp_path / "bad.gguf", _refusal_model(), "llama", metadata, **kwargs)
    with pytest.raises(GGUFError, match=match):
        load_model(path)

"""Gemma 2 and Gemma 3 from GGUF files written as llama.cpp's converter writes them (norms stored as 1 + w, the
converter's metadata keys only: no attention scale, so the scale is llama.cpp's rule), from tiny random
transformers models: logits within 1e-4 of transformers' forward with a prompt longer than the sliding window,
and greedy tokens through the engine with the prefix cache and chunked prefill."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sglite.runtime.gguf_loader import GGUFError, open_gguf
from sglite.runtime.model import load_model

from .gguf_checkpoints import add_spm_tokenizer, spm_vocab
from .hf_checkpoints import _redraw, reference_greedy, reference_logits

WINDOW = 16
PROMPT = [(7 * i + 300) % 280 + 3 for i in range(40)]     # 40 ids > WINDOW, none of them special
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=128,
            max_position_embeddings=256, sliding_window=WINDOW, pad_token_id=0, eos_token_id=2, bos_token_id=1)
# name -> (transformers config class, settings, GGUF arch)
CASES = {
    # llama.cpp scales a Gemma 2's queries by 1/sqrt(head_dim), a 46-layer one's (27B) by 1/sqrt(n_embd/n_head)
    "gemma2": ("Gemma2Config", dict(num_hidden_layers=3, query_pre_attn_scalar=32, attn_logit_softcapping=2.0,
                                    final_logit_softcapping=5.0), "gemma2"),
    "gemma2-46-layers": ("Gemma2Config", dict(num_hidden_layers=46, query_pre_attn_scalar=16,
                                              attn_logit_softcapping=20.0, final_logit_softcapping=10.0), "gemma2"),
    # the default pattern (every 6th layer global), its own rope base for windowed layers, one KV head, q/k norms
    "gemma3": ("Gemma3TextConfig", dict(
        num_hidden_layers=7, num_key_value_heads=1, query_pre_attn_scalar=32, final_logit_softcapping=6.0,
        layer_types=["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}), "gemma3"),
    "gemma3-62-layers": ("Gemma3TextConfig", dict(
        num_hidden_layers=62, num_key_value_heads=1, query_pre_attn_scalar=16,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}), "gemma3"),
}
NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
         "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def make_model(name: str):
    import transformers

    cls, settings, _ = CASES[name]
    config = getattr(transformers, cls)(**{**BASE, **settings}, vocab_size=len(spm_vocab()[0]))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    _redraw(model, 0)
    return model.eval()


def write_gemma_gguf(path, model, arch: str, metadata: dict | None = None):
    """A float32 GGUF of a transformers Gemma 2/3 with the keys and tensors llama.cpp's converter writes: every
    norm weight stored as 1 + w, the embedding tied, no attention scale (llama.cpp derives it)."""
    import gguf

    c = model.config
    tokens, scores, types = spm_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_sliding_window(c.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    else:
        w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
        w.add_rope_freq_base_swa(c.rope_parameters["sliding_attention"]["rope_theta"])
        if c.final_logit_softcapping:
            w.add_final_logit_softcapping(c.final_logit_softcapping)
    for key, value in (metadata or {}).items():
        getattr(w, f"add_{key}")(value)
    add_spm_tokenizer(w, tokens, scores, types)
    w.add_add_space_prefix(False)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"] + 1}
    for key, t in sd.items():
        if key.startswith("model.layers."):
            i, rest = key[len("model.layers."):].split(".", 1)
            module, kind = rest.rsplit(".", 1)
            tensors[f"blk.{i}.{NAMES[module]}.{kind}"] = t + 1 if module.endswith("norm") else t
    for tensor_name, t in tensors.items():
        w.add_tensor(tensor_name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    model = make_model(request.param)
    path = write_gemma_gguf(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", model,
                            CASES[request.param][2])
    return request.param, model, path


def test_logits_match_transformers_past_the_window(case):
    name, model, path = case
    ours = load_model(path)
    c = ours.config
    assert c.sliding_window == WINDOW < len(PROMPT) and any(c.sliding_layers) and not all(c.sliding_layers)
    scale = {"gemma2-46-layers": 16 ** -0.5, "gemma3-62-layers": 16 ** -0.5}.get(name, 32 ** -0.5)
    assert ours.net.scale == pytest.approx(scale)
    assert (ours.logits(PROMPT) - reference_logits(model, PROMPT)).abs().max().item() < 1e-4


def test_engine_with_prefix_cache_and_chunked_prefill_matches_transformers(case):
    """Prompt chunks of 16 (the window) through the paged pool; a second prompt sharing the first's prefix reads
    it from the cache."""
    from sglite.runtime.engine import Engine

    name, model, path = case
    if name.endswith("-layers"):
        pytest.skip("the deep variants check the attention scale; the engine path is the same as the shallow ones'")
    engine = Engine(load_model(path), max_total_tokens=512, max_running_requests=4, chunked_prefill_size=16,
                    background=False)
    engine.core.debug_checks = True
    try:
        first = engine.generate(input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 6})
        assert first["output_ids"] == reference_greedy(model, PROMPT, 6)
        longer = PROMPT + [40, 41]
        second = engine.generate(input_ids=longer, sampling_params={"temperature": 0, "max_new_tokens": 3})
        assert second["meta_info"]["cached_tokens"] >= len(PROMPT) - 16
        assert second["output_ids"] == reference_greedy(model, longer, 3)
    finally:
        engine.shutdown()


def test_a_gemma2_file_without_a_window_key_has_llama_cpps_default(tmp_path):
    """llama.cpp runs a Gemma 2 file that names no sliding window with a window of 4096 tokens."""
    model = make_model("gemma2")
    path = write_gemma_gguf(tmp_path / "g.gguf", model, "gemma2")
    import gguf

    reader = gguf.GGUFReader(str(path))
    assert "gemma2.attention.sliding_window" in reader.fields
    stripped = tmp_path / "no-window.gguf"
    w = gguf.GGUFWriter(str(stripped), "gemma2")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "gemma2.attention.sliding_window"):
            continue
        w.add_key_value(field.name, field.contents(), field.types[0],
                        field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    c = open_gguf(str(stripped)).config()
    assert c.sliding_window == 4096 and c.sliding_layers[:2] == (True, False)


@pytest.mark.parametrize("value, ok", [(32 ** -0.5, True), (0.5, False)])
def test_an_attention_scale_key_is_honoured_where_it_is_llama_cpps_and_refused_otherwise(tmp_path, value, ok):
    """llama.cpp's Gemma graphs derive the scale and read no key; a file whose key says the same loads, one
    whose key says another scale is refused naming both (llama.cpp would run the derived one)."""
    model = make_model("gemma2")
    path = write_gemma_gguf(tmp_path / "g.gguf", model, "gemma2", {"attention_scale": value})
    if ok:
        assert load_model(path).net.scale == pytest.approx(32 ** -0.5)
    else:
        with pytest.raises(GGUFError, match=r"gemma2\.attention\.scale = 0\.5.*0\.1767"):
            open_gguf(str(path)).config()

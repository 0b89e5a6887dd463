"""Tiny GGUF files written the way llama.cpp's converter writes them (Q/K rows interleaved for llama, rope
metadata keys, rope_freqs for llama3), from a transformers model, with a small synthetic SentencePiece vocabulary.
The transformers model's folder is the reference the GGUF load is compared with."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

SPM_CORPUS = [
    "Hello world, this is a test.",
    "  leading spaces and   runs of spaces",
    "def f(x):\n\treturn x + 1  # comment",
    "你好世界，今天天气很好",
    "Numbers 12345 and 3.14159, 2024-10-01",
    "emoji 🎉 and café, naïve, Zürich",
    "<s>special</s> and <|im_end|> tokens, <|user|> too",
    "the quick brown fox jumps over the lazy dog",
    "",
    " ",
    "\n\n",
]
UNK, CONTROL, USER_DEFINED, BYTE, NORMAL = 2, 3, 4, 6, 1


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a SentencePiece-BPE vocabulary: <unk>, <s>, </s>, 256 byte tokens,
    specials, then pieces cut from the corpus. Some characters ('é', '界', the emoji) are left out, so encoding
    them needs byte fallback."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["<|im_end|>", "<|user|>"]
    types = [UNK, CONTROL, CONTROL] + [BYTE] * 256 + [CONTROL, USER_DEFINED]
    text = " ".join(SPM_CORPUS[:8]).replace(" ", "\u2581")
    pieces = sorted(set(text) - {"é", "界", "🎉", "ü"})
    for word in ("\u2581" + w for w in " ".join(SPM_CORPUS[:8]).split()):
        pieces += [word[:n] for n in range(2, min(len(word), 6) + 1)]
        pieces += [word[1:n] for n in range(3, min(len(word), 5) + 1)]
    pieces += ["\u2581\u2581", "\u2581\u2581\u2581", "12", "123", "45"]
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(NORMAL)
    # deterministic, non-monotone scores: merge priority is not simply "longer first"
    scores = [0.0] * 259 + [0.0, 0.0] + [-((i * 7919) % 101) - 0.001 * i for i in range(len(tokens) - 261)]
    return tokens, scores, types


def add_spm_tokenizer(w, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """The `spm_vocab` tokenizer as a `llama` (SentencePiece) GGUF tokenizer: <unk> 0, <s> 1, </s> 2."""
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf `permute`: half-split rotary rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_freqs(theta: float, dim: int, factor: float, low: float, high: float, old_context: int) -> np.ndarray:
    """llama.cpp's LlamaModel.generate_extra_tensors: per-frequency divisors for llama3 rope."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_wavelen, high_wavelen = old_context / low, old_context / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path: Path, model, arch: str, metadata: dict | None = None, rope_freqs: np.ndarray | None = None,
               vocab: tuple[list[str], list[float], list[int]] | None = None, extra_tensors: dict | None = None,
               tokenizer_metadata: dict | None = None) -> Path:
    """A float32 GGUF of `model` (a transformers CausalLM of a llama-like family) under llama.cpp's names."""
    import gguf

    c = model.config
    tokens, scores, types = vocab or spm_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    keys = dict(block_count=c.num_hidden_layers, context_length=c.max_position_embeddings,
                embedding_length=c.hidden_size, feed_forward_length=c.intermediate_size,
                head_count=c.num_attention_heads, head_count_kv=c.num_key_value_heads,
                rope_dimension_count=head_dim, rope_freq_base=float(c.rope_parameters["rope_theta"]),
                layer_norm_rms_eps=c.rms_norm_eps, vocab_size=len(tokens))
    if head_dim != c.hidden_size // c.num_attention_heads:
        keys.update(key_length=head_dim, value_length=head_dim)
    for key, value in {**keys, **(metadata or {})}.items():   # metadata overrides (refusal tests)
        getattr(w, f"add_{key}")(value)
    add_spm_tokenizer(w, tokens, scores, types)
    for key, value in (tokenizer_metadata or {}).items():
        getattr(w, f"add_{key}")(value)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    permute = arch in ("llama", "mistral")
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not c.tie_word_embeddings:
        tensors["output.weight"] = sd["lm_head.weight"]
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        for hf, gg in names.items():
            if p + hf in sd:
                tensors[f"blk.{i}.{gg}"] = sd[p + hf]
        for proj, heads in (("q", c.num_attention_heads), ("k", c.num_key_value_heads)):
            for kind in ("weight", "bias"):
                if f"{p}self_attn.{proj}_proj.{kind}" in sd:
                    t = sd[f"{p}self_attn.{proj}_proj.{kind}"]
                    tensors[f"blk.{i}.attn_{proj}.{kind}"] = _permute(t, heads) if permute else t
    if rope_freqs is not None:
        tensors["rope_freqs.weight"] = rope_freqs
    tensors.update(extra_tensors or {})
    for name, t in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

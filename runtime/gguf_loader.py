"""Reads a GGUF file: architecture config, dequantized weights, tokenizer metadata.

Weights come out as float32 torch tensors named like GGUF's own (`token_embd.weight`, `blk.3.attn_q.weight`),
in torch's [out_features, in_features] orientation. llama.cpp's converter permutes the rows of the Q and K
projections for its interleaved rotary layout; `load_weights` undoes that so the half-split ("neox") rotary of
the original Hugging Face model applies.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .config import SUPPORTED_ARCHITECTURES, ModelConfig

DEQUANTIZABLE = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")


class GGUFError(ValueError):
    """The GGUF file is unreadable, truncated, or describes something sglite cannot run."""


def unpermute_rotary_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: rows (head, pair, half) -> (head, half, pair). w: [n_heads*head_dim, in]."""
    head_dim = w.shape[0] // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@dataclass(frozen=True)
class TokenizerMetadata:
    model: str                       # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str | None                  # llama.cpp pre-tokenizer name, e.g. "smollm", "llama-bpe"
    tokens: list[str]
    token_types: list[int]           # 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
    merges: list[str]
    scores: list[float] | None
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos_token: bool
    chat_template: str | None


@lru_cache(maxsize=4)
def open_gguf(path: str) -> "GGUFFile":
    """GGUFFile for a resolved path, opened once per process (parsing the metadata takes seconds)."""
    return GGUFFile(path)


class GGUFFile:
    """An opened GGUF file. Construction validates it; nothing is dequantized until load_weights()."""

    def __init__(self, path: str | Path):
        import gguf

        self.path = Path(path)
        try:
            self.reader = gguf.GGUFReader(str(self.path))
        except Exception as e:  # the gguf package raises assorted errors on damaged files
            raise GGUFError(f"cannot read GGUF file {str(self.path)!r}: {type(e).__name__}: {e} "
                            "(the file is truncated or not a GGUF file)") from e
        self.architecture = self._field("general.architecture")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise GGUFError(f"GGUF file {str(self.path)!r} holds architecture {self.architecture!r}; "
                            f"sglite runs {', '.join(SUPPORTED_ARCHITECTURES)}")

    def _field(self, key: str, default: Any = ...) -> Any:
        field = self.reader.fields.get(key)
        if field is None:
            if default is ...:
                raise GGUFError(f"GGUF file {str(self.path)!r} lacks metadata key {key!r}")
            return default
        return field.contents()

    def config(self) -> ModelConfig:
        a = self.architecture
        n_heads = int(self._field(f"{a}.attention.head_count"))
        hidden = int(self._field(f"{a}.embedding_length"))
        names = {t.name for t in self.reader.tensors}
        vocab = self._field(f"{a}.vocab_size", None)
        if vocab is None:
            vocab = len(self._field("tokenizer.ggml.tokens"))
        return ModelConfig(
            architecture=a,
            num_layers=int(self._field(f"{a}.block_count")),
            hidden_size=hidden,
            intermediate_size=int(self._field(f"{a}.feed_forward_length")),
            num_heads=n_heads,
            num_kv_heads=int(self._field(f"{a}.attention.head_count_kv", n_heads)),
            vocab_size=int(vocab),
            head_dim=int(self._field(f"{a}.rope.dimension_count", hidden // n_heads)),
            rope_theta=float(self._field(f"{a}.rope.freq_base", 10000.0)),
            rms_norm_eps=float(self._field(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
            max_context=int(self._field(f"{a}.context_length", 2048)),
            tie_word_embeddings="output.weight" not in names,
            attention_bias="blk.0.attn_q.bias" in names,
        )

    def tokenizer_metadata(self) -> TokenizerMetadata:
        model = self._field("tokenizer.ggml.model")
        scores = self._field("tokenizer.ggml.scores", None)
        return TokenizerMetadata(
            model=model,
            pre=self._field("tokenizer.ggml.pre", None),
            tokens=list(self._field("tokenizer.ggml.tokens")),
            token_types=[int(t) for t in self._field("tokenizer.ggml.token_type", [])],
            merges=list(self._field("tokenizer.ggml.merges", [])),
            scores=None if scores is None else [float(s) for s in scores],
            bos_token_id=self._field("tokenizer.ggml.bos_token_id", None),
            eos_token_id=self._field("tokenizer.ggml.eos_token_id", None),
            add_bos_token=bool(self._field("tokenizer.ggml.add_bos_token", model == "llama")),
            chat_template=self._field("tokenizer.chat_template", None),
        )

    def load_weights(self) -> dict[str, "torch.Tensor"]:
        """All tensors dequantized to float32, Q/K rows un-permuted. Names as in the file."""
        import torch
        from gguf import quants

        cfg = self.config()
        out: dict[str, torch.Tensor] = {}
        for t in self.reader.tensors:
            kind = t.tensor_type.name
            if kind not in DEQUANTIZABLE:
                raise GGUFError(f"tensor {t.name!r} in {str(self.path)!r} is {kind}; sglite dequantizes "
                                f"{', '.join(DEQUANTIZABLE)}")
            try:
                w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            except Exception as e:
                raise GGUFError(f"cannot dequantize tensor {t.name!r} of {str(self.path)!r}: {e}") from e
            shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists ne0 (the fastest axis) first
            w = w.reshape(shape)
            if t.name.endswith("attn_q.weight") or t.name.endswith("attn_q.bias"):
                w = unpermute_rotary_rows(w, cfg.num_heads) if cfg.architecture != "qwen2" else w
            elif t.name.endswith("attn_k.weight") or t.name.endswith("attn_k.bias"):
                w = unpermute_rotary_rows(w, cfg.num_kv_heads) if cfg.architecture != "qwen2" else w
            out[t.name] = torch.from_numpy(np.array(w, dtype=np.float32, order="C"))  # own, writable copy
        return out

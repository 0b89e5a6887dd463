"""Reads a GGUF file: architecture config, dequantized weights, tokenizer metadata.

Weights come out as float32 torch tensors named like GGUF's own (`token_embd.weight`, `blk.3.attn_q.weight`),
in torch's [out_features, in_features] orientation. llama.cpp's converter permutes the rows of the Q and K
projections for its interleaved rotary layout; `load_weights` undoes that so the half-split ("neox") rotary of
the original Hugging Face model applies.
"""
from __future__ import annotations

from collections.abc import Mapping

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import logging
import math

import numpy as np

from .config import ModelConfig
from .rope import RopeScaling, UnsupportedRopeError

log = logging.getLogger("sglite.runtime")

# tensor types read exactly: everything llama-quantize's common presets write (gguf.quants.dequantize is the
# reference for their values); any other type is refused by name before the weights are read
DEQUANTIZABLE = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                 "Q6_K", "IQ4_NL", "IQ4_XS")
GGUF_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")
# Gemma from GGUF as llama.cpp runs it (src/models/gemma2.cpp, gemma3.cpp; its converter stores each RMSNorm
# weight as 1 + w, so no offset here): every `pattern`-th layer global, the rest windowed; the window when the
# file names none (Gemma 2: 4096; Gemma 3: no windows); the windowed layers' rope base; soft-capping keys. The
# attention scale is not in the file: llama.cpp scales queries by 1/sqrt(head_dim), except at the 27B's layer
# count (`wide_scale_layers`), whose query_pre_attn_scalar is n_embd / n_head instead.
GEMMA_GGUF = {"gemma2": {"pattern": 2, "local_theta": None, "window": 4096, "wide_scale_layers": 46},
              "gemma3": {"pattern": 6, "local_theta": 10000.0, "window": None, "wide_scale_layers": 62}}
_SANDWICH_TENSORS = frozenset({"post_attention_norm.weight", "post_ffw_norm.weight"})
PERMUTED_QK = ("llama", "mistral")  # llama.cpp's converter interleaves Q/K rows for these (see module docstring)
# metadata keys that change the math in llama.cpp and that sglite does not compute: refused when present
_REFUSED_KEYS = ("attention.clamp_kqv", "attention.scale", "attention.output_scale", "logit_scale",
                 "embedding_scale", "residual_scale", "attention.sliding_window_pattern", "rope.scaling.alpha",
                 "rope.dimension_sections", "rope.freq_base_swa", "rope.scaling.yarn_log_multiplier",
                 "rope.scaling.yarn_attn_factor", "attention.key_length_mla")
# GGUF tensor names sglite reads (per layer after "blk.N."); any other tensor would be silently ignored
_LAYER_TENSORS = frozenset({
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_q_norm.weight", "attn_k_norm.weight",
    "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
_GLOBAL_TENSORS = frozenset({"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"})


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
    add_space_prefix: bool | None = None  # SentencePiece: prepend '▁' to the text (None: not stated)


@lru_cache(maxsize=4)
def open_gguf(path: str) -> "GGUFFile":
    """GGUFFile for a resolved path, opened once per process (parsing the metadata takes seconds)."""
    return GGUFFile(path)


class GGUFFile:
    """An opened GGUF file. Construction validates it; nothing is dequantized until load_weights()."""

    def __init__(self, path: str | Path):
        from .gguf_container import GGUFContainer

        self.path = Path(path)
        try:
            self.reader = GGUFContainer(self.path)
        except Exception as e:  # the gguf package raises assorted errors on damaged files
            raise GGUFError(f"cannot read GGUF file {str(self.path)!r}: {type(e).__name__}: {e} "
                            "(the file is truncated or not a GGUF file)") from e
        self.architecture = self._field("general.architecture")
        if self.architecture not in GGUF_ARCHITECTURES:
            raise GGUFError(f"GGUF file {str(self.path)!r} holds architecture {self.architecture!r}; "
                            f"sglite runs {', '.join(GGUF_ARCHITECTURES)} from GGUF (other families: use the "
                            "Hugging Face folder)")

    def _field(self, key: str, default: Any = ...) -> Any:
        if key not in self.reader.fields:
            if default is ...:
                raise GGUFError(f"GGUF file {str(self.path)!r} lacks metadata key {key!r}")
            return default
        return self.reader.fields[key]

    def _refuse(self, what: str) -> GGUFError:
        return GGUFError(f"GGUF file {str(self.path)!r}: {what}")

    def config(self) -> ModelConfig:
        """The architecture as llama.cpp would run it; metadata that sglite cannot honour is refused by key."""
        a = self.architecture
        gemma = GEMMA_GGUF.get(a)
        honoured = ("attention.sliding_window_pattern", "rope.freq_base_swa", "attention.scale") if gemma else ()
        for key in _REFUSED_KEYS:
            if f"{a}.{key}" in self.reader.fields and key not in honoured:
                raise self._refuse(f"metadata {a}.{key} = {self._field(f'{a}.{key}')!r} is not supported by sglite")
        if int(self._field(f"{a}.expert_count", 0)):
            raise self._refuse(f"mixture-of-experts ({a}.expert_count = {self._field(f'{a}.expert_count')}) "
                               "is not supported")
        if not self._field(f"{a}.attention.causal", True):
            raise self._refuse(f"{a}.attention.causal = false (non-causal attention) is not supported")
        n_heads = int(self._field(f"{a}.attention.head_count"))
        hidden = int(self._field(f"{a}.embedding_length"))
        head_dim = int(self._field(f"{a}.attention.key_length", hidden // n_heads))
        value_dim = int(self._field(f"{a}.attention.value_length", head_dim))
        if value_dim != head_dim:
            raise self._refuse(f"{a}.attention.value_length ({value_dim}) != key_length ({head_dim}) is not supported")
        rotary_dim = int(self._field(f"{a}.rope.dimension_count", head_dim))
        if rotary_dim != head_dim:
            raise self._refuse(f"{a}.rope.dimension_count = {rotary_dim} < head dim {head_dim} (partial rotary) is "
                               "not supported from GGUF; use the Hugging Face folder")
        names = {t.name for t in self.reader.tensors}
        layer_tensors = _LAYER_TENSORS | (_SANDWICH_TENSORS if gemma else frozenset())
        unknown = sorted(n for n in names if n not in _GLOBAL_TENSORS
                         and not (n.startswith("blk.") and n.split(".", 2)[-1] in layer_tensors))
        if unknown:
            raise self._refuse(f"tensor {unknown[0]!r} is not part of the {a} layout sglite computes")
        vocab = self._field(f"{a}.vocab_size", None)
        if vocab is None:
            vocab = len(self._field("tokenizer.ggml.tokens"))
        context = int(self._field(f"{a}.context_length", 2048))
        scaling = self._rope_scaling(context, head_dim, "rope_freqs.weight" in names)
        window = self._field(f"{a}.attention.sliding_window", None)
        window = int(window) if window else None
        num_layers = int(self._field(f"{a}.block_count"))
        sliding_layers, gemma_fields = None, {}
        if gemma:   # llama.cpp's gemma2/gemma3 graphs (llama-model.cpp), which transformers' Gemma configs match
            if window is None:
                window = gemma["window"]
            pattern = int(self._field(f"{a}.attention.sliding_window_pattern", gemma["pattern"]))
            if window is not None:
                sliding_layers = tuple(bool((i + 1) % pattern) for i in range(num_layers))
            local = self._field(f"{a}.rope.freq_base_swa", gemma["local_theta"])
            softcaps = {k: self._field(f"{a}.{k}", None) for k in ("attn_logit_softcapping",
                                                                     "final_logit_softcapping")}
            gemma_fields = dict(
                hidden_act="gelu_pytorch_tanh", embedding_multiplier=hidden ** 0.5,
                attention_scale=self._gemma_attention_scale(gemma, num_layers, hidden, n_heads, head_dim),
                sandwich_norms="blk.0.post_ffw_norm.weight" in names,
                rope_local_theta=None if local is None or window is None else float(local),
                **{k: float(v) if v else None for k, v in softcaps.items()})
        reason = ""
        mlp_bias = "blk.0.ffn_down.bias" in names
        return ModelConfig(
            architecture=a,
            num_layers=num_layers,
            hidden_size=hidden,
            intermediate_size=int(self._field(f"{a}.feed_forward_length")),
            num_heads=n_heads,
            num_kv_heads=int(self._field(f"{a}.attention.head_count_kv", n_heads)),
            vocab_size=int(vocab),
            head_dim=head_dim,
            rope_theta=float(self._field(f"{a}.rope.freq_base", 10000.0)),
            rms_norm_eps=float(self._field(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
            max_context=context,
            tie_word_embeddings="output.weight" not in names,
            attention_bias="blk.0.attn_q.bias" in names,
            rope_scaling=scaling,
            attention_out_bias="blk.0.attn_output.bias" in names,
            mlp_bias=mlp_bias,
            qk_norm="blk.0.attn_q_norm.weight" in names,
            sliding_window=window,
            sliding_layers=sliding_layers,
            checkpoint_dtype=self._dtype_summary(),
            context_limit_reason=reason,
            **gemma_fields,
        )

    def _gemma_attention_scale(self, gemma: dict, num_layers: int, hidden: int, n_heads: int, head_dim: int
                               ) -> float:
        """The query scale llama.cpp's Gemma graph uses (it reads no key for it); a file whose
        `attention.scale` says another is refused naming both, since llama.cpp would not run the file's."""
        a = self.architecture
        scalar = hidden // n_heads if num_layers == gemma["wide_scale_layers"] else head_dim
        scale = 1.0 / math.sqrt(scalar)
        stated = self._field(f"{a}.attention.scale", None)
        if stated is not None and not math.isclose(float(stated), scale, rel_tol=1e-6):
            raise self._refuse(f"metadata {a}.attention.scale = {float(stated):.6g}, but llama.cpp's {a} graph "
                               f"scales queries by 1/sqrt({scalar}) = {scale:.6g} for {num_layers} layers of "
                               f"head dim {head_dim}; sglite runs what llama.cpp runs, so the file is ambiguous")
        return scale

    def _rope_scaling(self, context: int, rotary_dim: int, has_rope_freqs: bool) -> RopeScaling | None:
        """llama.cpp's rope metadata as a RopeScaling: linear and yarn (llama.cpp's defaults: ext_factor 1,
        beta_fast 32, beta_slow 1, attn_factor 1, which are transformers' yarn defaults), and llama3 as the
        per-frequency divisors of the rope_freqs tensor. Anything else is refused by key."""
        a = self.architecture
        kind = self._field(f"{a}.rope.scaling.type", None)
        factor = self._field(f"{a}.rope.scaling.factor", None)
        if kind is None and self._field(f"{a}.rope.scale_linear", None) is not None:
            kind, factor = "linear", self._field(f"{a}.rope.scale_linear")
        if has_rope_freqs:
            if kind not in (None, "none"):
                raise self._refuse(f"both rope_freqs.weight and {a}.rope.scaling.type = {kind!r}")
            factors = self._tensor_array("rope_freqs.weight").reshape(-1)
            if factors.size != rotary_dim // 2:
                raise self._refuse(f"rope_freqs.weight has {factors.size} factors, rotary dim {rotary_dim} needs "
                                   f"{rotary_dim // 2}")
            return RopeScaling("llama3", max_position_embeddings=context,
                               freq_factors=tuple(float(x) for x in factors))
        if kind in (None, "none"):
            return None
        original = self._field(f"{a}.rope.scaling.original_context_length", None)
        try:
            if kind == "linear":
                return RopeScaling("linear", max_position_embeddings=context, factor=float(factor))
            if kind == "yarn":
                for key, default in (("attn_factor", 1.0), ("yarn_ext_factor", 1.0), ("yarn_beta_fast", 32.0),
                                     ("yarn_beta_slow", 1.0)):
                    value = self._field(f"{a}.rope.scaling.{key}", default)
                    if float(value) != default and not (key == "yarn_ext_factor" and float(value) < 0):
                        raise self._refuse(f"{a}.rope.scaling.{key} = {value} (sglite computes yarn with "
                                           f"llama.cpp's default {default} only)")
                return RopeScaling("yarn", max_position_embeddings=context,
                                   factor=None if factor is None else float(factor),
                                   original_max_position_embeddings=None if original is None else int(original))
        except UnsupportedRopeError as e:
            raise self._refuse(f"{a}.rope.scaling: {e}") from None
        raise self._refuse(f"{a}.rope.scaling.type = {kind!r} is not supported (sglite computes none, linear, "
                           "yarn, and llama3 via rope_freqs.weight)")

    def _dtype_summary(self) -> str:
        kinds = sorted({t.tensor_type.name for t in self.reader.tensors})
        return "GGUF " + "/".join(kinds)

    def _tensor_array(self, name: str) -> np.ndarray:
        from gguf import quants

        t = next(t for t in self.reader.tensors if t.name == name)
        return np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float64)

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
            add_space_prefix=self._field("tokenizer.ggml.add_space_prefix", None),
        )

    def tensor_types(self) -> dict[str, int]:
        """{GGUF tensor type name: number of tensors of that type}, in the file's order."""
        kinds: dict[str, int] = {}
        for t in self.reader.tensors:
            kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
        return kinds

    def check_tensor_types(self) -> None:
        """Raises GGUFError naming the first tensor whose type sglite cannot read (before any is dequantized)."""
        for t in self.reader.tensors:
            if t.tensor_type.name not in DEQUANTIZABLE:
                raise GGUFError(f"tensor {t.name!r} in {str(self.path)!r} is {t.tensor_type.name}, a GGUF tensor type "
                                f"sglite cannot read; it reads {', '.join(DEQUANTIZABLE)} (requantize the file, "
                                "e.g. llama-quantize ... Q4_K_M)")

    def load_weights(self) -> dict[str, "torch.Tensor"]:
        """All tensors dequantized to float32 (exactly gguf.quants.dequantize's values), Q/K rows un-permuted.
        Names as in the file."""
        tensors = self.tensors()
        return {name: tensors[name] for name in tensors}

    def tensors(self) -> "GGUFTensors":
        """The tensors as a lazy mapping: each dequantized when read (so a model built from it holds one float32
        tensor at a time, not the file's every weight), with the exact block grids of the types that have one."""
        self.check_tensor_types()
        return GGUFTensors(self)


RECENT_GRIDS = 3     # a layer's widest stack: q, k, v


class GGUFTensors(Mapping):
    """{name: float32 tensor} over a GGUF file's tensors, read from the file (memory-mapped) on each access:
    `m[name]` dequantizes it (gguf.quants.dequantize's values, Q/K rows un-permuted, an own writable copy);
    `grid(name)` is its integer block grid read straight from its blocks (runtime/gguf_blocks.py; None for the
    types read by value); `numel(name)` its size, reading nothing."""

    def __init__(self, f: GGUFFile):
        self._file = f
        self._by_name = {t.name: t for t in f.reader.tensors}
        self._recent: dict[str, Any] = {}       # name -> grid, the latest RECENT_GRIDS read
        cfg = f.config()
        permuted = cfg.architecture in PERMUTED_QK
        self._heads = {}
        if permuted:
            for name in self._by_name:
                if name.endswith(("attn_q.weight", "attn_q.bias")):
                    self._heads[name] = cfg.num_heads
                elif name.endswith(("attn_k.weight", "attn_k.bias")):
                    self._heads[name] = cfg.num_kv_heads

    def __getitem__(self, name: str) -> "torch.Tensor":
        import torch
        from gguf import quants

        t = self._by_name[name]
        grid = self.grid(name)
        if grid is not None:        # the same values, from the blocks read once (gguf_blocks: exact)
            q, scale, lo, bits = grid
            out_f, in_f = q.shape
            q = q.view(out_f, -1, in_f // scale.shape[1]).float()
            if bits == 8:       # through zero: (q - 128) * scale, the file's d * (its integer), as gguf rounds it
                return q.sub_(128).mul_(scale[..., None]).view(out_f, in_f)
            return q.mul_(scale[..., None]).add_(lo[..., None]).view(out_f, in_f)
        try:
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except Exception as e:
            raise GGUFError(f"cannot dequantize tensor {t.name!r} ({t.tensor_type.name}) of "
                            f"{str(self._file.path)!r}: {e}") from e
        w = w.reshape(self.shape(name))
        if name in self._heads:
            w = unpermute_rotary_rows(w, self._heads[name])
        return torch.from_numpy(np.array(w, dtype=np.float32, order="C"))    # own, writable copy

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def release(self) -> None:
        """Done reading: drops the kept grids and the file's pages from resident memory (GGUFContainer)."""
        self._recent.clear()
        self._file.reader.release_pages()

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(self._by_name[name].shape))   # GGUF lists ne0 (fastest) first

    def qtype(self, name: str) -> str:
        """The tensor's GGUF type name (Q4_K, F32, ...)."""
        return self._by_name[name].tensor_type.name

    def numel(self, name: str) -> int:
        return int(np.prod(self.shape(name)))

    def grid(self, name: str):
        """(q, scale, lo, bits) with weight = q * scale + lo per block, Q/K rows un-permuted; None when the
        tensor's type has no direct reading (gguf_blocks.BLOCK) or it is not a matrix."""
        from .gguf_blocks import block_grid_from_gguf

        if name in self._recent:
            return self._recent[name]
        t = self._by_name[name]
        shape = self.shape(name)
        if len(shape) != 2:
            return None
        g = block_grid_from_gguf(t.data, t.tensor_type.name, shape)
        if g is not None and name in self._heads:
            q, scale, lo, bits = g
            g = (*(torch_rows(unpermute_rotary_rows, x, self._heads[name]) for x in (q, scale, lo)), bits)
        # a layer reads a matrix's grid and then, for a float format, its values: the few latest are kept
        self._recent[name] = g
        while len(self._recent) > RECENT_GRIDS:
            self._recent.pop(next(iter(self._recent)))
        return g


def torch_rows(fn, x: "torch.Tensor", heads: int) -> "torch.Tensor":
    """A row permutation written for numpy arrays, on a torch tensor."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(fn(x.numpy(), heads)))

"""Rotary position embeddings: the inverse frequencies of every rope_type sglite honours, computed the way
transformers' `modeling_rope_utils` does (in float64 here), and the cos/sin tables the model indexes by position.

Layout is half-split ("neox"): a head's first `rotary_dim` dims rotate as pairs (i, i + rotary_dim/2); the rest
(partial rotary) pass through unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# rope types whose tables do not depend on the sequence length within the context sglite allows
SCALED_ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")


class UnsupportedRopeError(ValueError):
    """A checkpoint's rotary settings name something sglite does not compute exactly."""


@dataclass(frozen=True)
class RopeScaling:
    """A checkpoint's rope scaling (transformers' `rope_parameters` minus `rope_theta`), unresolved: defaults
    that transformers fills in at compute time are filled in by `inv_freq` below, the same way.

    rope_type semantics (transformers 5.x):
      linear   -- inv_freq / factor.
      dynamic  -- NTK: the base grows once a sequence exceeds max_position_embeddings. Within it (the only
                  lengths sglite allows: max_context <= max_position_embeddings) it equals the default rope.
      yarn     -- blend of interpolated and extrapolated frequencies, cos/sin scaled by attention_factor.
      llama3   -- per-band smoothing of low frequencies; or, from GGUF, explicit per-frequency divisors
                  (`freq_factors`, llama.cpp's `rope_freqs.weight`).
      longrope -- short_factor divisors below original_max_position_embeddings (max_context is capped
                  there, so long_factor is never used), cos/sin scaled by attention_factor.
    """
    rope_type: str
    max_position_embeddings: int                  # the checkpoint's, before any cap sglite applies
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None          # llama3
    high_freq_factor: float | None = None         # llama3
    beta_fast: float | None = None                # yarn (default 32)
    beta_slow: float | None = None                # yarn (default 1)
    attention_factor: float | None = None         # yarn, longrope (default: derived from factor)
    mscale: float | None = None                   # yarn
    mscale_all_dim: float | None = None           # yarn
    truncate: bool = True                         # yarn
    short_factor: tuple[float, ...] | None = None  # longrope, one per rotary frequency
    freq_factors: tuple[float, ...] | None = None  # GGUF rope_freqs: inv_freq[i] / freq_factors[i]

    def __post_init__(self) -> None:
        t = self.rope_type
        if t not in SCALED_ROPE_TYPES:
            raise UnsupportedRopeError(
                f"unknown rope_type {t!r}; sglite computes 'default', {', '.join(map(repr, SCALED_ROPE_TYPES))}")
        need = {"linear": ("factor",), "dynamic": ("factor",), "yarn": ("original_max_position_embeddings",),
                "longrope": ("original_max_position_embeddings", "short_factor"),
                "llama3": () if self.freq_factors is not None else (
                    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[t]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise UnsupportedRopeError(f"rope_type {t!r} needs {', '.join(missing)} in rope_parameters")
        if t == "yarn" and self.factor is None and self.original_max_position_embeddings is None:
            raise UnsupportedRopeError("rope_type 'yarn' needs factor or original_max_position_embeddings")

    def describe(self) -> str:
        if self.freq_factors is not None:
            return f"{self.rope_type} (per-frequency factors from GGUF rope_freqs)"
        keys = ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
                "beta_slow", "attention_factor", "mscale", "mscale_all_dim")
        parts = [f"{k}={getattr(self, k)}" for k in keys if getattr(self, k) is not None]
        return f"{self.rope_type}({', '.join(parts)})"


def default_inv_freq(theta: float, dim: int) -> torch.Tensor:
    """[dim // 2] float64: theta ** (-2i / dim)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))


def _yarn(s: RopeScaling, theta: float, dim: int) -> tuple[torch.Tensor, float]:
    original = s.original_max_position_embeddings
    factor = s.factor if s.factor is not None else s.max_position_embeddings / original

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = s.attention_factor
    if attention_factor is None:
        if s.mscale and s.mscale_all_dim:
            attention_factor = float(get_mscale(factor, s.mscale) / get_mscale(factor, s.mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = s.beta_fast or 32, s.beta_slow or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp                      # 1: keep the original frequency, 0: interpolate
    pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, attention_factor


def _llama3(s: RopeScaling, theta: float, dim: int) -> torch.Tensor:
    inv = default_inv_freq(theta, dim)
    if s.freq_factors is not None:
        factors = torch.tensor(s.freq_factors, dtype=torch.float64)
        if factors.shape != inv.shape:
            raise UnsupportedRopeError(f"rope_freqs has {factors.numel()} factors, the rotary dim needs {inv.numel()}")
        return inv / factors
    factor, low_f, high_f = s.factor, s.low_freq_factor, s.high_freq_factor
    old_context = s.original_max_position_embeddings
    low_wavelen, high_wavelen = old_context / low_f, old_context / high_f
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_context / wavelen - low_f) / (high_f - low_f)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def inv_freq(theta: float, dim: int, s: RopeScaling | None) -> tuple[torch.Tensor, float]:
    """([dim // 2] float64 inverse frequencies of a rotary dim `dim` at base `theta` under scaling `s`, attention
    factor that scales cos and sin)."""
    if s is None:
        return default_inv_freq(theta, dim), 1.0
    if s.rope_type == "linear":
        return default_inv_freq(theta, dim) / s.factor, 1.0
    if s.rope_type == "dynamic":
        # transformers' NTK base at seq_len = max(seq_len, max_position_embeddings); sglite never runs past
        # max_position_embeddings (max_context <= it), so seq_len is max_position_embeddings here
        seq_len = mpe = s.max_position_embeddings
        base = theta * ((s.factor * seq_len / mpe) - (s.factor - 1)) ** (dim / (dim - 2))
        return default_inv_freq(base, dim), 1.0
    if s.rope_type == "yarn":
        return _yarn(s, theta, dim)
    if s.rope_type == "llama3":
        return _llama3(s, theta, dim), 1.0
    # longrope below original_max_position_embeddings: the short factors
    short = torch.tensor(s.short_factor, dtype=torch.float64)
    if short.numel() != dim // 2:
        raise UnsupportedRopeError(f"longrope short_factor has {short.numel()} entries, the rotary dim needs {dim // 2}")
    factor = s.factor if s.factor is not None else s.max_position_embeddings / s.original_max_position_embeddings
    attention_factor = s.attention_factor
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(
            1 + math.log(factor) / math.log(s.original_max_position_embeddings))
    return 1.0 / (short * theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)), attention_factor


def rotary_tables(theta: float, dim: int, scaling: RopeScaling | None, positions: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [positions, dim] float64 for positions 0 .. positions - 1 (half-split layout), rotary dim `dim`
    at base `theta` under `scaling`."""
    inv, attention_factor = inv_freq(theta, dim, scaling)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    if attention_factor == 1.0:
        return angles.cos(), angles.sin()
    return angles.cos() * attention_factor, angles.sin() * attention_factor

"""Attention backends. The runtime picks one per engine: "torch" (CPU and reference) or "triton" (CUDA, or the
CPU under TRITON_INTERPRET=1)."""
from __future__ import annotations

from .base import AttentionBackend

BACKENDS = ("torch", "triton")


def create_attention_backend(name: str | None, kv_pool, device, row_invariant: bool = False) -> AttentionBackend:
    """name None picks Triton on CUDA, torch elsewhere. row_invariant: see torch_backend (the torch backend with
    its paged CPU kernel; elsewhere it is not offered)."""
    import torch

    if name is None:
        name = "triton" if torch.device(device).type == "cuda" else "torch"
    if name == "torch":
        from .torch_backend import TorchAttentionBackend
        return TorchAttentionBackend(kv_pool, row_invariant=row_invariant)
    if name == "triton":
        from .triton_backend import TritonAttentionBackend
        return TritonAttentionBackend(kv_pool)
    raise ValueError(f"attention_backend must be one of {BACKENDS}, got {name!r}")


__all__ = ["AttentionBackend", "BACKENDS", "create_attention_backend"]

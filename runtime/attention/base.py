"""The attention backend interface between the model and the paged KV pool."""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..forward_batch import ForwardBatch


class AttentionBackend(ABC):
    """Stores new K/V into the pool and attends over each request's slots.

    One instance per engine; it holds the KVPool. `init_forward_metadata` runs once per batch (index tensors
    shared by all layers), `forward` once per layer."""

    def __init__(self, kv_pool):
        self.kv_pool = kv_pool

    @abstractmethod
    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        """Sets fb.attn_metadata. Must be called before the first layer's forward."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                fb: ForwardBatch, scale: float, window: int | None = None,
                softcap: float | None = None) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D] (post-rotary) for the batch's new tokens.

        Mutates the pool: writes k, v of layer `layer_id` at fb.out_cache_loc. Returns [T, Hq, D]: each new
        token attends to its request's cached prefix and causally to the request's new tokens; with `window`,
        only to the last `window` positions (itself included: keys at positions > position - window); with
        `softcap`, each score s (already scaled) becomes softcap * tanh(s / softcap) before the softmax.
        The pool keeps every position's K/V either way (a windowed layer masks, it does not evict), so the
        prefix cache serves windowed layers as it serves global ones."""

    def fused_ready(self) -> bool:
        """Whether the model's fused CPU layers may run on this backend (they store K/V themselves, through
        pool_bits or a staging buffer, then call `attend`)."""
        return False

    def pool_bits(self, layer_id: int):
        """Layer `layer_id`'s K and V pool buffers as numpy views of their bits, for CPU kernels that store new K/V
        themselves and then call `attend`; None (the default) where the backend offers no such path."""
        return None

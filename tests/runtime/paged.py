"""Test helpers that drive LlamaModel.forward through the paged pool by hand (no engine)."""
from __future__ import annotations

import torch

from sglite.runtime.attention import create_attention_backend
from sglite.runtime.forward_batch import ForwardBatch
from sglite.runtime.kv_pool import KVPool


class PagedRunner:
    """One request at a time over a pool whose slots are handed out in a scrambled order, so that a request's
    tokens are never contiguous in memory."""

    def __init__(self, model, num_slots: int = 512, backend: str = "torch", seed: int = 0):
        c = model.config
        self.model = model
        self.pool = KVPool(c.num_layers, num_slots, c.num_kv_heads, c.head_dim)
        self.attn = create_attention_backend(backend, self.pool, "cpu")
        self.table = torch.zeros((4, c.max_context), dtype=torch.int32)
        g = torch.Generator().manual_seed(seed)
        self.free = (torch.randperm(num_slots - 1, generator=g) + 1).tolist()

    def extend(self, rows_tokens: list[tuple[int, list[int], int]], all_logits: bool = False) -> torch.Tensor:
        """rows_tokens: (table row, new tokens, cached prefix length) per request. Returns the logits rows."""
        toks = [t for _, t, _ in rows_tokens]
        n = sum(len(t) for t in toks)
        slots = torch.tensor([self.free.pop() for _ in range(n)], dtype=torch.int64)
        idx = torch.arange(n) if all_logits else None
        fb = ForwardBatch.build(toks, [p for *_, p in rows_tokens], [r for r, *_ in rows_tokens], slots,
                                self.table, logits_indices=idx)
        return self.model.net.forward(fb, self.attn)

    def greedy(self, prompt: list[int], n: int, row: int = 0) -> list[int]:
        logits = self.extend([(row, prompt, 0)])
        out, pos = [], len(prompt)
        for _ in range(n):
            tok = int(logits[-1].argmax())
            out.append(tok)
            logits = self.extend([(row, [tok], pos)])
            pos += 1
        return out

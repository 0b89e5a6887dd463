"""ForwardBatch: what one forward pass computes. Prefill, extend-after-cached-prefix and decode are one shape.

Invariant before a forward pass: for each request b, req_to_token[req_pool_indices[b], :seq_lens[b]] holds the
slots of all its tokens, the last extend_lens[b] of which are out_cache_loc's entries for b (K/V written by the
attention backend during this pass); the first prefix_lens[b] already hold K/V.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor         # [T] int64, the new tokens of every request, request-major
    positions: torch.Tensor         # [T] int64, absolute position of each new token
    out_cache_loc: torch.Tensor     # [T] int64, slot where each new token's K/V is written
    req_pool_indices: torch.Tensor  # [B] int64, row of each request in req_to_token
    prefix_lens: torch.Tensor       # [B] int64, tokens already in the cache (attended to, not recomputed)
    extend_lens: torch.Tensor       # [B] int64, new tokens; sum == T
    req_to_token: torch.Tensor      # [max_requests, max_context] int32 (the shared table, not a copy)
    prefix_lens_cpu: list[int]
    extend_lens_cpu: list[int]
    logits_indices: torch.Tensor    # [N] int64 into [T]: rows whose logits are returned (default: last of each)
    decode_from: int = 0            # rows [decode_from:] of [T] belong to decoding requests, rows before it to
                                    # prefilling ones (weight formats are chosen by phase, runtime/linear.py)
    decode_logits_from: int = 0     # likewise for the rows of the returned logits
    num_prefill: int = 0            # requests [:num_prefill] are prefilling, the rest decoding (each of their rows
                                    # attends like a one-token decode: pending, jump-forward and draft tokens)
    lora: Any = None                # LoraBatch: the rows that run under LoRA adapters (None: all run the base)
    attn_metadata: Any = field(default=None, repr=False)  # built once per batch by the attention backend

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def seq_lens_cpu(self) -> list[int]:
        return [p + e for p, e in zip(self.prefix_lens_cpu, self.extend_lens_cpu)]

    @property
    def seq_lens(self) -> torch.Tensor:
        return self.prefix_lens + self.extend_lens

    @property
    def is_decode(self) -> bool:
        return all(e == 1 for e in self.extend_lens_cpu)

    @staticmethod
    def build(token_lists: Sequence[Sequence[int]], prefix_lens: Sequence[int], req_rows: Sequence[int],
              out_cache_loc: torch.Tensor, req_to_token: torch.Tensor,
              logits_indices: torch.Tensor | None = None, num_prefill: int | None = None) -> "ForwardBatch":
        """From per-request new tokens and cached-prefix lengths. Writes out_cache_loc into req_to_token.
        num_prefill: the first num_prefill requests are prefilling their prompts, the rest decoding (None: all
        decoding if every request has one new token, else all prefilling)."""
        device = req_to_token.device
        extend = [len(t) for t in token_lists]
        if any(e == 0 for e in extend):
            raise ValueError("every request in a forward batch needs at least one new token")
        flat = [t for toks in token_lists for t in toks]
        positions = torch.cat([torch.arange(p, p + e, dtype=torch.int64) for p, e in zip(prefix_lens, extend)])
        offset = 0
        for row, p, e in zip(req_rows, prefix_lens, extend):
            req_to_token[row, p:p + e] = out_cache_loc[offset:offset + e].to(torch.int32)
            offset += e
        if logits_indices is None:
            logits_indices = torch.tensor(extend, dtype=torch.int64).cumsum(0) - 1
        if num_prefill is None:
            num_prefill = 0 if all(e == 1 for e in extend) else len(extend)
        decode_from = sum(extend[:num_prefill])
        return ForwardBatch(
            input_ids=torch.tensor(flat, dtype=torch.int64, device=device),
            positions=positions.to(device),
            out_cache_loc=out_cache_loc.to(device),
            req_pool_indices=torch.tensor(list(req_rows), dtype=torch.int64, device=device),
            prefix_lens=torch.tensor(list(prefix_lens), dtype=torch.int64, device=device),
            extend_lens=torch.tensor(extend, dtype=torch.int64, device=device),
            req_to_token=req_to_token,
            prefix_lens_cpu=list(prefix_lens),
            extend_lens_cpu=extend,
            logits_indices=logits_indices.to(device),
            decode_from=decode_from,
            decode_logits_from=int((logits_indices < decode_from).sum()),
            num_prefill=num_prefill,
        )

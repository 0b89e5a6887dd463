"""ModelRunner: turns a scheduled batch into one forward pass and returns the logits rows that are needed.

Rows needed per request: the positions whose logits score prompt tokens (prompt logprobs, from
lp.start_len - 1) and, when the pass reaches the end of the request's tokens, the last row (sampling) plus
one row per draft token (speculative decoding: the draft follows the pending tokens in the same extend).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..attention import create_attention_backend
from ..forward_batch import ForwardBatch
from ..kv_pool import KVPool
from ..lora import LoraBatch
from .. import batch_invariance
from .request import ScheduledBatch


@dataclass
class ForwardOutput:
    logits: torch.Tensor                 # [N, V] float32, the needed rows only
    sample_rows: list[int | None]        # per request: its (first) sampling row in logits, or None (mid-prompt
                                         # chunk); a request with a draft of k tokens has k more rows after it
    prompt_rows: list[tuple[int, int]]   # per request: (first row, count) of prompt-logprob rows in logits
    prompt_first_pos: list[int]          # per request: absolute position of its first prompt-logprob row


class ModelRunner:
    def __init__(self, model, num_slots: int, attention_backend: str | None, device: str,
                 batch_invariant: bool | None = None, lora=None, kv_cache_dtype: str = "auto"):
        self.model = model
        self.lora = lora          # LoraManager (or None): requests' adapters reach the pass through their Reqs
        self.net = model.net
        c = model.config
        self.device = torch.device(device)
        self.kv_pool = KVPool(c.num_layers, num_slots, c.num_kv_heads, c.head_dim, self.net.dtype, self.device,
                              kv_cache_dtype)
        # EngineConfig.batch_invariant: the policy and its invariant live in runtime/batch_invariance.py
        wanted = batch_invariant is not False and batch_invariance.offered(self.device, attention_backend)
        dependent = batch_invariance.prepare_layers(self.net) if wanted else None
        self.attn = create_attention_backend(attention_backend, self.kv_pool, self.device,
                                             row_invariant=wanted and dependent is None)
        self.batch_invariant = bool(getattr(self.attn, "row_invariant", False))
        if batch_invariant and not self.batch_invariant:
            raise ValueError(batch_invariance.refusal(dependent, self.attn, self.device))
        self.forward_passes = 0

    def forward(self, batch: ScheduledBatch, req_to_token: torch.Tensor) -> ForwardOutput:
        token_lists, prefix_lens, rows = [], [], []
        indices: list[int] = []
        sample_rows: list[int | None] = []
        prompt_rows: list[tuple[int, int]] = []
        prompt_first: list[int] = []
        offset = 0
        for req, n in zip(batch.reqs, batch.extend_lens):
            draft = req.spec.draft
            k = len(draft)
            start, end = req.kv.len, req.kv.len + n - k
            token_lists.append(req.tokens(start, end) + draft if k else req.tokens(start, end))
            prefix_lens.append(start)
            rows.append(req.kv.row)
            # prompt logprobs: logits at position p score prompt token p + 1, for p in [lo, prompt_len - 2]
            first = len(indices)
            lo = max(start, req.lp.start_len - 1, 0)
            hi = min(end, req.prompt_len - 1)
            if not req.lp.input_done and lo < hi:
                indices.extend(range(offset + lo - start, offset + hi - start))
            prompt_rows.append((first, len(indices) - first))
            prompt_first.append(lo)
            if end == req.seq_len:
                sample_rows.append(len(indices))
                indices.extend(range(offset + n - 1 - k, offset + n))
            else:
                sample_rows.append(None)
            offset += n
        fb = ForwardBatch.build(token_lists, prefix_lens, rows, batch.out_cache_loc, req_to_token,
                                logits_indices=torch.tensor(indices, dtype=torch.int64), num_prefill=batch.num_prefill)
        if any(r.lora is not None for r in batch.reqs):
            fb.lora = LoraBatch.build([r.lora for r in batch.reqs], batch.extend_lens, fb.decode_from)
        logits = self.net.forward(fb, self.attn)
        self.forward_passes += 1
        return ForwardOutput(logits, sample_rows, prompt_rows, prompt_first)

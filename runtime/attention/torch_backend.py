"""Attention in plain torch over the paged pool: gather each request's K/V into a padded batch, one SDPA call
per layer. The CPU path, and the reference the Triton backend is checked against."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..forward_batch import ForwardBatch
from .base import AttentionBackend


@dataclass
class TorchAttentionMetadata:
    kv_slots: torch.Tensor     # [B, Lmax] int64 pool slots of each request's tokens (padding -> slot 0)
    mask: torch.Tensor         # [B, 1, Emax, Lmax] bool, True where query i may attend key j
    q_index: torch.Tensor      # [B, Emax] int64 into [T] (padding -> 0)
    q_valid: torch.Tensor      # [B * Emax] bool, which padded query rows are real
    max_extend: int


class TorchAttentionBackend(AttentionBackend):
    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        device = fb.input_ids.device
        seq = fb.seq_lens_cpu
        B, L, E = fb.batch_size, max(seq), max(fb.extend_lens_cpu)
        cols = torch.arange(L, device=device)
        rows = fb.req_to_token[fb.req_pool_indices, :L].to(torch.int64)           # [B, L]
        key_valid = cols[None, :] < fb.seq_lens[:, None]                            # [B, L]
        kv_slots = torch.where(key_valid, rows, torch.zeros_like(rows))
        qi = torch.arange(E, device=device)
        q_valid = qi[None, :] < fb.extend_lens[:, None]                             # [B, E]
        starts = fb.extend_lens.cumsum(0) - fb.extend_lens                          # [B]
        q_index = torch.where(q_valid, starts[:, None] + qi[None, :], torch.zeros_like(qi)[None, :])
        q_pos = fb.prefix_lens[:, None] + qi[None, :]                               # [B, E] absolute position
        mask = key_valid[:, None, :] & (cols[None, None, :] <= q_pos[:, :, None])   # [B, E, L]
        mask |= ~q_valid[:, :, None]  # padded query rows attend everywhere (discarded) to avoid NaN rows
        fb.attn_metadata = TorchAttentionMetadata(kv_slots, mask[:, None], q_index, q_valid.reshape(-1), E)

    def forward(self, q, k, v, layer_id, fb, scale):
        pool = self.kv_pool
        k_buf, v_buf = pool.k_buffer[layer_id], pool.v_buffer[layer_id]  # [S, Hkv, D]
        k_buf[fb.out_cache_loc] = k
        v_buf[fb.out_cache_loc] = v
        # padded key columns gather slot 0; its weights are 0 after softmax, but 0 * NaN would poison the row,
        # and padding writes may have left anything there
        k_buf[0] = 0
        v_buf[0] = 0
        m: TorchAttentionMetadata = fb.attn_metadata
        B, E = m.q_index.shape
        T, Hq, D = q.shape
        keys = k_buf[m.kv_slots].transpose(1, 2)      # [B, Hkv, L, D]
        values = v_buf[m.kv_slots].transpose(1, 2)    # [B, Hkv, L, D]
        if E == 1 and B == T:
            qb = q[:, :, None, :]                       # decode: [B, Hq, 1, D], no padding
        else:
            qb = q[m.q_index].transpose(1, 2)           # [B, Hq, E, D]
        out = F.scaled_dot_product_attention(qb, keys, values, attn_mask=m.mask, scale=scale,
                                             enable_gqa=Hq != keys.shape[1])
        out = out.transpose(1, 2).reshape(B * E, Hq, D)  # [B*E, Hq, D]
        if E == 1 and B == T:
            return out
        return out[m.q_valid]

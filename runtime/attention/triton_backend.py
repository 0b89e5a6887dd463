"""Attention with the Triton kernels of sglite.kernels over the paged pool: the CUDA path.

Also runs on the CPU under TRITON_INTERPRET=1 (slowly), which is how it is checked without a GPU.
Decode batches (one new token per request) use split-KV flash-decoding; everything else (prefill, extend after a
prefix-cache hit, chunked prefill, mixed batches) uses the extend kernel.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from sglite.kernels.decode_attention import decode_attention_triton, decode_workspace, default_num_splits
from sglite.kernels.extend_attention import extend_attention_triton
from sglite.kernels.kv_store import store_kv_cache_triton

from ..forward_batch import ForwardBatch
from .base import AttentionBackend


@dataclass
class TritonAttentionMetadata:
    is_decode: bool
    seq_lens: torch.Tensor              # [B] int64
    num_splits: int                     # decode only
    max_extend: int                     # extend only
    extend_starts: torch.Tensor | None  # [B] int64, first new token of each request in [T] (extend only)
    workspace: tuple | None = None      # decode split buffers, allocated by the first layer, reused by the rest


class TritonAttentionBackend(AttentionBackend):
    def __init__(self, kv_pool):
        super().__init__(kv_pool)
        device = kv_pool.k_buffer.device
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("attention_backend='triton' on the CPU needs the Triton interpreter: set "
                               "TRITON_INTERPRET=1 in the environment before the first forward pass, or use "
                               "attention_backend='torch'")
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise RuntimeError("attention_backend='triton' needs triton (pip install 'triton==3.7.1'); "
                               "or use attention_backend='torch'") from e

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        seq_lens = fb.seq_lens
        if fb.is_decode:
            splits = default_num_splits(fb.batch_size, self.kv_pool.k_buffer.shape[2], max(fb.seq_lens_cpu),
                                        seq_lens.device)
            fb.attn_metadata = TritonAttentionMetadata(True, seq_lens, splits, 1, None)
        else:
            starts = torch.cumsum(fb.extend_lens, 0) - fb.extend_lens
            fb.attn_metadata = TritonAttentionMetadata(False, seq_lens, 1, max(fb.extend_lens_cpu), starts)

    def forward(self, q, k, v, layer_id, fb, scale, window=None, softcap=None):
        q, k, v = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k, v))  # kernels need head_dim dense
        pool = self.kv_pool
        if pool.direct:
            k_cache, v_cache = pool.k_buffer[layer_id], pool.v_buffer[layer_id]  # [S, Hkv, D]
            store_kv_cache_triton(k_cache, v_cache, fb.out_cache_loc, k, v)
        else:   # another storage format (int8 / fp8 / bf16 under float32): the kernels read this layer converted
            pool.store(layer_id, fb.out_cache_loc, k, v)
            k_cache, v_cache = pool.layer(layer_id)
            k, v = pool.gather(layer_id, fb.out_cache_loc)     # the new tokens as stored, as every path reads them
        m: TritonAttentionMetadata = fb.attn_metadata
        if m.is_decode:
            if m.workspace is None:
                T, Hq, D = q.shape
                m.workspace = decode_workspace(T, Hq, D, m.num_splits, q.device)
            return decode_attention_triton(q, k_cache, v_cache, fb.req_to_token, fb.req_pool_indices, m.seq_lens,
                                           scale, num_splits=m.num_splits, workspace=m.workspace, window=window,
                                           softcap=softcap)
        return extend_attention_triton(q, k, v, k_cache, v_cache, fb.req_to_token, fb.req_pool_indices,
                                       fb.prefix_lens, fb.extend_lens, scale, max_extend=m.max_extend,
                                       extend_starts=m.extend_starts, window=window, softcap=softcap)

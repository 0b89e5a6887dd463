"""Paged decode attention for the CPU: one query token per request, read straight from the KV pool.

Same signature and layout as `decode_attention_torch` (the reference, in decode_attention.py):
    q:                [B, Hq, D]           the one new token of each request (its K/V already stored)
    k_cache, v_cache: [num_slots, Hkv, D]  one layer's pool buffers (float32 or bfloat16); Hq % Hkv == 0
    req_to_token:     [max_requests, max_context] int32; row req_pool_indices[b], columns :seq_lens[b]
    out:              [B, Hq, D]           same dtype as q

The torch path gathers every request's keys into a padded [B, L, Hkv, D] copy per layer (and SDPA's CPU kernel
pays a large fixed cost per call for one query). Here a numba kernel (compiled once, cached on disk) runs one
job per (request, KV head), in parallel: it walks the request's slots in req_to_token and reads each K and V
row once, where it lies, for all Hq/Hkv query heads of the group; softmax in float32. Requests that share a
cached prefix read the same rows, which then come from the CPU's cache.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from .decode_attention import _check


def available() -> bool:
    """Whether numba is importable (the CPU kernel's one dependency)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


PARALLEL_MIN_JOBS = 16   # (request, KV head) jobs from which a call runs on numba's threads: below that, the
                         # hand-off between torch's and numba's thread pools costs more than it saves


@functools.cache
def _kernel(parallel: bool):
    import numba

    @numba.njit(inline="always", fastmath=True)
    def _row(buf, bits, slot, kh, D, mask, shift):
        # one K or V row's float32 bits: buf holds float32 bits (int32) or bfloat16 bits (int16), and a
        # bfloat16 is the top half of a float32
        for d in range(D):
            bits[d] = (np.uint32(buf[slot, kh, d]) & mask) << shift
        return bits

    @numba.njit(parallel=parallel, fastmath=True, cache=True)
    def decode(q, k_buf, v_buf, table, rows, seq_lens, scale, out, mask, shift):
        # q, out: [B, Hq, D] float32; k_buf, v_buf: [S, Hkv, D] int32 (float32 bits) or int16 (bf16 bits)
        B, Hq, D = q.shape
        Hk = k_buf.shape[1]
        G = Hq // Hk
        for job in numba.prange(B * Hk):
            b, kh = job // Hk, job % Hk
            n, row = seq_lens[b], rows[b]
            scores = np.empty((G, n), np.float32)
            raw = np.empty(D, np.uint32)
            vec = raw.view(np.float32)
            qg = np.empty((G, D), np.float32)            # the group's queries, pre-scaled
            for g in range(G):
                for d in range(D):
                    qg[g, d] = q[b, kh * G + g, d] * scale
            for i in range(n):
                _row(k_buf, raw, table[row, i], kh, D, mask, shift)
                for g in range(G):
                    acc = np.float32(0.0)
                    for d in range(D):
                        acc += qg[g, d] * vec[d]
                    scores[g, i] = acc
            acc_o = np.zeros((G, D), np.float32)
            for g in range(G):
                m = scores[g, 0]
                for i in range(1, n):
                    m = max(m, scores[g, i])
                total = np.float32(0.0)
                for i in range(n):
                    e = np.exp(scores[g, i] - m)
                    scores[g, i] = e
                    total += e
                for i in range(n):
                    scores[g, i] /= total
            for i in range(n):
                _row(v_buf, raw, table[row, i], kh, D, mask, shift)
                for g in range(G):
                    p = scores[g, i]
                    for d in range(D):
                        acc_o[g, d] += p * vec[d]
            for g in range(G):
                for d in range(D):
                    out[b, kh * G + g, d] = acc_o[g, d]

    return decode


def decode_attention_cpu(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of each request's one query over its seq_lens[b] cached tokens (every seq_len >= 1)."""
    _check(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens)
    if q.device.type != "cpu":
        raise ValueError(f"decode_attention_cpu runs on the CPU; q is on {q.device}")
    if k_cache.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"decode_attention_cpu takes a float32 or bfloat16 cache, got {k_cache.dtype}")
    is_bf16 = k_cache.dtype == torch.bfloat16
    bits = torch.int16 if is_bf16 else torch.int32
    kb, vb = k_cache.view(bits).numpy(), v_cache.view(bits).numpy()
    qf = q.float().contiguous()
    res = torch.empty(qf.shape, dtype=torch.float32)
    if qf.shape[0]:
        _kernel(qf.shape[0] * k_cache.shape[1] >= PARALLEL_MIN_JOBS)(qf.numpy(), kb, vb, req_to_token.numpy(), req_pool_indices.numpy(), seq_lens.numpy(),
                  np.float32(scale), res.numpy(), np.uint32(0xFFFF if is_bf16 else 0xFFFFFFFF),
                  np.uint32(16 if is_bf16 else 0))
    res = res.to(q.dtype)
    if out is not None:
        out.copy_(res)
        return out
    return res

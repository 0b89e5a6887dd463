"""Paged decode attention: one query token per request over all of its KV slots, GQA, split-KV.

Layout (see sglite.runtime.kv_pool):
    q:                [B, Hq, D]           the one new token of each request (its K/V already stored)
    k_cache, v_cache: [num_slots, Hkv, D]  one layer's pool buffers; Hq % Hkv == 0
    req_to_token:     [max_requests, max_context] int32; row req_pool_indices[b], columns :seq_lens[b]
    out:              [B, Hq, D]           same dtype as q
    window:           None, or each query sees only its last `window` keys (a sliding window)
    softcap:          None, or each scaled score s becomes softcap * tanh(s / softcap) before the softmax

Flash-decoding in two kernels. Stage 1 splits each request's keys into `num_splits` chunks; one program handles
one (request, KV head, chunk) for all Hq/Hkv query heads of the group at once (so K/V are read once per group),
with an online softmax in fp32, and writes the chunk's normalised output and log-sum-exp. Stage 2 merges the
chunks of each (request, query head). Splitting keeps the GPU busy when B * Hkv is small and contexts are long.
"""
import functools

import torch

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_LOG2E = 1.4426950408889634


def _check(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, window=None, softcap=None) -> None:
    if window is not None and (not isinstance(window, int) or window <= 0):
        raise ValueError(f"window must be a positive int or None, got {window!r}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive or None, got {softcap!r}")
    if q.dim() != 3 or k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError(f"decode attention wants q [B, Hq, D] and k_cache = v_cache [slots, Hkv, D], got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}; pass one layer's "
                         f"buffer, pool.k_buffer[layer_id]")
    B, Hq, D = q.shape
    if k_cache.shape[2] != D or Hq % k_cache.shape[1]:
        raise ValueError(f"q heads/head_dim {Hq}/{D} do not fit the cache's {k_cache.shape[1]}/{k_cache.shape[2]}:"
                         f" head_dim must match and Hq must be a multiple of Hkv")
    if req_pool_indices.shape != (B,) or seq_lens.shape != (B,):
        raise ValueError(f"req_pool_indices and seq_lens must be [B] = [{B}], got {tuple(req_pool_indices.shape)} "
                         f"and {tuple(seq_lens.shape)}")
    if req_to_token.dim() != 2 or req_to_token.dtype != torch.int32:
        raise TypeError(f"req_to_token must be the [max_requests, max_context] int32 table, got "
                        f"{req_to_token.dtype} {tuple(req_to_token.shape)}")
    if q.dtype not in _DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError(f"q, k_cache, v_cache must share one of {_DTYPES}, got {q.dtype}, {k_cache.dtype}, "
                        f"{v_cache.dtype}; cast q with .to(k_cache.dtype)")
    devices = {t.device for t in (q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


def decode_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                           scale: float, out: torch.Tensor | None = None,
                           num_splits: int | None = None, workspace: tuple | None = None,
                           window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """Reference: gather each request's keys into a padded batch, softmax in fp32. `num_splits` and
    `workspace` (tuning knobs of the kernel) are ignored."""
    _check(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, window, softcap)
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    L = int(seq_lens.max()) if B else 0
    cols = torch.arange(L, device=q.device)
    valid = cols[None, :] < seq_lens[:, None]                                  # [B, L]
    slots = torch.where(valid, req_to_token[req_pool_indices, :L].long(), 0)   # [B, L]
    keep = valid[:, :, None, None]                                             # padding slot 0 may hold NaN
    keys = torch.where(keep, k_cache[slots].float(), 0).repeat_interleave(Hq // Hkv, dim=2)   # [B, L, Hq, D]
    values = torch.where(keep, v_cache[slots].float(), 0).repeat_interleave(Hq // Hkv, dim=2)
    scores = torch.einsum("bhd,blhd->bhl", q.float(), keys) * scale            # [B, Hq, L]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if window is not None:
        valid = valid & (cols[None, :] >= seq_lens[:, None] - window)
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    result = torch.einsum("bhl,blhd->bhd", scores.softmax(-1), values).to(q.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out


@functools.cache
def _kernels():
    global tl  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def decode_split_kernel(q_ptr, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens,
                            part_o, part_lse,
                            stride_qb, stride_qh, stride_cs, stride_ch, stride_rt,
                            stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
                            scale, scale_log2, G, D, NUM_SPLITS, SOFTCAP, WINDOW: tl.constexpr,
                            BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                            PRECISION: tl.constexpr, UPCAST: tl.constexpr, CAPPED: tl.constexpr):
        # grid: (B, Hkv, NUM_SPLITS). Rows of the tile are the G query heads of KV head `kvh` (padded to BLOCK_H).
        # The visible keys [lo, seq_len) (lo > 0 with a window, WINDOW > 0) are split, not all of them.
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(seq_lens + b).to(tl.int32)
        lo = 0
        if WINDOW > 0:
            lo = tl.maximum(seq_len - WINDOW, 0)
        split_len = tl.cdiv(tl.cdiv(seq_len - lo, NUM_SPLITS), BLOCK_N) * BLOCK_N   # whole blocks per split
        start = lo + split * split_len
        end = tl.minimum(start + split_len, seq_len)

        offs_h = tl.arange(0, BLOCK_H)
        heads = kvh * G + offs_h
        h_ok = offs_h < G
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        b64 = b.to(tl.int64)
        q = tl.load(q_ptr + b64 * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=h_ok[:, None] & d_ok[None, :], other=0.0)                          # [BLOCK_H, BLOCK_D]
        if UPCAST:  # the interpreter's bf16 tl.dot is wrong (triton 3.7): compute in fp32
            q = q.to(tl.float32)
        row = tl.load(req_pool_indices + b).to(tl.int64)
        kv_head = k_cache + kvh * stride_ch
        v_head = v_cache + kvh * stride_ch

        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)   # running max (log2 units)
        l_i = tl.zeros([BLOCK_H], tl.float32)                 # running sum of exp2
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            n_ok = offs_n < end
            slot = tl.load(req_to_token + row * stride_rt + offs_n, mask=n_ok, other=0).to(tl.int64)
            kv_ok = n_ok[:, None] & d_ok[None, :]
            # issue both gathers before any math: memory-bound, so keep as many bytes in flight as possible
            k = tl.load(kv_head + slot[:, None] * stride_cs + offs_d[None, :], mask=kv_ok, other=0.0)  # [N, D]
            v = tl.load(v_head + slot[:, None] * stride_cs + offs_d[None, :], mask=kv_ok, other=0.0)   # [N, D]
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION)                           # [BLOCK_H, BLOCK_N]
            if CAPPED:   # SOFTCAP * tanh(s / SOFTCAP) in log2 units, tanh(x) = 1 - 2 / (exp(2x) + 1)
                s = SOFTCAP * (1.0 - 2.0 / (tl.exp(2.0 * (s * scale) / SOFTCAP) + 1.0)) * 1.4426950408889634
            else:
                s = s * scale_log2
            s = tl.where(n_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

        if end > start:  # splits past the end of a short request stay empty; stage 2 skips them
            o_base = b64 * stride_pb + heads * stride_ph + split * stride_ps                 # [BLOCK_H]
            tl.store(part_o + o_base[:, None] + offs_d[None, :], acc / l_i[:, None],
                     mask=h_ok[:, None] & d_ok[None, :])
            tl.store(part_lse + b64 * stride_lb + heads * stride_lh + split, m_i + tl.log2(l_i), mask=h_ok)

    @triton.jit
    def decode_merge_kernel(part_o, part_lse, seq_lens, out,
                            stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
                            D, NUM_SPLITS, WINDOW: tl.constexpr,
                            BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
        # grid: (B, Hq). Weighted sum of the non-empty splits' outputs by exp2(lse - max lse).
        b = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        seq_len = tl.load(seq_lens + b).to(tl.int32)
        if WINDOW > 0:
            seq_len = tl.minimum(seq_len, WINDOW)          # the visible keys, as the split kernel counts them
        split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        used = tl.cdiv(seq_len, split_len)
        offs_s = tl.arange(0, BLOCK_S)
        s_ok = offs_s < used
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        lse = tl.load(part_lse + b * stride_lb + h * stride_lh + offs_s, mask=s_ok, other=float("-inf"))
        w = tl.exp2(lse - tl.max(lse, 0))
        w = tl.where(s_ok, w, 0.0)
        o = tl.load(part_o + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                    mask=s_ok[:, None] & d_ok[None, :], other=0.0)                           # [BLOCK_S, BLOCK_D]
        res = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)
        tl.store(out + b * stride_ob + h * stride_oh + offs_d, res.to(out.dtype.element_ty), mask=d_ok)

    return decode_split_kernel, decode_merge_kernel


def default_num_splits(batch_size: int, num_kv_heads: int, max_seq_len: int, device: torch.device) -> int:
    """Enough (request, KV head, split) programs for ~4 per SM (two resident, plus tail balance), each split at
    least 256 keys, at most 32 splits.
    Under the interpreter (CPU) every program costs Python time: at most 4 splits."""
    by_len = max(1, min(32, -(-max_seq_len // 256)))
    if device.type != "cuda":
        return min(by_len, 4)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    want = max(1, -(-4 * sms // max(1, batch_size * num_kv_heads)))
    return max(1, min(by_len, want))


def decode_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                            scale: float, out: torch.Tensor | None = None,
                            num_splits: int | None = None, workspace: tuple | None = None, *,
                            window: int | None = None, softcap: float | None = None,
                            block_n: int | None = None, num_warps: int | None = None,
                            num_stages: int = 2) -> torch.Tensor:
    """Triton flash-decoding; same contract as the reference. seq_lens[b] >= 1. `workspace` (from
    `decode_workspace`) lets a caller reuse the fp32 split buffers across layers. `block_n` (keys per step, a
    power of two >= 16), `num_warps` and `num_stages` are tuning knobs for bench/kernels.py. Returns `out`."""
    _check(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, window, softcap)
    if q.stride(2) != 1 or k_cache.stride(2) != 1 or v_cache.stride() != k_cache.stride():
        raise ValueError("decode attention needs head_dim contiguous in q and the caches (and both caches laid "
                         "out alike); call q.contiguous()")
    if req_to_token.stride(1) != 1:
        raise ValueError("req_to_token must have contiguous columns; call .contiguous()")
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
        raise ValueError(f"out must be a [B, Hq, D] {q.dtype} tensor with contiguous head_dim, got "
                         f"{out.dtype} {tuple(out.shape)}")
    if B == 0:
        return out
    if num_splits is None:
        num_splits = workspace[0].shape[2] if workspace is not None else \
            default_num_splits(B, Hkv, int(seq_lens.max()), q.device)
    part_o, part_lse = workspace if workspace is not None else decode_workspace(B, Hq, D, num_splits, q.device)
    if (part_o.shape[0] < B or part_o.shape[1:] != (Hq, num_splits, D) or part_lse.shape[1:] != (Hq, num_splits)
            or part_o.stride(3) != 1 or part_lse.stride(2) != 1):
        raise ValueError(f"workspace is for shape {tuple(part_o.shape)}, this call needs [>={B}, {Hq}, "
                         f"{num_splits}, {D}]; build it with decode_workspace(B, Hq, D, num_splits, device)")
    import triton
    split_kernel, merge_kernel = _kernels()
    G = Hq // Hkv
    block_d = triton.next_power_of_2(max(D, 16))  # tl.dot needs K >= 16
    block_n = block_n or (64 if q.is_cuda else 32)
    if num_warps is None:  # 4 warps on a [64, 128] tile need ~250 registers (2 CTAs/SM); 8 warps ~120
        num_warps = 8 if block_n * block_d >= 8192 else 4
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    split_kernel[(B, Hkv, num_splits)](
        q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, part_o, part_lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), req_to_token.stride(0),
        part_o.stride(0), part_o.stride(1), part_o.stride(2), part_lse.stride(0), part_lse.stride(1),
        scale, scale * _LOG2E, G, D, num_splits, float(softcap or 1.0), window or 0,
        BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_D=block_d, BLOCK_N=block_n, PRECISION=precision,
        UPCAST=not q.is_cuda, CAPPED=softcap is not None, num_warps=num_warps, num_stages=num_stages)
    merge_kernel[(B, Hq)](
        part_o, part_lse, seq_lens, out,
        part_o.stride(0), part_o.stride(1), part_o.stride(2), part_lse.stride(0), part_lse.stride(1),
        out.stride(0), out.stride(1), D, num_splits, window or 0,
        BLOCK_S=max(2, triton.next_power_of_2(num_splits)), BLOCK_D=block_d, BLOCK_N=block_n)
    return out


def decode_workspace(batch_size: int, num_q_heads: int, head_dim: int, num_splits: int,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 split outputs [B, Hq, S, D] and log2-sum-exps [B, Hq, S] for `decode_attention_triton`."""
    return (torch.empty((batch_size, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=device),
            torch.empty((batch_size, num_q_heads, num_splits), dtype=torch.float32, device=device))


__all__ = ["decode_attention_torch", "decode_attention_triton", "decode_workspace", "default_num_splits"]

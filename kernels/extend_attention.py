"""Extend attention: each request's new tokens attend to its cached prefix (paged pool) and causally to each other.

Covers prefill (empty prefix), prefill after a prefix-cache hit, and chunked prefill, in one kernel.
Layout:
    q:                [T, Hq, D]            new tokens of every request, request-major (ForwardBatch order)
    k, v:             [T, Hkv, D]           the same tokens' K/V (may be strided views, head_dim contiguous)
    k_cache, v_cache: [num_slots, Hkv, D]   one layer's pool buffers, holding each request's prefix
    req_to_token:     [max_requests, max_context] int32; prefix of request b = row req_pool_indices[b],
                      columns :prefix_lens[b]
    prefix_lens, extend_lens: [B]; sum(extend_lens) == T
    out:              [T, Hq, D]            new token i of request b sees keys at positions <= prefix_lens[b] + i
    window:           None, or a query at position p sees only keys at positions > p - window (sliding window)
    softcap:          None, or each scaled score s becomes softcap * tanh(s / softcap) before the softmax

One program handles BLOCK_M new tokens of one (request, query head): first the prefix keys gathered through
req_to_token (no mask but the length), then the request's new keys read contiguously from k/v up to the causal
diagonal. Online softmax in fp32.
"""
import functools

import torch

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_LOG2E = 1.4426950408889634


def _check(q, k, v, k_cache, v_cache, req_to_token, req_pool_indices, prefix_lens, extend_lens) -> None:
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError(f"extend attention wants q [T, Hq, D], k = v [T, Hkv, D], k_cache = v_cache "
                         f"[slots, Hkv, D], got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, "
                         f"{tuple(k_cache.shape)}, {tuple(v_cache.shape)}; pass one layer's pool.k_buffer[layer_id]")
    T, Hq, D = q.shape
    if k.shape[0] != T or k.shape[1:] != k_cache.shape[1:] or k.shape[2] != D or Hq % k.shape[1]:
        raise ValueError(f"shapes disagree: q {tuple(q.shape)}, k {tuple(k.shape)}, cache {tuple(k_cache.shape)}:"
                         f" k needs q's T and head_dim and the cache's heads; Hq must be a multiple of Hkv")
    B = req_pool_indices.shape[0]
    if req_pool_indices.dim() != 1 or prefix_lens.shape != (B,) or extend_lens.shape != (B,):
        raise ValueError(f"req_pool_indices, prefix_lens, extend_lens must all be [B], got "
                         f"{tuple(req_pool_indices.shape)}, {tuple(prefix_lens.shape)}, {tuple(extend_lens.shape)}")
    if req_to_token.dim() != 2 or req_to_token.dtype != torch.int32:
        raise TypeError(f"req_to_token must be the [max_requests, max_context] int32 table, got "
                        f"{req_to_token.dtype} {tuple(req_to_token.shape)}")
    dtypes = {t.dtype for t in (q, k, v, k_cache, v_cache)}
    if len(dtypes) != 1 or q.dtype not in _DTYPES:
        raise TypeError(f"q, k, v and the caches must share one of {_DTYPES}, got {sorted(map(str, dtypes))}; "
                        f"cast with .to(k_cache.dtype)")
    devices = {t.device for t in (q, k, v, k_cache, v_cache, req_to_token, req_pool_indices, prefix_lens,
                                  extend_lens)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


def _check_window(window, softcap) -> None:
    if window is not None and (not isinstance(window, int) or window <= 0):
        raise ValueError(f"window must be a positive int or None, got {window!r}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive or None, got {softcap!r}")


def extend_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                           prefix_lens: torch.Tensor, extend_lens: torch.Tensor, scale: float,
                           out: torch.Tensor | None = None, max_extend: int | None = None,
                           window: int | None = None, softcap: float | None = None) -> torch.Tensor:
    """Reference: one request at a time, prefix keys from the pool then the new keys, fp32 softmax.
    `max_extend` (a kernel hint) is ignored."""
    _check(q, k, v, k_cache, v_cache, req_to_token, req_pool_indices, prefix_lens, extend_lens)
    _check_window(window, softcap)
    T, Hq, D = q.shape
    G = Hq // k.shape[1]
    result = torch.empty_like(q)
    start = 0
    for row, p, e in zip(req_pool_indices.tolist(), prefix_lens.tolist(), extend_lens.tolist()):
        slots = req_to_token[row, :p].long()
        keys = torch.cat([k_cache[slots], k[start:start + e]]).float().repeat_interleave(G, dim=1)  # [p+e, Hq, D]
        values = torch.cat([v_cache[slots], v[start:start + e]]).float().repeat_interleave(G, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q[start:start + e].float(), keys) * scale          # [Hq, e, p+e]
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        q_pos, k_pos = p + torch.arange(e)[:, None], torch.arange(p + e)[None, :]
        causal = k_pos <= q_pos                                                                  # [e, p+e]
        if window is not None:
            causal &= k_pos > q_pos - window
        scores = scores.masked_fill(~causal.to(q.device), float("-inf"))
        result[start:start + e] = torch.einsum("hij,jhd->ihd", scores.softmax(-1), values).to(q.dtype)
        start += e
    if out is None:
        return result
    out.copy_(result)
    return out


@functools.cache
def _kernel():
    global tl, _scores  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def _scores(q, k, scale, scale_log2, SOFTCAP, PRECISION: tl.constexpr, CAPPED: tl.constexpr):
        """q [M, D] . k [N, D]^T scaled (capped: SOFTCAP * tanh(s / SOFTCAP)), in log2 units."""
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if CAPPED:   # tanh(x) = 1 - 2 / (exp(2x) + 1)
            return SOFTCAP * (1.0 - 2.0 / (tl.exp(2.0 * (s * scale) / SOFTCAP) + 1.0)) * 1.4426950408889634
        return s * scale_log2

    @triton.jit
    def extend_kernel(q_ptr, k_ptr, v_ptr, out_ptr, k_cache, v_cache, req_to_token, req_pool_indices,
                      prefix_lens, extend_lens, extend_starts,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                      stride_cs, stride_ch, stride_rt,
                      scale, scale_log2, G, D, SOFTCAP, WINDOW: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      PRECISION: tl.constexpr, UPCAST: tl.constexpr, CAPPED: tl.constexpr):
        # grid: (B, Hq, cdiv(max_extend, BLOCK_M))
        b = tl.program_id(0)
        h = tl.program_id(1)
        mb = tl.program_id(2)
        ext = tl.load(extend_lens + b).to(tl.int32)
        if mb * BLOCK_M < ext:
            pre = tl.load(prefix_lens + b).to(tl.int32)
            first = tl.load(extend_starts + b).to(tl.int64)   # index of the request's first new token in [T]
            row = tl.load(req_pool_indices + b).to(tl.int64)
            kvh = h // G
            offs_m = mb * BLOCK_M + tl.arange(0, BLOCK_M)     # new-token index within the request
            m_ok = offs_m < ext
            offs_d = tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            q = tl.load(q_ptr + (first + offs_m)[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                        mask=m_ok[:, None] & d_ok[None, :], other=0.0)                      # [BLOCK_M, BLOCK_D]
            if UPCAST:  # the interpreter's bf16 tl.dot is wrong (triton 3.7): compute in fp32
                q = q.to(tl.float32)

            m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M], tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
            # 1) the cached prefix, through the request's slots: every new token sees all of it (with a window,
            #    the keys after its position - WINDOW; blocks before this block's first visible key are skipped)
            lo = 0
            if WINDOW > 0:
                lo = tl.maximum(pre + mb * BLOCK_M - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
            for n0 in range(lo, pre, BLOCK_N):
                offs_n = n0 + tl.arange(0, BLOCK_N)
                n_ok = offs_n < pre
                slot = tl.load(req_to_token + row * stride_rt + offs_n, mask=n_ok, other=0).to(tl.int64)
                kv_ok = n_ok[:, None] & d_ok[None, :]
                k = tl.load(k_cache + slot[:, None] * stride_cs + kvh * stride_ch + offs_d[None, :], mask=kv_ok,
                            other=0.0)                                                      # [BLOCK_N, BLOCK_D]
                v = tl.load(v_cache + slot[:, None] * stride_cs + kvh * stride_ch + offs_d[None, :], mask=kv_ok,
                            other=0.0)
                if UPCAST:
                    k = k.to(tl.float32)
                    v = v.to(tl.float32)
                s = _scores(q, k, scale, scale_log2, SOFTCAP, PRECISION, CAPPED)
                seen = n_ok[None, :]
                if WINDOW > 0:
                    seen = seen & (offs_n[None, :] > pre + offs_m[:, None] - WINDOW)
                s = tl.where(seen, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows that see no key yet
                alpha = tl.exp2(m_i - m_safe)
                p = tl.exp2(s - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
                m_i = m_new
            # 2) the new tokens themselves, causally, up to this block's last row. Each row sees its own key,
            #    so no row stays all -inf and l_i > 0 at the end.
            hi = tl.minimum(ext, (mb + 1) * BLOCK_M)
            lo = 0
            if WINDOW > 0:
                lo = tl.maximum(mb * BLOCK_M - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
            for n0 in range(lo, hi, BLOCK_N):
                offs_n = n0 + tl.arange(0, BLOCK_N)
                n_ok = offs_n < ext
                kv_ok = n_ok[:, None] & d_ok[None, :]
                k = tl.load(k_ptr + (first + offs_n)[:, None] * stride_kt + kvh * stride_kh + offs_d[None, :],
                            mask=kv_ok, other=0.0)                                          # [BLOCK_N, BLOCK_D]
                v = tl.load(v_ptr + (first + offs_n)[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :],
                            mask=kv_ok, other=0.0)
                if UPCAST:
                    k = k.to(tl.float32)
                    v = v.to(tl.float32)
                s = _scores(q, k, scale, scale_log2, SOFTCAP, PRECISION, CAPPED)
                seen = n_ok[None, :] & (offs_n[None, :] <= offs_m[:, None])
                if WINDOW > 0:
                    seen = seen & (offs_n[None, :] > offs_m[:, None] - WINDOW)
                s = tl.where(seen, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp2(m_i - m_safe)
                p = tl.exp2(s - m_safe[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
                m_i = m_new
            o = acc / l_i[:, None]
            tl.store(out_ptr + (first + offs_m)[:, None] * stride_ot + h * stride_oh + offs_d[None, :],
                     o.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])

    return extend_kernel


def extend_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                            v_cache: torch.Tensor, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                            prefix_lens: torch.Tensor, extend_lens: torch.Tensor, scale: float,
                            out: torch.Tensor | None = None, max_extend: int | None = None,
                            extend_starts: torch.Tensor | None = None, *, window: int | None = None,
                            softcap: float | None = None, block_m: int | None = None,
                            block_n: int | None = None, num_warps: int | None = None,
                            num_stages: int = 2) -> torch.Tensor:
    """Triton kernel; same contract as the reference. Pass `max_extend` (a Python int) and `extend_starts`
    (exclusive cumsum of extend_lens) when known, to avoid a device sync and recomputation. `block_m`, `block_n`
    (powers of two >= 16), `num_warps`, `num_stages` are tuning knobs for bench/kernels.py. Returns `out`."""
    _check(q, k, v, k_cache, v_cache, req_to_token, req_pool_indices, prefix_lens, extend_lens)
    _check_window(window, softcap)
    if any(t.stride(2) != 1 for t in (q, k, v, k_cache, v_cache)) or k_cache.stride() != v_cache.stride():
        raise ValueError("extend attention needs head_dim contiguous in q, k, v and the caches (and both caches "
                         "laid out alike); call .contiguous()")
    if req_to_token.stride(1) != 1:
        raise ValueError("req_to_token must have contiguous columns; call .contiguous()")
    T, Hq, D = q.shape
    B = req_pool_indices.shape[0]
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
        raise ValueError(f"out must be a [T, Hq, D] {q.dtype} tensor with contiguous head_dim, got "
                         f"{out.dtype} {tuple(out.shape)}")
    if T == 0 or B == 0:
        return out
    if max_extend is None:
        max_extend = int(extend_lens.max())
    if extend_starts is None:
        extend_starts = torch.cumsum(extend_lens, 0) - extend_lens
    import triton
    block_d = triton.next_power_of_2(max(D, 16))
    if q.is_cuda:
        # sm_90 + bf16 (ptxas): D=128 at 64/64/4 warps needs ~230 registers; 128/64/8 warps ~210, FA2's usual
        bm, bn, warps = (64, 64, 4) if block_d <= 64 else (128, 64, 8)
        if q.dtype == torch.float32:  # ieee fp32 dots run on FMAs in registers: 64-row tiles spill
            bm, bn, warps = 32, 32, 4
    else:  # interpreter: few, larger programs are what cost least
        bm, bn, warps = 16, 32, 1
    block_m, block_n, num_warps = block_m or bm, block_n or bn, num_warps or warps
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    _kernel()[(B, Hq, triton.cdiv(max_extend, block_m))](
        q, k, v, out, k_cache, v_cache, req_to_token, req_pool_indices, prefix_lens, extend_lens, extend_starts,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), req_to_token.stride(0),
        scale, scale * _LOG2E, Hq // k.shape[1], D, float(softcap or 1.0), window or 0,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, PRECISION=precision,
        UPCAST=not q.is_cuda, CAPPED=softcap is not None, num_warps=num_warps, num_stages=num_stages)
    return out


__all__ = ["extend_attention_torch", "extend_attention_triton"]

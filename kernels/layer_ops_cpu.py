"""A decoder layer's small ops fused for the CPU (numba), for bfloat16 activations: most of what is left of a layer
once the four matmuls are taken out, in three calls instead of ~12 eager ops (each ~2-5 µs of dispatch on a small
pass, against a few hundred nanoseconds of arithmetic). SiLU(gate) * up stays two torch ops: torch's vectorised
exp is what a long prefill needs, and a kernel of ours would round a few values differently.

    add_rms_norm(h, add, w, eps, out)     h += add (bf16, widened exactly), then out = bf16(rms_norm(h) * w)
    rope_store(qkv, cos, sin, q_out, k_cache, v_cache, slots)
                                          rotary on Q and K (half-split layout, float32), Q out as float32 holding
                                          bf16-rounded values, K (rotated) and V written to the pool at `slots`

Each function beside it named `*_ref` is its torch reference (the eager layer's ops, in the same order and
rounding); the tests hold the kernels to it. Shapes: T rows; bfloat16 tensors travel as their int16 bits
(`bits()`), float32 as themselves. Rounding float32 -> bfloat16 is round-to-nearest-even, as torch's.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

try:
    import numba
except ImportError:   # optional: the model falls back to its eager ops
    numba = None


def available() -> bool:
    return numba is not None


def bits(t: torch.Tensor) -> np.ndarray:
    """A bfloat16 tensor's int16 bits as a numpy view of the same memory."""
    return t.view(torch.int16).numpy()


if numba is not None:
    # float32 <-> bfloat16 bits go through a float32 scratch row and its uint32 view (numba has no scalar bit
    # casts); bfloat16 is the top half of a float32, rounded to nearest even
    @numba.njit(inline="always")
    def _round_bf16(u):
        return np.int16(np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)))

    @numba.njit(inline="always")
    def _widen(b):
        return np.uint32(np.uint16(b)) << np.uint32(16)

    @numba.njit(fastmath=True, cache=True)
    def _add_rms_norm(h, add, w, eps, out, with_add):
        # h [T, H] float32 (updated in place when with_add), add [T, H] bf16 bits, w [H] float32, out [T, H] bits
        T, H = h.shape
        tmp = np.empty(H, np.float32)
        tb = tmp.view(np.uint32)
        for t in range(T):
            if with_add:
                for i in range(H):
                    tb[i] = _widen(add[t, i])
                for i in range(H):
                    h[t, i] += tmp[i]
            ss = np.float32(0.0)
            for i in range(H):
                ss += h[t, i] * h[t, i]
            r = np.float32(1.0) / np.sqrt(ss / np.float32(H) + eps)
            for i in range(H):
                tmp[i] = h[t, i] * r * w[i]
            for i in range(H):
                out[t, i] = _round_bf16(tb[i])

    @numba.njit(cache=True)
    def _rope_store(qkv, cos, sin, Hq, Hk, D, q_out, k_cache, v_cache, slots):
        # qkv [T, (Hq + 2 Hk) D] bf16 bits; cos/sin [T, D] float32; q_out [T, Hq, D] float32;
        # k_cache/v_cache [S, Hk, D] bf16 bits; slots [T] int64. No fastmath: each product is rounded as torch's.
        T = qkv.shape[0]
        half = D // 2
        x = np.empty(D, np.float32)
        xb = x.view(np.uint32)
        y = np.empty(D, np.float32)
        yb = y.view(np.uint32)
        for t in range(T):
            for h in range(Hq + Hk):
                base = h * D
                for d in range(D):
                    xb[d] = _widen(qkv[t, base + d])
                for d in range(half):
                    y[d] = x[d] * cos[t, d] + (-x[d + half]) * sin[t, d]
                for d in range(half, D):
                    y[d] = x[d] * cos[t, d] + x[d - half] * sin[t, d]
                if h < Hq:
                    for d in range(D):
                        yb[d] = _widen(_round_bf16(yb[d]))
                    for d in range(D):
                        q_out[t, h, d] = y[d]
                else:
                    for d in range(D):
                        k_cache[slots[t], h - Hq, d] = _round_bf16(yb[d])
            vbase = (Hq + Hk) * D
            for h in range(Hk):
                for d in range(D):
                    v_cache[slots[t], h, d] = qkv[t, vbase + h * D + d]


# The kernels over numpy arrays, unchecked (bf16 as bits(); float32 as t.numpy()), for a caller that makes the
# views once per pass: each torch -> numpy view costs about as much as the kernel's arithmetic on one row.
add_rms_norm_kernel = _add_rms_norm if numba is not None else None     # (h, add, w, eps, out, with_add)
rope_store_kernel = _rope_store if numba is not None else None         # (qkv, cos, sin, Hq, Hk, D, q_out, k, v, slots)


# --- entry points over torch tensors (checked once by the caller: CPU, contiguous, the dtypes below) ---------
def add_rms_norm(h: torch.Tensor, add: torch.Tensor | None, w: torch.Tensor, eps: float,
                 out: torch.Tensor) -> torch.Tensor:
    """h [T, H] float32 (h += add in place when add is given), add [T, H] bf16, w [H] float32 -> out [T, H]
    bf16 (written and returned)."""
    a = bits(add) if add is not None else np.empty((0, 0), np.int16)
    _add_rms_norm(h.numpy(), a, w.numpy(), np.float32(eps), bits(out), add is not None)
    return out


def add_rms_norm_ref(h, add, w, eps, out):
    if add is not None:
        h += add
    out.copy_(F.rms_norm(h, (h.shape[-1],), w, eps).to(out.dtype))
    return out


def rope_store(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int, num_kv_heads: int,
               q_out: torch.Tensor, k_cache: np.ndarray, v_cache: np.ndarray, slots: torch.Tensor) -> torch.Tensor:
    """qkv [T, (Hq + 2 Hkv) D] bf16; cos/sin [T, D] float32 (full rotary); q_out [T, Hq, D] float32; k_cache /
    v_cache: one layer's pool buffers as bits(); slots [T] int64. Returns q_out."""
    D = q_out.shape[-1]
    _rope_store(bits(qkv), cos.numpy(), sin.numpy(), num_heads, num_kv_heads, D, q_out.numpy(), k_cache, v_cache,
                slots.numpy())
    return q_out


def rope_store_ref(qkv, cos, sin, num_heads, num_kv_heads, q_out, k_buffer, v_buffer, slots):
    """The eager layer's ops; k_buffer/v_buffer are the pool's bf16 tensors."""
    T, D = qkv.shape[0], q_out.shape[-1]
    qk = qkv[:, :(num_heads + num_kv_heads) * D].view(T, num_heads + num_kv_heads, D)
    half = D // 2
    c, s = cos[:, None, :], sin[:, None, :]
    qk = (qk * c + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * s).to(torch.bfloat16)
    q_out.copy_(qk[:, :num_heads])
    k_buffer.index_copy_(0, slots, qk[:, num_heads:])
    v_buffer.index_copy_(0, slots, qkv[:, (num_heads + num_kv_heads) * D:].view(T, num_kv_heads, D))
    return q_out

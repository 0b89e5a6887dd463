"""A decoder layer's small ops fused for the CPU (numba), for bfloat16 activations: most of what is left of a layer
once the four matmuls are taken out, in four calls instead of ~15 eager ops (each ~2-5 µs of dispatch on a small
pass, against a few hundred nanoseconds of arithmetic).

    add_rms_norm(h, add, w, eps, out)     h += add (bf16, widened exactly), then out = bf16(rms_norm(h) * w)
    rope_store(qkv, cos, sin, q_out, k_cache, v_cache, slots)
                                          rotary on Q and K (half-split layout, float32), Q out as float32 holding
                                          bf16-rounded values, K (rotated) and V written to the pool at `slots`
    post_add_rms_norm(h, add, post_w, w, eps, out)
                                          Gemma 2/3's sandwich: h += rms_norm(add) * post_w (float32), then
                                          out = bf16(rms_norm(h) * w) (out None: h only)
    qk_norm_rope_store(qkv, cos, sin, q_w, k_w, eps, q_out, k_cache, v_cache, slots)
                                          rope_store with Qwen3's and Gemma 3's per-head RMSNorm of Q and K first
                                          (bf16 in and out, rounded once, as torch's rms_norm of bf16)
    silu_mul(gate_up, out, lo)            out = bf16(bf16(silu(gate)) * up) for rows lo.., as torch's two ops
                                          round (its exp is ours, not torch's: equal bf16 results on the tests'
                                          2M values, gates from N(0, 1) to N(0, 200^2)). The model runs it on
                                          decode rows only (a row's phase, never the pass's size, picks it):
                                          ~10 µs a row against ~24 for the eager ops, but about half torch's
                                          speed per row on a long prefill, whose rows keep torch's ops.

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

    @numba.njit(fastmath=True, cache=True, error_model="numpy")
    def _post_add_rms_norm(h, add, post_w, w, eps, out):
        # Gemma 2/3's sandwich: h += rms_norm(add) * post_w (float32), then out = bf16(rms_norm(h) * w).
        # h [T, H] float32 (updated in place), add [T, H] bf16 bits, post_w / w [H] float32, out [T, H] bits
        # (no rows: h is only updated)
        T, H = h.shape
        tmp = np.empty(H, np.float32)
        tb = tmp.view(np.uint32)
        for t in range(T):
            for i in range(H):
                tb[i] = _widen(add[t, i])
            ss = np.float32(0.0)
            for i in range(H):
                ss += tmp[i] * tmp[i]
            r = np.float32(1.0) / np.sqrt(ss / np.float32(H) + eps)
            for i in range(H):
                h[t, i] += tmp[i] * r * post_w[i]
            if out.shape[0] == 0:
                continue
            ss = np.float32(0.0)
            for i in range(H):
                ss += h[t, i] * h[t, i]
            r = np.float32(1.0) / np.sqrt(ss / np.float32(H) + eps)
            for i in range(H):
                tmp[i] = h[t, i] * r * w[i]
            for i in range(H):
                out[t, i] = _round_bf16(tb[i])

    @numba.njit(fastmath=True, inline="always")
    def _inv_rms(x, D, eps):
        ss = np.float32(0.0)
        for d in range(D):
            ss += x[d] * x[d]
        return np.float32(1.0) / np.sqrt(ss / np.float32(D) + eps)

    @numba.njit(inline="always")
    def _rotate_store(x, y, yb, cos, sin, t, h, Hq, D, q_out, k_cache, slot):
        # rotates head h of token t (x [D] float32, its bf16 values widened) into y, then writes a Q head to
        # q_out as float32 of its bf16 rounding, a K head to k_cache[slot] as bf16 bits
        half = D // 2
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
                k_cache[slot, h - Hq, d] = _round_bf16(yb[d])

    @numba.njit(inline="always")
    def _store_v(qkv, t, Hq, Hk, D, v_cache, slot):
        # the V heads of token t, bf16 bits as the projection wrote them
        vbase = (Hq + Hk) * D
        for h in range(Hk):
            for d in range(D):
                v_cache[slot, h, d] = qkv[t, vbase + h * D + d]

    @numba.njit(cache=True, error_model="numpy")
    def _qk_norm_rope_store(qkv, cos, sin, Hq, Hk, D, q_w, k_w, eps, q_out, k_cache, v_cache, slots):
        # _rope_store with Qwen3's and Gemma 3's per-head RMSNorm first: each Q (K) head becomes
        # bf16(x * rms(x) * q_w) (k_w), as torch's rms_norm of a bf16 tensor rounds once, then rotates.
        # q_w / k_w [D] float32 (the bf16 norm weights, widened)
        T = qkv.shape[0]
        x = np.empty(D, np.float32)
        xb = x.view(np.uint32)
        y = np.empty(D, np.float32)
        yb = y.view(np.uint32)
        for t in range(T):
            for h in range(Hq + Hk):
                base = h * D
                for d in range(D):
                    xb[d] = _widen(qkv[t, base + d])
                r = _inv_rms(x, D, eps)
                nw = q_w if h < Hq else k_w
                for d in range(D):
                    y[d] = x[d] * r * nw[d]
                for d in range(D):
                    xb[d] = _widen(_round_bf16(yb[d]))
                _rotate_store(x, y, yb, cos, sin, t, h, Hq, D, q_out, k_cache, slots[t])
            _store_v(qkv, t, Hq, Hk, D, v_cache, slots[t])

    @numba.njit(cache=True)
    def _rope_store(qkv, cos, sin, Hq, Hk, D, q_out, k_cache, v_cache, slots):
        # qkv [T, (Hq + 2 Hk) D] bf16 bits; cos/sin [T, D] float32; q_out [T, Hq, D] float32;
        # k_cache/v_cache [S, Hk, D] bf16 bits; slots [T] int64. No fastmath: each product is rounded as torch's.
        T = qkv.shape[0]
        x = np.empty(D, np.float32)
        xb = x.view(np.uint32)
        y = np.empty(D, np.float32)
        yb = y.view(np.uint32)
        for t in range(T):
            for h in range(Hq + Hk):
                base = h * D
                for d in range(D):
                    xb[d] = _widen(qkv[t, base + d])
                _rotate_store(x, y, yb, cos, sin, t, h, Hq, D, q_out, k_cache, slots[t])
            _store_v(qkv, t, Hq, Hk, D, v_cache, slots[t])

    @numba.njit(cache=True)
    def _silu_mul(gu, out, lo):
        # gu [T, 2F] bf16 bits (gate | up, as the fused gate/up projection writes them); out [T, F] bf16 bits,
        # rows lo.. written. No fastmath: each step rounds as torch's silu then mul do (in float32, then bf16).
        # exp(-g) is ours, in loops the compiler vectorises: Cody-Waite reduction to 2^k e^r, |r| <= ln2 / 2, and
        # Cephes expf's polynomial (about 1 ulp in float32, as torch's vectorised exp); 2^k goes into the
        # exponent bits as 2^(k-1), then times 2, so k = 128 (x near ln FLT_MAX) does not overflow the field;
        # past ln FLT_MAX the exp is inf, as torch's (silu -> -0).
        T = gu.shape[0]
        F = gu.shape[1] // 2
        g = np.empty(F, np.float32)
        gb = g.view(np.uint32)
        u = np.empty(F, np.float32)
        ub = u.view(np.uint32)
        e = np.empty(F, np.float32)
        eb = e.view(np.int32)
        k = np.empty(F, np.float32)
        inf = np.empty(F, np.bool_)
        for t in range(lo, T):
            for i in range(F):
                gb[i] = _widen(gu[t, i])
                ub[i] = _widen(gu[t, F + i])
            for i in range(F):
                x0 = -g[i]
                x = min(max(x0, np.float32(-87.0)), np.float32(88.72283))
                n = np.floor(x * np.float32(1.44269504) + np.float32(0.5))
                r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
                p = np.float32(1.9875691500e-4)
                p = p * r + np.float32(1.3981999507e-3)
                p = p * r + np.float32(8.3334519073e-3)
                p = p * r + np.float32(4.1665795894e-2)
                p = p * r + np.float32(1.6666665459e-1)
                p = p * r + np.float32(5.0000001201e-1)
                e[i] = p * r * r + r + np.float32(1.0)
                k[i] = n
                inf[i] = x0 > np.float32(88.72283)
            for i in range(F):
                eb[i] += (np.int32(k[i]) - np.int32(1)) << 23
            for i in range(F):
                g[i] = g[i] / (np.float32(1.0) + (np.float32(np.inf) if inf[i] else e[i] * np.float32(2.0)))
            for i in range(F):
                gb[i] = _widen(_round_bf16(gb[i]))
            for i in range(F):
                g[i] = g[i] * u[i]
            for i in range(F):
                out[t, i] = _round_bf16(gb[i])


# The kernels over numpy arrays, unchecked (bf16 as bits(); float32 as t.numpy()), for a caller that makes the
# views once per pass: each torch -> numpy view costs about as much as the kernel's arithmetic on one row.
add_rms_norm_kernel = _add_rms_norm if numba is not None else None     # (h, add, w, eps, out, with_add)
rope_store_kernel = _rope_store if numba is not None else None         # (qkv, cos, sin, Hq, Hk, D, q_out, k, v, slots)
silu_mul_kernel = _silu_mul if numba is not None else None             # (gate_up, out, lo)
post_add_rms_norm_kernel = _post_add_rms_norm if numba is not None else None   # (h, add, post_w, w, eps, out)
qk_norm_rope_store_kernel = _qk_norm_rope_store if numba is not None else None
#                                            (qkv, cos, sin, Hq, Hk, D, q_w, k_w, eps, q_out, k, v, slots)


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


def post_add_rms_norm(h: torch.Tensor, add: torch.Tensor, post_w: torch.Tensor, w: torch.Tensor, eps: float,
                      out: torch.Tensor | None) -> torch.Tensor:
    """h [T, H] float32 += rms_norm(add [T, H] bf16) * post_w, in place; then out [T, H] bf16 = rms_norm(h) * w
    (written and returned; None: h only). post_w, w [H] float32."""
    o = bits(out) if out is not None else np.empty((0, 0), np.int16)
    _post_add_rms_norm(h.numpy(), bits(add), post_w.numpy(), w.numpy(), np.float32(eps), o)
    return out if out is not None else h


def post_add_rms_norm_ref(h, add, post_w, w, eps, out):
    h += F.rms_norm(add.float(), (h.shape[-1],), post_w, eps)
    if out is None:
        return h
    out.copy_(F.rms_norm(h, (h.shape[-1],), w, eps).to(out.dtype))
    return out


def qk_norm_rope_store(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int,
                       num_kv_heads: int, q_w: torch.Tensor, k_w: torch.Tensor, eps: float, q_out: torch.Tensor,
                       k_cache: np.ndarray, v_cache: np.ndarray, slots: torch.Tensor) -> torch.Tensor:
    """rope_store() with each Q and K head RMS-normed first (q_w, k_w [D] bf16 weights). Returns q_out."""
    D = q_out.shape[-1]
    _qk_norm_rope_store(bits(qkv), cos.numpy(), sin.numpy(), num_heads, num_kv_heads, D, q_w.float().numpy(),
                        k_w.float().numpy(), np.float32(eps), q_out.numpy(), k_cache, v_cache, slots.numpy())
    return q_out


def qk_norm_rope_store_ref(qkv, cos, sin, num_heads, num_kv_heads, q_w, k_w, eps, q_out, k_buffer, v_buffer,
                           slots):
    """The eager layer's ops (runtime/model.py's q/k-norm branch); k_buffer/v_buffer are the pool's tensors."""
    T, D = qkv.shape[0], q_out.shape[-1]
    q = F.rms_norm(qkv[:, :num_heads * D].view(T, num_heads, D), (D,), q_w, eps)
    k = F.rms_norm(qkv[:, num_heads * D:(num_heads + num_kv_heads) * D].view(T, num_kv_heads, D), (D,), k_w, eps)
    normed = torch.cat([q, k], 1).reshape(T, -1)
    return rope_store_ref(torch.cat([normed, qkv[:, (num_heads + num_kv_heads) * D:]], 1), cos, sin, num_heads,
                          num_kv_heads, q_out, k_buffer, v_buffer, slots)


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


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor, lo: int = 0) -> torch.Tensor:
    """gate_up [T, 2F] bf16 (gate then up) -> out [T, F] bf16, rows lo.. written (the others left as they are).
    Returns out."""
    _silu_mul(bits(gate_up), bits(out), lo)
    return out


def silu_mul_ref(gate_up, out, lo=0):
    gate, up = gate_up[lo:].chunk(2, dim=-1)
    torch.mul(F.silu(gate), up, out=out[lo:])
    return out

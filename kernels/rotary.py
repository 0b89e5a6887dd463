"""Rotary position embedding for q and k in one pass, in place (half-split layout, as sglite.runtime.model).

    q: [T, Hq, D], k: [T, Hkv, D]   rows may be strided (views of a fused QKV), head_dim contiguous, D even
    cos, sin: [max_positions, D]    the model's tables (second half repeats the first)
    positions: [T] int64
    x[..., :D/2], x[..., D/2:] = x1 * c - x2 * s, x2 * c + x1 * s   with c, s = cos/sin[pos, :D/2]

Not wired into the model yet: bench/kernels.py measures it against torch first.
"""
import functools

import torch


def _check(q, k, cos, sin, positions) -> None:
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[2] % 2:
        raise ValueError(f"rotary wants q [T, Hq, D] and k [T, Hkv, D] with the same T and an even D, got "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    if cos.dim() != 2 or cos.shape != sin.shape or cos.shape[1] != q.shape[2]:
        raise ValueError(f"cos and sin must be [max_positions, {q.shape[2]}] tables, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    if positions.shape != (q.shape[0],) or positions.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"positions must be [{q.shape[0]}] int64, got {positions.dtype} {tuple(positions.shape)}")
    if len({t.device for t in (q, k, cos, sin, positions)}) != 1:
        raise ValueError("q, k, cos, sin, positions must be on one device; move them with .to(q.device)")
    if k.dtype != q.dtype:
        raise TypeError(f"q and k dtypes differ ({q.dtype}, {k.dtype}); cast k with .to(q.dtype)")


def apply_rotary_torch(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference. Mutates q and k; returns them."""
    _check(q, k, cos, sin, positions)
    half = q.shape[2] // 2
    c = cos[positions, :half].float()[:, None, :]                  # [T, 1, D/2]
    s = sin[positions, :half].float()[:, None, :]
    for x in (q, k):
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        x[..., :half], x[..., half:] = (x1 * c - x2 * s).to(x.dtype), (x2 * c + x1 * s).to(x.dtype)
    return q, k


@functools.cache
def _kernel():
    global tl  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def rotary_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, stride_t, stride_h, stride_c, H, HALF,
                      BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
        # grid: (T,); one program rotates all heads of one token (launched once for q, once for k)
        t = tl.program_id(0).to(tl.int64)
        pos = tl.load(pos_ptr + t).to(tl.int64)
        j = tl.arange(0, BLOCK_HALF)
        h = tl.arange(0, BLOCK_H)
        j_ok = j < HALF
        c = tl.load(cos_ptr + pos * stride_c + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
        s = tl.load(sin_ptr + pos * stride_c + j, mask=j_ok, other=0.0).to(tl.float32)[None, :]
        ok = (h[:, None] < H) & j_ok[None, :]
        p1 = x_ptr + t * stride_t + h[:, None] * stride_h + j[None, :]           # first halves [BLOCK_H, HALF]
        x1 = tl.load(p1, mask=ok, other=0.0)
        x2 = tl.load(p1 + HALF, mask=ok, other=0.0)
        x1f, x2f = x1.to(tl.float32), x2.to(tl.float32)
        tl.store(p1, (x1f * c - x2f * s).to(x1.dtype), mask=ok)
        tl.store(p1 + HALF, (x2f * c + x1f * s).to(x1.dtype), mask=ok)

    return rotary_kernel


def apply_rotary_triton(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton kernel; same contract as the reference (in place, returns q and k)."""
    _check(q, k, cos, sin, positions)
    if q.stride(2) != 1 or k.stride(2) != 1 or cos.stride(1) != 1 or sin.stride() != cos.stride():
        raise ValueError("apply_rotary_triton needs head_dim contiguous in q, k and the tables (laid out alike); "
                         "call .contiguous()")
    import triton
    T, Hq, D = q.shape
    if T:
        for x in (q, k):
            _kernel()[(T,)](x, cos, sin, positions, x.stride(0), x.stride(1), cos.stride(0), x.shape[1], D // 2,
                            BLOCK_H=triton.next_power_of_2(x.shape[1]), BLOCK_HALF=triton.next_power_of_2(D // 2),
                            num_warps=4 if q.is_cuda else 1)
    return q, k


__all__ = ["apply_rotary_torch", "apply_rotary_triton"]

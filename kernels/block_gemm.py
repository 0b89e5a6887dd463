"""What the two block-quantized matmuls for the CPU share (w4a8_cpu.py, w8a8_cpu.py): the shapes they take, the
checks of their inputs, the tile order of their per-block scales, and the activation quantization (native.h's
quantize_row) as torch computes it, which both references use.

    fits(N, K)                      the shapes both kernels take: K % 32 == 0, N % 16 == 0
    check_call(op, x, K, digits)    raises ValueError naming the fix for an input the kernel does not take
    scales_to_tiles(v, dtype)       [N, nb] per-row block scales -> the kernels' order, [N/16][nb][16]
    scales_from_tiles(v)            its inverse
    quantize_activations_ref(x, digits) -> (a, s)   x ~ s * a per block of 32, one int8 digit or two
"""
from __future__ import annotations

import torch

TILE_ROWS = 16        # weight rows a tile holds: one 64-byte load covers 4 values of each
ACT_BLOCK = 32        # activations share one int8 scale per block of this many


def fits(out_features: int, in_features: int) -> bool:
    return in_features % ACT_BLOCK == 0 and out_features % TILE_ROWS == 0


def check_call(op: str, x: torch.Tensor, K: int, digits: int) -> None:
    """Raises ValueError when `x` is not what the kernel `op` reads: a contiguous [M, K] bfloat16 tensor, with
    digits 1 or 2."""
    if digits not in (1, 2):
        raise ValueError(f"digits must be 1 or 2, got {digits!r}")
    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] != K or not x.is_contiguous():
        raise ValueError(f"{op} takes x as a contiguous [M, {K}] bfloat16 tensor, got "
                         f"{x.dtype} {tuple(x.shape)}{'' if x.is_contiguous() else ' (not contiguous)'}")


def scales_to_tiles(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """v [N, nb] (a scale per row and block) -> [N, nb] `dtype` holding [N/16][nb][16]: a tile's block, its 16
    rows adjacent (what one vector load reads beside the block's weights)."""
    N, nb = v.shape
    return v.to(dtype).view(N // TILE_ROWS, TILE_ROWS, nb).transpose(1, 2).reshape(N, nb).contiguous()


def scales_from_tiles(v: torch.Tensor) -> torch.Tensor:
    """scales_to_tiles' inverse: [N, nb] in tile order -> [N, nb] in natural order (same dtype)."""
    N, nb = v.shape
    return v.view(N // TILE_ROWS, nb, TILE_ROWS).transpose(1, 2).reshape(N, nb)


def quantize_activations_ref(x: torch.Tensor, digits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' activation quantization in torch: x [M, K] -> integers a [M, K/32, 32] (float) and float64
    scales s [M, K/32, 1], x ~ s * a per block of 32; one int8 digit, or two (a = 256 a0 + a1)."""
    M, K = x.shape
    xb = x.float().view(M, K // ACT_BLOCK, ACT_BLOCK)
    amax = xb.abs().amax(-1, keepdim=True)                                     # [M, K/32, 1]
    # a true division, as the kernel's (127.0 / tensor is reciprocal-then-multiply, an ulp off at times)
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0).div(amax), torch.zeros_like(amax))
    t = xb * inv
    a = torch.round(t)                                                         # half to even, as nearbyintf
    s = amax.div(127.0).double()                                               # [M, K/32, 1]
    if digits == 2:
        a = 256 * a + torch.round((t - a) * 256).clamp(-127, 127)
        s = s / 256
    return a, s

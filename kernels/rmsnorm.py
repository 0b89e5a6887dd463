"""Fused residual add + RMSNorm: one read of x and residual, one write of each output (torch does two passes).

    x, residual: [T, H]  (same dtype; rows may be strided, H contiguous)
    weight:      [H]
    returns      (out [T, H] = rms_norm(x + residual) * weight,  h [T, H] = x + residual)  or, without a
                 residual, (rms_norm(x) * weight, None). Statistics in fp32.

Not wired into the model yet: bench/kernels.py measures it against torch first (the issue asks for fused
kernels only where a profile shows they pay).
"""
import functools

import torch

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> None:
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise ValueError(f"rms_norm wants x [T, H] and weight [H], got {tuple(x.shape)} and {tuple(weight.shape)};"
                         f" flatten leading dims with x.view(-1, H)")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual must match x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    tensors = [x, weight] + ([residual] if residual is not None else [])
    if x.dtype not in _DTYPES or any(t.dtype != x.dtype for t in tensors):
        raise TypeError(f"x, weight and residual must share one of {_DTYPES}, got "
                        f"{[str(t.dtype) for t in tensors]}; cast weight with .to(x.dtype)")
    if len({t.device for t in tensors}) != 1:
        raise ValueError("x, weight and residual must be on one device; move them with .to(x.device)")


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float,
                   residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reference. Allocates its outputs; inputs are not modified."""
    _check(x, weight, residual)
    h = x if residual is None else x + residual
    hf = h.float()
    out = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return out, (None if residual is None else h)


@functools.cache
def _kernel():
    global tl  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, H, stride_x, stride_r, stride_o, stride_h, eps,
                        HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
        # grid: (T,); one program normalises one row
        t = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        ok = offs < H
        x = tl.load(x_ptr + t * stride_x + offs, mask=ok, other=0.0)
        if HAS_RESIDUAL:  # add in fp32 and round once, like torch's low-precision add
            r = tl.load(res_ptr + t * stride_r + offs, mask=ok, other=0.0)
            x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
            tl.store(h_ptr + t * stride_h + offs, x, mask=ok)
        xf = x.to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / H + eps)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + t * stride_o + offs, (xf * inv * w).to(out_ptr.dtype.element_ty), mask=ok)

    return rms_norm_kernel


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Triton kernel; same contract as the reference."""
    _check(x, weight, residual)
    if x.stride(1) != 1 or weight.stride(0) != 1 or (residual is not None and residual.stride(1) != 1):
        raise ValueError("rms_norm_triton needs the hidden dim contiguous; call .contiguous()")
    import triton
    T, H = x.shape
    out = torch.empty_like(x)
    h = torch.empty_like(x) if residual is not None else None
    if T:
        res = residual if residual is not None else x
        hh = h if h is not None else out
        block = triton.next_power_of_2(H)
        _kernel()[(T,)](x, res, weight, out, hh, H, x.stride(0), res.stride(0), out.stride(0), hh.stride(0), eps,
                        HAS_RESIDUAL=residual is not None, BLOCK=block,
                        num_warps=min(16, max(1, block // 256)) if x.is_cuda else 1)
    return out, h


__all__ = ["rms_norm_torch", "rms_norm_triton"]

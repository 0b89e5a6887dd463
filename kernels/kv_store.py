"""Store the new tokens' K and V into one layer of the paged KV pool.

Layout (see sglite.runtime.kv_pool):
    k_cache, v_cache: [num_slots, num_kv_heads, head_dim]   one layer's buffers (pool.k_buffer[layer])
    loc:              [T] int64 (or int32) slot of each new token
    k, v:             [T, num_kv_heads, head_dim]            may be strided views (e.g. slices of a fused QKV)
"""
import functools

import torch


def _check(k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
           v: torch.Tensor) -> None:
    if k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must both be one layer's [num_slots, heads, head_dim] buffer, got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}; pass pool.k_buffer[layer_id]")
    if k.dim() != 3 or k.shape != v.shape or k.shape[1:] != k_cache.shape[1:]:
        raise ValueError(f"k and v must be [T, {k_cache.shape[1]}, {k_cache.shape[2]}] to match the cache, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if loc.dim() != 1 or loc.shape[0] != k.shape[0]:
        raise ValueError(f"loc must be [T] = [{k.shape[0]}] slots, got {tuple(loc.shape)}")
    if loc.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"loc must be int64 or int32 slot indices, got {loc.dtype}; use loc.long()")
    if k.dtype != k_cache.dtype or v.dtype != v_cache.dtype:
        raise TypeError(f"k/v dtype {k.dtype}/{v.dtype} differs from the cache's {k_cache.dtype}; cast with "
                        f".to({k_cache.dtype}) before storing")
    devices = {t.device for t in (k_cache, v_cache, loc, k, v)}
    if len(devices) != 1:
        raise ValueError(f"k_cache, v_cache, loc, k, v must share one device, got {sorted(map(str, devices))}; "
                         f"move them with .to(k_cache.device)")


def store_kv_cache_torch(k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
                         v: torch.Tensor) -> None:
    """Reference. Mutates k_cache[loc] = k, v_cache[loc] = v."""
    _check(k_cache, v_cache, loc, k, v)
    k_cache[loc] = k
    v_cache[loc] = v


@functools.cache
def _kernel():
    global tl  # jit bodies resolve names through module globals (Triton before ~3.3 ignores closures)
    import triton
    import triton.language as tl

    @triton.jit
    def store_kv_kernel(k_cache, v_cache, loc_ptr, k_ptr, v_ptr,
                        stride_cs, stride_ch, stride_kt, stride_kh, stride_vt, stride_vh,
                        H, D, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
        # grid: (T,); one program copies one token's [H, D] K and V
        t = tl.program_id(0)
        slot = tl.load(loc_ptr + t).to(tl.int64)
        h = tl.arange(0, BLOCK_H)[:, None]
        d = tl.arange(0, BLOCK_D)[None, :]
        m = (h < H) & (d < D)
        dst = slot * stride_cs + h * stride_ch + d
        kv = tl.load(k_ptr + t.to(tl.int64) * stride_kt + h * stride_kh + d, mask=m)
        tl.store(k_cache + dst, kv, mask=m)
        vv = tl.load(v_ptr + t.to(tl.int64) * stride_vt + h * stride_vh + d, mask=m)
        tl.store(v_cache + dst, vv, mask=m)

    return store_kv_kernel


def store_kv_cache_triton(k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor) -> None:
    """Triton kernel. Same contract as the reference; head_dim must be the contiguous dim everywhere."""
    _check(k_cache, v_cache, loc, k, v)
    if any(t.stride(2) != 1 for t in (k_cache, v_cache, k, v)) or k_cache.stride() != v_cache.stride():
        raise ValueError("store_kv_cache_triton needs head_dim contiguous in k, v and the caches, and the two "
                         "caches laid out alike; call .contiguous() on k / v")
    if not loc.is_contiguous():
        raise ValueError("loc must be contiguous; call loc.contiguous()")
    T, H, D = k.shape
    if T == 0:
        return
    import triton
    _kernel()[(T,)](k_cache, v_cache, loc, k, v, k_cache.stride(0), k_cache.stride(1), k.stride(0), k.stride(1),
                    v.stride(0), v.stride(1), H, D, BLOCK_H=triton.next_power_of_2(H),
                    BLOCK_D=triton.next_power_of_2(D))


__all__ = ["store_kv_cache_torch", "store_kv_cache_triton"]

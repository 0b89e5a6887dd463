import pytest
import torch

from sglite.kernels.kv_store import store_kv_cache_torch, store_kv_cache_triton


@pytest.mark.parametrize("H,D", [(2, 16), (3, 24)])
def test_triton_matches_reference(device, H, D):
    g = torch.Generator().manual_seed(H * D)
    T, S = 7, 40
    loc = torch.randperm(S - 1, generator=g)[:T] + 1
    kv = torch.randn(T, 2, H, D, generator=g)          # k, v as strided views of one tensor (like fused QKV)
    k, v = kv[:, 0], kv[:, 1]
    caches = torch.randn(2, S, H, D, generator=g)
    ref = caches.clone()
    store_kv_cache_torch(ref[0], ref[1], loc, k, v)
    out = caches.to(device)
    store_kv_cache_triton(out[0], out[1], loc.to(device), k.to(device), v.to(device))
    assert torch.equal(out.cpu(), ref)
    assert torch.equal(ref[0][loc], k)


def test_errors_say_how_to_fix():
    cache = torch.zeros(10, 2, 8)
    k = torch.zeros(3, 2, 8)
    with pytest.raises(TypeError, match=r"\.to\("):
        store_kv_cache_triton(cache, cache.clone(), torch.arange(3), k.half(), k.half())
    with pytest.raises(ValueError, match=r"\[T\]"):
        store_kv_cache_triton(cache, cache.clone(), torch.arange(4), k, k)
    with pytest.raises(ValueError, match="contiguous"):
        store_kv_cache_triton(cache, cache.clone(), torch.arange(3), torch.zeros(3, 2, 16)[..., ::2], k)

import pytest
import torch
import torch.nn.functional as F

from sglite.kernels.extend_attention import extend_attention_torch, extend_attention_triton


def _case(paged, prefix, extend, Hq, Hkv, D, page_size, dtype=torch.float32, device="cpu", seed=0):
    k_cache, v_cache, table, rows, _ = paged([max(p, 1) for p in prefix], Hkv, D, page_size, dtype, device, seed)
    g = torch.Generator().manual_seed(seed + 1)
    T = sum(extend)
    q = torch.randn(T, Hq, D, generator=g).to(device=device, dtype=dtype)
    kv = torch.randn(T, 2, Hkv, D, generator=g).to(device=device, dtype=dtype)  # strided k, v views
    lens = dict(prefix_lens=torch.tensor(prefix, device=device), extend_lens=torch.tensor(extend, device=device))
    return q, kv[:, 0], kv[:, 1], k_cache, v_cache, table, rows, lens


def test_reference_matches_sdpa_without_prefix(paged):
    q, k, v, kc, vc, table, rows, lens = _case(paged, [0], [9], 4, 2, 8, page_size=1)
    ref = extend_attention_torch(q, k, v, kc, vc, table, rows, scale=0.4, **lens)
    sdpa = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True,
                                          scale=0.4, enable_gqa=True).transpose(0, 1)
    torch.testing.assert_close(ref, sdpa, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("page_size", [0, 1, 16])
@pytest.mark.parametrize("Hq,Hkv", [(2, 2), (6, 2), (8, 2)])
def test_triton_matches_reference(device, paged, Hq, Hkv, page_size):
    # ragged: an empty prefix, a one-token extend, an extend longer than one query block
    q, k, v, kc, vc, table, rows, lens = _case(paged, [0, 37, 5], [20, 1, 40], Hq, Hkv, 16, page_size,
                                               device=device, seed=Hq + page_size)
    ref = extend_attention_torch(q, k, v, kc, vc, table, rows, scale=0.25, **lens)
    out = extend_attention_triton(q, k, v, kc, vc, table, rows, scale=0.25, **lens)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype,D,atol", [(torch.bfloat16, 16, 3e-2), (torch.float32, 24, 2e-5)])
def test_triton_dtypes_odd_head_dim_all_empty_prefixes(device, paged, dtype, D, atol):
    q, k, v, kc, vc, table, rows, lens = _case(paged, [0, 0], [3, 18], 3, 1, D, 4, dtype, device)
    ref = extend_attention_torch(q, k, v, kc, vc, table, rows, scale=0.3, **lens)
    out = extend_attention_triton(q, k, v, kc, vc, table, rows, scale=0.3, max_extend=18, **lens)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=1e-2)


def test_errors_say_how_to_fix(paged):
    q, k, v, kc, vc, table, rows, lens = _case(paged, [2], [3], 4, 2, 8, 1)
    with pytest.raises(TypeError, match=r"\.to\("):
        extend_attention_triton(q.half(), k, v, kc, vc, table, rows, scale=1.0, **lens)
    with pytest.raises(ValueError, match=r"\[B\]"):
        extend_attention_triton(q, k, v, kc, vc, table, rows, lens["prefix_lens"][:0], lens["extend_lens"], 1.0)


@pytest.mark.parametrize("window,softcap", [(None, 2.0), (5, None), (24, 1.5)])
def test_reference_window_and_softcap_match_explicit_mask(paged, window, softcap):
    """No prefix: the reference is the plain formula with a banded causal mask."""
    q, k, v, kc, vc, table, rows, lens = _case(paged, [0], [40], 4, 2, 8, page_size=1)
    ref = extend_attention_torch(q, k, v, kc, vc, table, rows, scale=0.4, window=window, softcap=softcap, **lens)
    kk, vv = (x.repeat_interleave(2, dim=1).transpose(0, 1) for x in (k, v))           # [Hq, T, D]
    s = q.transpose(0, 1) @ kk.transpose(1, 2) * 0.4
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(40)[:, None], torch.arange(40)[None, :]
    band = (j <= i) & ((j > i - window) if window else True)
    expect = (s.masked_fill(~band, float("-inf")).softmax(-1) @ vv).transpose(0, 1)
    torch.testing.assert_close(ref, expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window,softcap", [(None, 2.0), (5, None), (24, 1.5), (100, None)])
def test_triton_window_and_softcap_match_reference(device, paged, window, softcap):
    """Prefixes longer and shorter than the window, an extend longer than a query block."""
    q, k, v, kc, vc, table, rows, lens = _case(paged, [0, 37, 5], [40, 1, 33], 4, 2, 16, page_size=4,
                                               device=device)
    ref = extend_attention_torch(q, k, v, kc, vc, table, rows, scale=0.3, window=window, softcap=softcap, **lens)
    out = extend_attention_triton(q, k, v, kc, vc, table, rows, scale=0.3, window=window, softcap=softcap, **lens)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)

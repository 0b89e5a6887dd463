import pytest
import torch

from sglite.kernels.decode_attention import decode_attention_torch, decode_attention_triton
from sglite.kernels.extend_attention import extend_attention_torch

def _naive(q, k_cache, v_cache, req_to_token, rows, seq_lens, scale):
    """Per request, per head: the obvious loop the reference must agree with."""
    out = torch.empty_like(q)
    G = q.shape[1] // k_cache.shape[1]
    for b, (row, n) in enumerate(zip(rows.tolist(), seq_lens.tolist())):
        slots = req_to_token[row, :n].long()
        for h in range(q.shape[1]):
            keys, values = k_cache[slots, h // G].float(), v_cache[slots, h // G].float()
            out[b, h] = ((q[b, h].float() @ keys.T * scale).softmax(-1) @ values).to(q.dtype)
    return out


def test_reference_matches_naive_and_extend_reference(paged):
    k_cache, v_cache, table, rows, seq = paged([1, 9, 30], 2, 8, page_size=4)
    q = torch.randn(3, 6, 8)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.5)
    assert torch.allclose(ref, _naive(q, k_cache, v_cache, table, rows, seq, 0.5), atol=1e-5)
    # decode = extend by one token whose K/V is the last cached one
    last = table[rows, seq - 1].long()
    ext = extend_attention_torch(q, k_cache[last], v_cache[last], k_cache, v_cache, table, rows, seq - 1,
                                 torch.ones_like(seq), 0.5)
    assert torch.allclose(ref, ext, atol=1e-5)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("page_size", [0, 1, 16])
@pytest.mark.parametrize("Hq,Hkv", [(2, 2), (6, 2), (8, 2)])
def test_triton_matches_reference(device, paged, Hq, Hkv, page_size, num_splits):
    D = 16
    k_cache, v_cache, table, rows, seq = paged([1, 17, 70], Hkv, D, page_size, device=device, seed=Hq + page_size)
    q = torch.randn(3, Hq, D, device=device)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, D ** -0.5)
    out = decode_attention_triton(q, k_cache, v_cache, table, rows, seq, D ** -0.5, num_splits=num_splits)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype,D,atol", [(torch.bfloat16, 16, 2e-2), (torch.float32, 24, 2e-5)])
def test_triton_dtypes_and_odd_head_dim(device, paged, dtype, D, atol):
    k_cache, v_cache, table, rows, seq = paged([5, 40], 1, D, page_size=4, dtype=dtype, device=device)
    q = torch.randn(2, 3, D, device=device).to(dtype)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.3)
    out = decode_attention_triton(q, k_cache, v_cache, table, rows, seq, 0.3, num_splits=2)
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=1e-2)


def test_more_splits_than_blocks_and_default_splits(device, paged):
    """Short requests leave most splits empty; the merge must skip them."""
    k_cache, v_cache, table, rows, seq = paged([1, 2, 3], 2, 16, page_size=1, device=device)
    q = torch.randn(3, 4, 16, device=device)
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.25)
    for splits in (8, None):
        out = decode_attention_triton(q, k_cache, v_cache, table, rows, seq, 0.25, num_splits=splits)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_errors_say_how_to_fix(paged):
    k_cache, v_cache, table, rows, seq = paged([3], 2, 8, page_size=1)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        decode_attention_triton(torch.randn(1, 3, 8), k_cache, v_cache, table, rows, seq, 1.0)
    with pytest.raises(TypeError, match="int32"):
        decode_attention_triton(torch.randn(1, 2, 8), k_cache, v_cache, table.long(), rows, seq, 1.0)
    with pytest.raises(ValueError, match="contiguous"):
        decode_attention_triton(torch.randn(1, 2, 16)[..., ::2], k_cache, v_cache, table, rows, seq, 1.0)


def _naive_windowed(q, k_cache, v_cache, req_to_token, rows, seq_lens, scale, window, softcap):
    """The obvious loop with a window (the last `window` keys) and a soft-cap."""
    out = torch.empty_like(q)
    G = q.shape[1] // k_cache.shape[1]
    for b, (row, n) in enumerate(zip(rows.tolist(), seq_lens.tolist())):
        slots = req_to_token[row, max(0, n - window) if window else 0:n].long()
        for h in range(q.shape[1]):
            keys, values = k_cache[slots, h // G].float(), v_cache[slots, h // G].float()
            s = q[b, h].float() @ keys.T * scale
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            out[b, h] = (s.softmax(-1) @ values).to(q.dtype)
    return out


WINDOW_CASES = [(None, 2.0), (7, None), (20, 1.5), (500, None)]   # 500: wider than every request


@pytest.mark.parametrize("window,softcap", WINDOW_CASES)
def test_reference_window_and_softcap_match_naive(paged, window, softcap):
    k_cache, v_cache, table, rows, seq = paged([1, 9, 30, 70], 2, 8, page_size=4)
    q = torch.randn(4, 6, 8) * 3
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.5, window=window, softcap=softcap)
    naive = _naive_windowed(q, k_cache, v_cache, table, rows, seq, 0.5, window, softcap)
    torch.testing.assert_close(ref, naive, atol=1e-5, rtol=1e-5)
    plain = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.5)
    assert (ref - plain).abs().max() > 1e-3 or window == 500     # neither is a no-op here


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("window,softcap", WINDOW_CASES)
def test_triton_window_and_softcap_match_reference(device, paged, window, softcap, num_splits):
    k_cache, v_cache, table, rows, seq = paged([1, 17, 70, 130], 2, 16, page_size=16, device=device)
    q = torch.randn(4, 4, 16, device=device) * 3
    ref = decode_attention_torch(q, k_cache, v_cache, table, rows, seq, 0.25, window=window, softcap=softcap)
    out = decode_attention_triton(q, k_cache, v_cache, table, rows, seq, 0.25, num_splits=num_splits,
                                  window=window, softcap=softcap)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("bad", [dict(window=0), dict(window=2.5), dict(softcap=0.0), dict(softcap=-1.0)])
def test_bad_window_or_softcap_is_named(paged, bad):
    k_cache, v_cache, table, rows, seq = paged([3], 1, 8, page_size=0)
    with pytest.raises(ValueError, match=next(iter(bad))):
        decode_attention_torch(torch.randn(1, 1, 8), k_cache, v_cache, table, rows, seq, 0.5, **bad)

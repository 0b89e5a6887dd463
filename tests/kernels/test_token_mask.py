import pytest
import torch

from sglite.kernels.token_mask import (allocate_token_bitmask, apply_token_bitmask, apply_token_bitmask_torch,
                                       apply_token_bitmask_triton)


def _expected(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.where(allowed, logits, torch.full_like(logits, float("-inf")))


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """[B, V] bool -> [B, ceil(V/32)] int32, bit j of word w = token 32w + j (a slow, obvious packer)."""
    B, V = allowed.shape
    W = (V + 31) // 32
    padded = torch.zeros(B, W * 32, dtype=torch.int64)
    padded[:, :V] = allowed.long()
    words = (padded.view(B, W, 32) << torch.arange(32)).sum(-1)          # [B, W] in [0, 2^32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@pytest.mark.parametrize("B,V", [(1, 1), (3, 31), (2, 32), (4, 100), (2, 4097), (2, 49152)])
def test_reference_matches_bit_layout(B, V):
    g = torch.Generator().manual_seed(V)
    allowed = torch.rand(B, V, generator=g) < 0.3
    allowed[:, -1] = True  # the top bit of the last word (sign bit when V % 32 == 0)
    logits = torch.randn(B, V, generator=g)
    out = logits.clone()
    apply_token_bitmask_torch(out, _pack(allowed))
    assert torch.equal(out, _expected(logits, allowed))


def test_reference_ignores_bits_past_vocab_and_wider_masks():
    logits = torch.zeros(1, 5)
    mask = torch.tensor([[0b10101, -1, 0]], dtype=torch.int32)  # 3 words for 5 tokens: extra words ignored
    apply_token_bitmask_torch(logits, mask)
    assert torch.isinf(logits[0, [1, 3]]).all() and (logits[0, [0, 2, 4]] == 0).all()


def test_empty_batch_is_a_no_op():
    apply_token_bitmask_torch(torch.zeros(0, 70), torch.zeros(0, 3, dtype=torch.int32))


def test_all_allowed_mask_changes_nothing():
    logits = torch.randn(2, 70)
    out = logits.clone()
    apply_token_bitmask(out, allocate_token_bitmask(2, 70))
    assert torch.equal(out, logits)


@pytest.mark.parametrize("bad,match", [
    (dict(bitmask=torch.zeros(2, 3, dtype=torch.int64)), "int32"),
    (dict(bitmask=torch.zeros(2, 2, dtype=torch.int32)), "ceil"),
    (dict(bitmask=torch.zeros(3, 3, dtype=torch.int32)), "indices="),
    (dict(logits=torch.zeros(2, 70, dtype=torch.int32)), "float"),
    (dict(logits=torch.zeros(140)), r"\[B, V\]"),
])
def test_errors_say_how_to_fix(bad, match):
    args = dict(logits=torch.zeros(2, 70), bitmask=torch.zeros(2, 3, dtype=torch.int32)) | bad
    with pytest.raises((ValueError, TypeError), match=match):
        apply_token_bitmask(**args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("B,V", [(1, 31), (3, 100), (2, 4097), (5, 49152)])
def test_triton_matches_reference(device, B, V, dtype):
    g = torch.Generator().manual_seed(B * V)
    bitmask = torch.randint(-2**31, 2**31 - 1, (B, (V + 31) // 32), generator=g, dtype=torch.int32)
    logits = torch.randn(B, V, generator=g).to(dtype)
    ref = logits.clone()
    apply_token_bitmask_torch(ref, bitmask)
    out = logits.to(device)
    apply_token_bitmask_triton(out, bitmask.to(device))
    assert torch.equal(out.cpu(), ref)


def test_triton_row_strided_logits(device):
    full = torch.randn(4, 200)
    bitmask = torch.randint(-2**31, 2**31 - 1, (2, 4), dtype=torch.int32)
    ref = full.clone()
    apply_token_bitmask_torch(ref[::2, :100], bitmask)
    out = full.to(device)
    apply_token_bitmask_triton(out[::2, :100], bitmask.to(device))
    assert torch.equal(out.cpu(), ref)


def test_triton_rejects_strided_vocab():
    with pytest.raises(ValueError, match="contiguous"):
        apply_token_bitmask_triton(torch.zeros(2, 140)[:, ::2], torch.zeros(2, 3, dtype=torch.int32))


def test_indices_select_logits_rows(device):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 70, generator=g)
    bitmask = torch.randint(-2**31, 2**31 - 1, (2, 3), generator=g, dtype=torch.int32)
    indices = torch.tensor([4, 1])
    ref = logits.clone()
    sub = ref[indices]
    apply_token_bitmask_torch(sub, bitmask)
    ref[indices] = sub
    for fn in (apply_token_bitmask_torch, apply_token_bitmask_triton):
        out = logits.to(device)
        fn(out, bitmask.to(device), indices.to(device))
        assert torch.equal(out.cpu(), ref)
    assert torch.equal(ref[[0, 2, 3]], logits[[0, 2, 3]])


def test_torch_path_needs_no_triton():
    """The engine's CPU path imports this module on machines without triton."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['triton'] = None\n"   # any `import triton` now raises ImportError
            "import torch\n"
            "from sglite.kernels.token_mask import apply_token_bitmask\n"
            "x = torch.zeros(1, 40); apply_token_bitmask(x, torch.tensor([[1, 0]], dtype=torch.int32))\n"
            "assert x[0, 0] == 0 and torch.isinf(x[0, 1:]).all()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

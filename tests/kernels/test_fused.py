"""Fused RMSNorm(+residual) and rotary kernels against their references and against the model's own math."""
import pytest
import torch
import torch.nn.functional as F

from sglite.kernels.rmsnorm import rms_norm_torch, rms_norm_triton
from sglite.kernels.rotary import apply_rotary_torch, apply_rotary_triton


def test_rms_norm_reference_matches_torch():
    x, r, w = torch.randn(5, 48), torch.randn(5, 48), torch.randn(48)
    out, h = rms_norm_torch(x, w, 1e-5, r)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(out, F.rms_norm(x + r, (48,), w, 1e-5))


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("H,residual", [(48, True), (64, False)])
def test_rms_norm_triton_matches_reference(device, H, residual, dtype, atol):
    g = torch.Generator().manual_seed(H)
    x, r, w = (torch.randn(*s, generator=g).to(device=device, dtype=dtype) for s in ((6, 2 * H), (6, H), (H,)))
    x = x[:, :H]   # row-strided view (stride 2H)
    res = r if residual else None
    ref = rms_norm_torch(x, w, 1e-6, res)
    out = rms_norm_triton(x, w, 1e-6, res)
    torch.testing.assert_close(out[0].float(), ref[0].float(), atol=atol, rtol=1e-2)
    if residual:
        torch.testing.assert_close(out[1], ref[1])


def _tables(max_pos: int, D: int):
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    return ang.cos().float(), ang.sin().float()


def test_rotary_reference_matches_model_formula():
    cos, sin = _tables(32, 8)
    pos = torch.tensor([0, 5, 31])
    q, k = torch.randn(3, 4, 8), torch.randn(3, 2, 8)
    c, s = cos[pos][:, None], sin[pos][:, None]
    rot = lambda x: x * c + torch.cat([-x[..., 4:], x[..., :4]], -1) * s  # noqa: E731 (runtime/model.py)
    expect_q, expect_k = rot(q), rot(k)
    apply_rotary_torch(q, k, cos, sin, pos)
    torch.testing.assert_close(q, expect_q)
    torch.testing.assert_close(k, expect_k)


@pytest.mark.parametrize("Hq,Hkv,D", [(4, 2, 16), (6, 1, 24)])
def test_rotary_triton_matches_reference(device, Hq, Hkv, D):
    g = torch.Generator().manual_seed(D)
    cos, sin = _tables(64, D)
    pos = torch.tensor([3, 0, 63, 17])
    qkv = torch.randn(4, Hq + 2 * Hkv, D, generator=g)            # q, k as strided views of a fused QKV
    ref = qkv.clone()
    apply_rotary_torch(ref[:, :Hq], ref[:, Hq:Hq + Hkv], cos, sin, pos)
    out = qkv.to(device)
    apply_rotary_triton(out[:, :Hq], out[:, Hq:Hq + Hkv], cos.to(device), sin.to(device), pos.to(device))
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)

"""The fused CPU layer ops (numba) against their torch references, and the fused model pass against the eager one."""
import pytest
import torch

from sglite.kernels import layer_ops_cpu as ops

pytestmark = pytest.mark.skipif(not ops.available(), reason="numba is not installed")


def bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance in bfloat16 steps between two bf16 tensors of the same sign pattern."""
    return int((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max())


@pytest.mark.parametrize("T,H", [(1, 64), (7, 576)])
@pytest.mark.parametrize("with_add", [False, True])
def test_add_rms_norm(T, H, with_add):
    g = torch.Generator().manual_seed(T + H)
    h = torch.randn(T, H, generator=g) * 3
    add = (torch.randn(T, H, generator=g) * 2).to(torch.bfloat16) if with_add else None
    w = torch.randn(H, generator=g)
    h_ref, out_ref = h.clone(), torch.empty(T, H, dtype=torch.bfloat16)
    out = torch.empty(T, H, dtype=torch.bfloat16)
    assert ops.add_rms_norm(h, add, w, 1e-5, out) is out
    ops.add_rms_norm_ref(h_ref, add, w, 1e-5, out_ref)
    assert torch.equal(h, h_ref)                       # the residual add is exact: a bf16 widens to float32
    assert bf16_ulps(out, out_ref) <= 1                # the sum of squares may round in another order


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 9, 3, 64), (5, 4, 2, 16)])
def test_rope_store_is_the_eager_rotary_bit_for_bit(T, Hq, Hk, D):
    g = torch.Generator().manual_seed(T * D)
    qkv = torch.randn(T, (Hq + 2 * Hk) * D, generator=g).to(torch.bfloat16)
    cos, sin = torch.randn(T, D, generator=g), torch.randn(T, D, generator=g)
    slots = torch.randperm(20, generator=g)[:T] + 1
    k, v = torch.zeros(21, Hk, D, dtype=torch.bfloat16), torch.zeros(21, Hk, D, dtype=torch.bfloat16)
    k_ref, v_ref = k.clone(), v.clone()
    q, q_ref = torch.empty(T, Hq, D), torch.empty(T, Hq, D)
    ops.rope_store(qkv, cos, sin, Hq, Hk, q, ops.bits(k), ops.bits(v), slots)
    ops.rope_store_ref(qkv, cos, sin, Hq, Hk, q_ref, k_ref, v_ref, slots)
    assert torch.equal(q, q_ref) and torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert k[0].abs().sum() == 0                       # nothing written outside the given slots


@pytest.mark.parametrize("scale", [1.0, 10.0, 200.0])
def test_silu_mul_is_the_eager_ops_bit_for_bit(scale):
    """Our exp (a polynomial) against torch's silu then mul, gates from near 0 to far past exp's overflow
    (|g| > 88.7: silu -> -0 below, g above); rows before `lo` are left as they were."""
    g = torch.Generator().manual_seed(int(scale))
    T, F = 33, 1536
    gu = (torch.randn(T, 2 * F, generator=g) * scale).to(torch.bfloat16)
    gu[0, :4] = torch.tensor([-88.5, 88.5, -89.0, 0.0])
    out, ref = torch.full((T, F), 7.0, dtype=torch.bfloat16), torch.full((T, F), 7.0, dtype=torch.bfloat16)
    ops.silu_mul_ref(gu, ref)
    assert ops.silu_mul(gu, out) is out
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
    part = torch.full((T, F), 7.0, dtype=torch.bfloat16)
    ops.silu_mul(gu, part, lo=5)
    assert (part[:5] == 7.0).all() and torch.equal(part[5:].view(torch.int16), ref[5:].view(torch.int16))


def test_fused_model_pass_matches_eager_and_rows_do_not_depend_on_the_batch():
    """A bf16 tiny model: the fused pass (prefill, then decode steps of 1 and of 3 requests) agrees with the
    eager ops to bf16 rounding, and a request's logits are the same alone and beside others."""
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool
    from sglite.runtime.model import LlamaModel
    from sglite.runtime.testing import random_weights, tiny_config
    from sglite.runtime.weight_plan import WeightPlan

    cfg = tiny_config(512, num_layers=3, hidden_size=64, num_heads=4)
    net = LlamaModel(cfg, random_weights(cfg, seed=3), plan=WeightPlan("bf16", "bf16"))
    assert net.fused_cpu

    def run(fused: bool, batch: int) -> list[torch.Tensor]:
        net.fused_cpu = fused
        P, N = 12, 6
        pool = KVPool(cfg.num_layers, batch * (P + N) + 1, cfg.num_kv_heads, cfg.head_dim, net.dtype)
        attn = create_attention_backend("torch", pool, "cpu")
        table = torch.zeros((batch, P + N), dtype=torch.int32)
        prompts = [[(7 * b + i) % 500 + 3 for i in range(P)] for b in range(batch)]
        logits = net.forward(ForwardBatch.build(prompts, [0] * batch, list(range(batch)),
                                                torch.arange(1, batch * P + 1), table), attn)
        rows = [logits[0]]
        slot = batch * P + 1
        for s in range(N - 1):
            tokens = logits.argmax(-1).tolist()
            fb = ForwardBatch.build([[t] for t in tokens], [P + s] * batch, list(range(batch)),
                                    torch.arange(slot, slot + batch), table)
            slot += batch
            logits = net.forward(fb, attn)
            rows.append(logits[0])
        return rows

    fused_alone, fused_batch, eager = run(True, 1), run(True, 3), run(False, 1)
    for a, b, e in zip(fused_alone, fused_batch, eager):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e, atol=0.05, rtol=0.02)
        assert a.argmax() == e.argmax()

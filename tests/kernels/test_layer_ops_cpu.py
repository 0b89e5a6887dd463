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


@pytest.mark.parametrize("T,H", [(1, 64), (7, 640)])
@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_post_add_rms_norm(T, H, scale):
    """Gemma's sandwich: h += norm(add) * post_w, then the next norm; without an output, h only."""
    g = torch.Generator().manual_seed(T + H + int(scale))
    h = torch.randn(T, H, generator=g) * scale
    add = (torch.randn(T, H, generator=g) * 3 * scale).to(torch.bfloat16)
    post_w, w = 1 + torch.randn(H, generator=g) * 0.3, 1 + torch.randn(H, generator=g) * 0.3
    h_ref, out_ref = h.clone(), torch.empty(T, H, dtype=torch.bfloat16)
    out = torch.empty(T, H, dtype=torch.bfloat16)
    h_only, h_only_ref = h.clone(), h.clone()
    assert ops.post_add_rms_norm(h, add, post_w, w, 1e-6, out) is out
    ops.post_add_rms_norm_ref(h_ref, add, post_w, w, 1e-6, out_ref)
    torch.testing.assert_close(h, h_ref, rtol=2e-6, atol=1e-6 * scale)   # the norm's sum in another order
    assert bf16_ulps(out, out_ref) <= 1
    ops.post_add_rms_norm(h_only, add, post_w, w, 1e-6, None)
    assert torch.equal(h_only, h)
    ops.post_add_rms_norm_ref(h_only_ref, add, post_w, w, 1e-6, None)
    torch.testing.assert_close(h_only, h_only_ref, rtol=2e-6, atol=1e-6 * scale)


@pytest.mark.parametrize("T,Hq,Hk,D", [(1, 4, 1, 256), (5, 4, 2, 16)])
def test_qk_norm_rope_store_is_the_eager_ops_bit_for_bit(T, Hq, Hk, D):
    """Qwen3's and Gemma 3's per-head q/k RMSNorm (bf16 in, bf16 weight, rounded once), then the rotary."""
    g = torch.Generator().manual_seed(T * D + 1)
    qkv = (torch.randn(T, (Hq + 2 * Hk) * D, generator=g) * 4).to(torch.bfloat16)
    q_w = (1 + torch.randn(D, generator=g) * 0.5).to(torch.bfloat16)
    k_w = (1 + torch.randn(D, generator=g) * 0.5).to(torch.bfloat16)
    cos, sin = torch.randn(T, D, generator=g), torch.randn(T, D, generator=g)
    slots = torch.randperm(20, generator=g)[:T] + 1
    k, v = torch.zeros(21, Hk, D, dtype=torch.bfloat16), torch.zeros(21, Hk, D, dtype=torch.bfloat16)
    k_ref, v_ref = k.clone(), v.clone()
    q, q_ref = torch.empty(T, Hq, D), torch.empty(T, Hq, D)
    ops.qk_norm_rope_store(qkv, cos, sin, Hq, Hk, q_w, k_w, 1e-6, q, ops.bits(k), ops.bits(v), slots)
    ops.qk_norm_rope_store_ref(qkv, cos, sin, Hq, Hk, q_w, k_w, 1e-6, q_ref, k_ref, v_ref, slots)
    assert torch.equal(q, q_ref) and torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert k[0].abs().sum() == 0


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


def _variant(kind: str):
    """A tiny config and its random weights: the plain Llama layer, Qwen3's (q/k norms) or Gemma 3's (q/k norms,
    sandwich norms, offset norms, scaled embeddings, GELU-tanh, windowed layers with their own rope base)."""
    import dataclasses

    from sglite.runtime.testing import random_weights, tiny_config

    cfg = tiny_config(512, num_layers=3, hidden_size=64, num_heads=4)
    if kind == "qwen3":
        cfg = dataclasses.replace(cfg, architecture="qwen3", qk_norm=True)
    elif kind == "gemma3":
        cfg = dataclasses.replace(cfg, architecture="gemma3", qk_norm=True, sandwich_norms=True,
                                  hidden_act="gelu_pytorch_tanh", norm_weight_offset=1.0,
                                  embedding_multiplier=8.0, sliding_window=5, sliding_layers=(True, True, False),
                                  rope_local_theta=10000.0, rope_theta=1e6, rms_norm_eps=1e-6,
                                  attention_scale=0.25, num_kv_heads=1)
    w = random_weights(cfg, seed=3)
    g = torch.Generator().manual_seed(4)
    for i in range(cfg.num_layers):
        names = (["attn_q_norm", "attn_k_norm"] if cfg.qk_norm else []) + \
                (["post_attention_norm", "post_ffw_norm"] if cfg.sandwich_norms else [])
        for name in names:
            size = cfg.head_dim if "q_norm" in name or "k_norm" in name else cfg.hidden_size
            w[f"blk.{i}.{name}.weight"] = torch.randn(size, generator=g) * 0.3 + 1 - cfg.norm_weight_offset
    return cfg, w


@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3"])
def test_fused_model_pass_matches_eager_and_rows_do_not_depend_on_the_batch(kind):
    """A bf16 tiny model: the fused pass (prefill, then decode steps of 1 and of 3 requests, past Gemma's window)
    agrees with the eager ops to bf16 rounding, and a request's logits are the same alone and beside others."""
    from sglite.runtime.attention import create_attention_backend
    from sglite.runtime.forward_batch import ForwardBatch
    from sglite.runtime.kv_pool import KVPool
    from sglite.runtime.model import LlamaModel
    from sglite.runtime.weight_plan import WeightPlan

    cfg, weights = _variant(kind)
    net = LlamaModel(cfg, weights, plan=WeightPlan("bf16", "bf16"))
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

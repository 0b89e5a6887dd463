"""The Triton attention backend against the torch backend on a tiny random model: chunked prefill (extend
after a cached prefix), then batched decode, through ForwardBatch on a paged pool with scattered slots.
Token ids are fixed, so no tokenizer (and no model download) is needed: this also runs on a bare GPU box."""
import pytest
import torch

from sglite.runtime.attention import create_attention_backend
from sglite.runtime.forward_batch import ForwardBatch
from sglite.runtime.kv_pool import KVPool


def _tiny_net(device: str):
    from sglite.runtime.model import LlamaModel
    from sglite.runtime.testing import random_weights, tiny_config

    config = tiny_config(vocab_size=512, num_heads=6, num_kv_heads=2, hidden_size=96)  # GQA 3, head_dim 16
    return LlamaModel(config, random_weights(config, seed=0), device=device)


def _generate(net, backend: str, steps: int = 4, kv_cache_dtype: str = "auto"):
    """Greedy: prompt 0 prefilled in two chunks, prompt 1 in one; then `steps` batched decode steps.
    Returns (tokens [steps + 1][2], logits of every forward pass)."""
    c = net.config
    device = net.device
    pool = KVPool(c.num_layers, 400, c.num_kv_heads, c.head_dim, net.dtype, device, kv_cache_dtype)
    attn = create_attention_backend(backend, pool, device)
    table = torch.zeros((4, 128), dtype=torch.int32, device=device)
    free = list(range(397, 0, -3)) + list(range(2, 400, 3))       # scattered, descending slots

    def forward(new_tokens, prefix_lens, rows):
        nonlocal free
        n = sum(map(len, new_tokens))
        loc, free = torch.tensor(free[:n]), free[n:]
        fb = ForwardBatch.build(new_tokens, prefix_lens, rows, loc, table)
        return net.forward(fb, attn)

    p0 = [5, 300, 17, 42, 42, 9, 511, 128, 64, 3, 77]
    p1 = [1, 250]
    rows = [3, 1]
    logits = [forward([p0[:7]], [0], [rows[0]])]                 # chunk 1 of prompt 0 (logits unused)
    logits.append(forward([p0[7:], p1], [7, 0], rows))          # chunk 2 (extend after prefix) + prompt 1
    tokens = [logits[-1].argmax(-1).tolist()]
    lens = [len(p0), len(p1)]
    for _ in range(steps):
        logits.append(forward([[t] for t in tokens[-1]], lens, rows))
        tokens.append(logits[-1].argmax(-1).tolist())
        lens = [n + 1 for n in lens]
    return tokens, logits


def test_triton_backend_matches_torch_backend(device):
    net = _tiny_net(device)
    ref_tokens, ref_logits = _generate(net, "torch")
    tokens, logits = _generate(net, "triton")
    assert len({t for step in ref_tokens for t in step}) > 1, "degenerate case: pick other prompts"
    assert tokens == ref_tokens
    for a, b in zip(logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)


def test_cpu_without_interpreter_says_how_to_fix(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        create_attention_backend("triton", KVPool(1, 4, 1, 8), "cpu")


@pytest.mark.interpret
def test_tiny_model_logits_and_greedy_match(cpu_interpreter):
    """`load_tiny_model(attention_backend=...)` (real tokenizer) through Model.logits: same greedy continuation."""
    from sglite.runtime.model_source import ModelNotFoundError
    from sglite.runtime.testing import load_tiny_model

    try:
        models = {name: load_tiny_model(seed=1, attention_backend=name) for name in ("torch", "triton")}
    except ModelNotFoundError as e:
        pytest.skip(f"tokenizer unavailable: {e}")
    ids = {name: models[name].tokenizer.encode("Structured generation is") for name in models}
    for _ in range(3):
        logits = {name: models[name].logits(ids[name]) for name in models}
        torch.testing.assert_close(logits["triton"], logits["torch"], atol=1e-3, rtol=1e-3)
        for name in models:
            ids[name].append(int(logits[name][-1].argmax()))
    assert ids["triton"] == ids["torch"]


@pytest.mark.parametrize("kv_cache_dtype", ["bf16", "int8", "fp8_e4m3"])
def test_triton_backend_on_a_quantized_cache_matches_torch_backend(device, kv_cache_dtype):
    """Both read the same stored values (stored * scale, in float32): the same tokens, logits within rounding."""
    net = _tiny_net(device)
    ref_tokens, ref_logits = _generate(net, "torch", kv_cache_dtype=kv_cache_dtype)
    tokens, logits = _generate(net, "triton", kv_cache_dtype=kv_cache_dtype)
    assert tokens == ref_tokens
    for a, b in zip(logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)

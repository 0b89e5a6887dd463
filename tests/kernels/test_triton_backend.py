"""The Triton attention backend against the torch backend on the tiny random model: chunked prefill (extend
after a cached prefix), then batched decode, through ForwardBatch on a paged pool with scattered slots."""
import pytest
import torch

from sglite.runtime.attention import create_attention_backend
from sglite.runtime.forward_batch import ForwardBatch
from sglite.runtime.kv_pool import KVPool


@pytest.fixture(scope="module")
def tiny():
    from sglite.runtime.testing import load_tiny_model
    return load_tiny_model(seed=0, num_heads=6, num_kv_heads=2, hidden_size=96)   # GQA 3, head_dim 16


def _generate(net, tokenizer, backend: str, steps: int = 4):
    """Greedy: prompt 0 prefilled in two chunks, prompt 1 in one; then `steps` batched decode steps.
    Returns (tokens [steps + 1][2], logits of every forward pass)."""
    c = net.config
    device = net.device
    pool = KVPool(c.num_layers, 400, c.num_kv_heads, c.head_dim, net.dtype, device)
    attn = create_attention_backend(backend, pool, device)
    table = torch.zeros((4, 128), dtype=torch.int32, device=device)
    free = list(range(397, 0, -3)) + list(range(2, 400, 3))       # scattered, descending slots

    def forward(new_tokens, prefix_lens, rows):
        nonlocal free
        n = sum(map(len, new_tokens))
        loc, free = torch.tensor(free[:n]), free[n:]
        fb = ForwardBatch.build(new_tokens, prefix_lens, rows, loc, table)
        return net.forward(fb, attn)

    p0 = tokenizer.encode("The quick brown fox jumps over the lazy dog because")
    p1 = tokenizer.encode("Hello")
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


def test_triton_backend_matches_torch_backend(device, tiny):
    from sglite.runtime.model import LlamaModel
    from sglite.runtime.testing import random_weights

    net = tiny.net if device == "cpu" else LlamaModel(tiny.config, random_weights(tiny.config, 0), device=device)
    ref_tokens, ref_logits = _generate(net, tiny.tokenizer, "torch")
    tokens, logits = _generate(net, tiny.tokenizer, "triton")
    assert tokens == ref_tokens
    for a, b in zip(logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)


def test_cpu_without_interpreter_says_how_to_fix(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        create_attention_backend("triton", KVPool(1, 4, 1, 8), "cpu")

"""The model forward pass: paged-path consistency (tiny model) and agreement with transformers (real model)."""
from __future__ import annotations

import pytest
import torch

from tests.runtime.paged import PagedRunner

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Then it",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "3.14159 + 2.71828 = 5.85987; 1234567890 * 42 =",
]


def chat_prompt(tok) -> str:
    return tok.apply_chat_template([{"role": "user", "content": "Name three primary colors."}])


def check_paged_consistency(model, prompt_ids: list[int], atol: float) -> None:
    full = model.logits(prompt_ids)                                     # one chunk, contiguous slots
    runner = PagedRunner(model)
    cuts = [0, 3, len(prompt_ids) // 2, len(prompt_ids) - 1, len(prompt_ids)]
    chunks = [runner.extend([(0, prompt_ids[a:b], a)], all_logits=True) for a, b in zip(cuts, cuts[1:]) if b > a]
    torch.testing.assert_close(torch.cat(chunks), full, atol=atol, rtol=0)
    runner = PagedRunner(model, seed=1)
    steps = [runner.extend([(0, [t], i)]) for i, t in enumerate(prompt_ids)]  # token-by-token decode
    torch.testing.assert_close(torch.cat(steps), full, atol=atol, rtol=0)


def test_paged_prefill_chunks_and_decode_agree_tiny(tiny_model, tokenizer):
    for p in PROMPTS:
        check_paged_consistency(tiny_model, tokenizer.encode(p), atol=1e-4)


def test_batched_requests_equal_single_requests(tiny_model, tokenizer):
    a, b = tokenizer.encode(PROMPTS[0]), tokenizer.encode(PROMPTS[2])
    runner = PagedRunner(tiny_model)
    # request 0 prefilled alone, then extended together with a fresh request 1 in one batch
    runner.extend([(0, a[:5], 0)])
    both = runner.extend([(0, a[5:], 5), (1, b, 0)])
    torch.testing.assert_close(both[0], tiny_model.logits(a)[-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(both[1], tiny_model.logits(b)[-1], atol=1e-4, rtol=0)
    # a mixed decode batch: both requests advance one token together
    step = runner.extend([(0, [17], len(a)), (1, [42], len(b))])
    torch.testing.assert_close(step[0], tiny_model.logits(a + [17])[-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(step[1], tiny_model.logits(b + [42])[-1], atol=1e-4, rtol=0)


def test_logits_rejects_bad_input(tiny_model):
    with pytest.raises(ValueError, match="at least one token"):
        tiny_model.logits([])
    with pytest.raises(ValueError, match="out of range"):
        tiny_model.logits([1, 10**7])


@pytest.fixture(scope="module")
def hf_model():
    transformers = pytest.importorskip("transformers")
    from sglite.runtime.model_source import default_model_path

    path = default_model_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model.eval()


@pytest.mark.slow
def test_real_logits_match_transformers(real_model, hf_model, tokenizer):
    for p in PROMPTS + [chat_prompt(tokenizer)]:
        ids = tokenizer.encode(p)
        ours = real_model.logits(ids)
        with torch.no_grad():
            ref = hf_model(torch.tensor([ids])).logits[0].float()
        assert (ours - ref).abs().max().item() < 1e-3, p


@pytest.mark.slow
def test_real_greedy_matches_transformers(real_model, hf_model, tokenizer):
    for p in PROMPTS + [chat_prompt(tokenizer)]:
        ids = tokenizer.encode(p)
        ours = PagedRunner(real_model, num_slots=256).greedy(ids, 32)
        with torch.no_grad():
            ref = hf_model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                    attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    pad_token_id=tokenizer.eos_token_id, eos_token_id=None)
        assert ours == ref[0, len(ids):].tolist(), p


@pytest.mark.slow
def test_real_paged_chunks_and_decode_agree(real_model, tokenizer):
    check_paged_consistency(real_model, tokenizer.encode(PROMPTS[0] + " " + PROMPTS[1]), atol=1e-3)


def test_garbage_in_padding_slot_does_not_leak_into_outputs(tiny_model, tokenizer):
    a, b = tokenizer.encode(PROMPTS[0]), tokenizer.encode("short")
    runner = PagedRunner(tiny_model)
    runner.pool.k_buffer[:, 0] = float("nan")
    runner.pool.v_buffer[:, 0] = float("nan")
    out = runner.extend([(0, a, 0), (1, b, 0)])   # b is padded up to a's length
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1], tiny_model.logits(b)[-1], atol=1e-4, rtol=0)

"""A few checks with the real SmolLM2-135M (slow): greedy equals transformers-style full forward argmax, cache
on/off and chunking give identical greedy text, and a regex-constrained answer is valid."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines(real_model):
    from sglite.runtime.engine import Engine
    on = Engine(real_model, max_total_tokens=4096, chunked_prefill_size=16)
    off = Engine(real_model, max_total_tokens=4096, disable_radix_cache=True, chunked_prefill_size=-1)
    yield on, off
    on.shutdown()
    off.shutdown()


def test_greedy_matches_full_forward_and_cache_ablation(engines, real_model):
    on, off = engines
    tok = real_model.tokenizer
    prefix = tok.apply_chat_template([{"role": "user", "content": "Name three primary colors."}])
    prompts = [prefix, prefix + "Red,", prefix + "The"]
    sp = {"temperature": 0, "max_new_tokens": 12}
    a = on.generate(prompts, sp)
    b = off.generate(prompts, sp)
    assert [o["output_ids"] for o in a] == [o["output_ids"] for o in b]
    assert sum(o["meta_info"]["cached_tokens"] for o in a) > 0
    ids = tok.encode(prompts[0])
    out = a[0]["output_ids"]
    logits = real_model.logits(ids + out[:-1])
    assert logits[len(ids) - 1:].argmax(-1).tolist() == out


def test_regex_answer_is_valid(engines, real_model):
    on, _ = engines
    prompt = real_model.tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 times 3?"}])
    out = on.generate(prompt, {"temperature": 0, "max_new_tokens": 16, "regex": r"The answer is \d+\."})
    assert re.fullmatch(r"The answer is \d+\.", out["text"])
    assert out["meta_info"]["finish_reason"]["type"] == "stop"

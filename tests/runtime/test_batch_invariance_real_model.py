"""Batch invariance with the default model and the default settings, as a user runs them: whatever this machine's
CPU (AMX's bfloat16 matmul computes a row differently as a call's row count changes), greedy outputs do not depend
on the prefix cache, the batch or the chunking. The engine must claim the property here: a machine where it
reports itself off fails this test instead of passing it with nothing compared."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SP = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}


def outputs(results) -> list[tuple]:
    """(token ids, their logprobs) per request: equal bits, not only equal tokens."""
    return [(tuple(r["output_ids"]), tuple(lp for lp, *_ in r["meta_info"]["output_token_logprobs"]))
            for r in results]


@pytest.fixture(scope="module")
def default_engine():
    from sglite.runtime.engine import Engine

    with Engine() as e:         # the default model, weights="auto", every option at its default
        yield e


def test_a_shared_prefix_batch_is_the_same_with_cache_batch_and_chunking_on_or_off(default_engine):
    """16 prompts sharing a 160-token prefix, greedy: with the prefix cache on and off, batched and one at a
    time, prompts chunked by 64 tokens and not chunked, every request's tokens and logprobs are the bits of the
    default engine's batched run."""
    from sglite.runtime.engine import Engine

    assert default_engine.get_stats()["batch_invariant"] is True, \
        f"the default plan {default_engine.model.net.plan} gives up batch invariance on this machine"
    tok = default_engine.tokenizer
    head = "You extract figures from quarterly reports and answer with the number only. " * 12
    prompts = [tok.encode(head + f"Report {i}: revenue rose {3 * i + 1}% to {40 + 7 * i} million in "
                                 f"Q{i % 4 + 1}. Revenue:") for i in range(16)]
    reference = outputs(default_engine.generate(input_ids=prompts, sampling_params=SP, return_logprob=True))
    assert len({r[0] for r in reference}) > 1     # the prompts lead somewhere different: a real comparison
    model = default_engine.model
    for cache in (True, False):
        for chunk in (64, -1):
            with Engine(model, disable_radix_cache=not cache, chunked_prefill_size=chunk) as e:
                assert e.get_stats()["batch_invariant"] is True
                batched = outputs(e.generate(input_ids=prompts, sampling_params=SP, return_logprob=True))
            with Engine(model, disable_radix_cache=not cache, chunked_prefill_size=chunk) as e:
                alone = outputs([e.generate(input_ids=p, sampling_params=SP, return_logprob=True)
                                 for p in prompts])
            for how, got in (("batched", batched), ("one at a time", alone)):
                differ = [i for i, (a, b) in enumerate(zip(reference, got)) if a != b]
                assert not differ, (f"prefix cache {'on' if cache else 'off'}, chunked_prefill_size={chunk}, "
                                    f"{how}: prompts {differ} differ from the default batched run")

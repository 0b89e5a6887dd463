"""Sampling: seeded reproducibility, penalties, top-k/top-p/min-p, min_new_tokens, stop strings and logprobs."""
from __future__ import annotations

import math

import pytest
import torch

from sglite.runtime.engine.request import Req
from sglite.runtime.engine.sampler import Sampler
from sglite.runtime.engine.sampling_params import SamplingParams


def req(seed=0, **kw) -> Req:
    p = SamplingParams(**kw)
    return Req("r", [1, 2, 3], p, generator=torch.Generator().manual_seed(seed))


def test_seed_reproducible_regardless_of_batch(make_engine):
    e = make_engine()
    sp = {"temperature": 1.0, "seed": 42, "max_new_tokens": 10}
    alone = e.generate("The weather today", sp)["output_ids"]
    e.flush_cache()
    mixed = e.generate(["Something else entirely", "The weather today", "x"],
                       [{"temperature": 0.7, "max_new_tokens": 7}, sp, {"temperature": 0, "max_new_tokens": 12}])
    assert mixed[1]["output_ids"] == alone
    other_seed = e.generate("The weather today", dict(sp, seed=43))["output_ids"]
    assert other_seed != alone


def test_unseeded_requests_differ(make_engine):
    e = make_engine()
    outs = e.generate(["same prompt"] * 4, {"temperature": 1.0, "max_new_tokens": 8})
    assert len({tuple(o["output_ids"]) for o in outs}) > 1


def test_penalties_math():
    s = Sampler(vocab_size=6, eos_token_id=None)
    r = req(temperature=0, frequency_penalty=0.5, presence_penalty=0.25, repetition_penalty=2.0)
    r.output_ids = [4, 4, 5]
    logits = torch.tensor([[1.0, 2.0, -2.0, 0.5, 3.0, -1.0]])
    s._apply_penalties(logits, [r])
    # prompt tokens 1, 2, 3: repetition only; output 4 (x2) and 5: frequency + presence, then repetition
    expect = [1.0, 2.0 / 2, -2.0 * 2, 0.5 / 2, (3.0 - 1.0 - 0.25) / 2, (-1.0 - 0.5 - 0.25) * 2]
    assert logits[0].tolist() == pytest.approx(expect)


def test_penalties_in_engine_reduce_repeats(tiny_model):
    """The plain tiny model (tied embeddings) greedily repeats one token forever; penalties must break that."""
    from sglite.runtime.engine import Engine
    with Engine(tiny_model, max_total_tokens=1024) as e:
        sp = {"temperature": 0, "max_new_tokens": 20}
        base = e.generate("a b c", sp)["output_ids"]
        assert len(set(base)) <= 2
        pen = e.generate("a b c", dict(sp, frequency_penalty=2.0, presence_penalty=2.0))["output_ids"]
        assert len(set(pen)) > 2 * len(set(base))
        rep = e.generate("a b c", dict(sp, repetition_penalty=100.0))["output_ids"]
        assert len(set(rep)) > 2 * len(set(base))


def test_top_k_top_p_min_p_restrict_support():
    s = Sampler(vocab_size=5, eos_token_id=None)
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03]))

    def support(**kw):
        seen = set()
        for seed in range(300):
            seen.add(s.sample(logits[None].clone(), [req(seed, **kw)]).token_ids[0])
        return seen
    assert support(top_k=2) == {0, 1}
    assert support(top_p=0.7) == {0, 1}
    assert support(min_p=0.25) == {0, 1, 2}
    assert support() == {0, 1, 2, 3, 4}
    assert support(temperature=0) == {0}


def test_min_new_tokens_blocks_eos():
    s = Sampler(vocab_size=4, eos_token_id=3)
    r = req(temperature=0, min_new_tokens=2, stop_token_ids=(2,))
    logits = torch.tensor([[0.0, 0.0, 5.0, 9.0]])
    assert s.sample(logits.clone(), [r]).token_ids == [0]
    r.output_ids = [0, 0]
    assert s.sample(logits.clone(), [r]).token_ids == [3]


def test_stop_string_across_tokens_in_engine(make_engine):
    e = make_engine()
    sp = {"temperature": 0, "max_new_tokens": 20}
    full = e.generate("Tell me a story", sp)
    ids = full["output_ids"]
    # a stop string straddling tokens 3 and 4 of the output
    t3, t4 = e.tokenizer.decode([ids[3]]), e.tokenizer.decode([ids[4]])
    stop = t3[-2:] + t4[:2]
    head = e.tokenizer.decode(ids[:3])
    out = e.generate("Tell me a story", dict(sp, stop=stop))
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == (head + t3)[:(head + t3 + t4).index(stop)]
    assert out["meta_info"]["completion_tokens"] == 5
    kept = e.generate("Tell me a story", dict(sp, stop=[stop], no_stop_trim=True))
    assert kept["text"].endswith(stop)


def test_stop_token_ids(make_engine):
    e = make_engine()
    ids = e.generate("Tell me a story", {"temperature": 0, "max_new_tokens": 20})["output_ids"]
    out = e.generate("Tell me a story", {"temperature": 0, "max_new_tokens": 20, "stop_token_ids": [ids[5]]})
    assert out["output_ids"] == ids[:ids.index(ids[5]) + 1]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[5]}


def reference_logprobs(model, ids):
    return torch.log_softmax(model.logits(ids), dim=-1)


def test_output_logprobs_and_top(make_engine, engine_model):
    e = make_engine()
    prompt = engine_model.tokenizer.encode("Logprobs please")
    out = e.generate(input_ids=prompt, sampling_params={"temperature": 0, "max_new_tokens": 5},
                     return_logprob=True, top_logprobs_num=3)
    meta = out["meta_info"]
    ref = reference_logprobs(engine_model, prompt + out["output_ids"][:-1])
    for i, (lp, tok, text) in enumerate(meta["output_token_logprobs"]):
        assert tok == out["output_ids"][i] and text == e.tokenizer.decode([tok])
        assert lp == pytest.approx(ref[len(prompt) - 1 + i, tok].item(), abs=1e-4)
        top = meta["output_top_logprobs"][i]
        assert len(top) == 3 and top[0][1] == tok  # greedy: the best is the chosen one
    assert meta["input_token_logprobs"] == []


@pytest.mark.parametrize("start", [0, 4])
def test_prompt_logprobs_from_start_with_cached_prefix(make_engine, engine_model, start):
    e = make_engine(chunked_prefill_size=3)
    prompt = engine_model.tokenizer.encode("The shared prefix of a select call, then a choice")
    e.generate(input_ids=prompt, sampling_params={"max_new_tokens": 0})  # all of it is cached now
    out = e.generate(input_ids=prompt, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                     logprob_start_len=start, top_logprobs_num=2)
    lps = out["meta_info"]["input_token_logprobs"]
    ref = reference_logprobs(engine_model, prompt)
    assert [t for _, t, _ in lps] == prompt[start:]
    for k, (lp, tok, _) in enumerate(lps):
        pos = start + k
        if pos == 0:
            assert lp is None
        else:
            assert lp == pytest.approx(ref[pos - 1, tok].item(), abs=1e-4)
    assert len(out["meta_info"]["input_top_logprobs"]) == len(lps)
    total = sum(lp for lp, _, _ in lps if lp is not None)
    assert math.isfinite(total)


def test_top_k_top_p_prefilter_is_exact():
    from sglite.runtime.engine.sampler import top_k_top_p
    g = torch.Generator().manual_seed(0)
    for scale in (0.5, 3.0, 8.0):  # flat (nucleus beyond the prefilter) to peaked
        probs = torch.softmax(torch.randn(5, 6000, generator=g) * scale, dim=-1)
        top_k, top_p = [-1, 50, -1, 2000, -1], [0.9, 1.0, 0.5, 0.95, 0.99]
        got = top_k_top_p(probs.clone(), top_k, top_p)
        sorted_p, order = probs.sort(dim=-1, descending=True)
        for r in range(5):
            cum_before = sorted_p[r].cumsum(0) - sorted_p[r]
            keep = cum_before <= top_p[r]
            if top_k[r] > 0:
                keep[top_k[r]:] = False
            expect = torch.zeros(6000).scatter_(0, order[r], sorted_p[r] * keep)
            assert torch.equal(got[r] > 0, expect > 0)


def test_draws_follow_the_distribution_and_never_pick_a_zero():
    """The inverse-CDF draw: empirical frequencies within 4 sigma of each probability over 20,000 seeded draws;
    a token of probability 0 (masked: first, middle and last of the vocabulary) is never drawn."""
    s = Sampler(vocab_size=6, eos_token_id=None)
    probs = torch.tensor([0.0, 0.4, 0.3, 0.0, 0.3, 0.0])
    logits = torch.log(probs)
    r = req(seed=123)
    counts = torch.zeros(6)
    n = 20_000
    for _ in range(n // 50):
        out = s.sample(logits.expand(50, 6).clone(), [r] * 50).token_ids
        counts += torch.bincount(torch.tensor(out), minlength=6)
    assert counts[[0, 3, 5]].sum() == 0
    sigma = (probs * (1 - probs) / n).sqrt()
    assert ((counts / n - probs).abs() <= 4 * sigma + 1e-9).all(), counts / n


def test_a_large_vocabulary_draw_costs_one_random_per_row():
    """Gemma-sized rows (262,144 tokens): the request's generator advances by one draw per sampled row, so the
    next draw of an identically seeded generator after one uniform matches."""
    V = 262_144
    s = Sampler(vocab_size=V, eos_token_id=None)
    r = req(seed=5)
    s.sample(torch.randn(1, V), [r])
    twin = torch.Generator().manual_seed(5)
    torch.empty(1, dtype=torch.float64).uniform_(generator=twin)
    assert torch.equal(torch.rand(4, generator=r.generator), torch.rand(4, generator=twin))


def test_greedy_argmax_is_torchs_first_index_of_the_largest():
    """The sampler's argmax (numpy's on the CPU): the first of equal maxima, a NaN counted largest, a row of
    -inf giving 0, on contiguous rows and on row views."""
    from sglite.runtime.engine.sampler import argmax

    x = torch.randn(4, 5000, generator=torch.Generator().manual_seed(0))
    x[0, [7, 9]] = float("nan")
    x[1] = float("-inf")
    x[2, [10, 4000]] = 50.0
    assert argmax(x).tolist() == x.argmax(-1).tolist() == [7, 0, 10, x[3].argmax().item()]
    assert argmax(x[[2, 3]]).tolist() == x[[2, 3]].argmax(-1).tolist()
    assert argmax(x[:, ::3]).tolist() == x[:, ::3].argmax(-1).tolist()
    assert argmax(x).dtype == torch.int64

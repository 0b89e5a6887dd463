"""Speculative decoding with n-gram drafts: outputs identical to decoding one token per pass (greedy and seeded
sampling, with grammars), fewer passes where text repeats, and everything else (batching, cache, streaming,
stop strings, logprobs, n > 1, abort, retraction) unchanged."""
from __future__ import annotations

import pytest

from .conftest import pool_idle

GREEDY = {"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}
# rows pinned free: every candidate draft is verified, whatever this machine's steps cost (the plan is tested
# on its own below)
SPEC = {"speculative_algorithm": "ngram", "speculative_row_cost": 0.0}
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [300, 301, 302] * 5, list(range(900, 960))]


def pairs(e, prompts, sp):
    """Each prompt twice, one after the other: the second can draft from the first's output."""
    out = []
    for p in prompts:
        out += [e.generate(input_ids=p, sampling_params=sp) for _ in range(2)]
    return out


@pytest.mark.parametrize("sp", [GREEDY, {**GREEDY, "temperature": 0.9, "seed": 11},
                                {**GREEDY, "temperature": 1.2, "top_p": 0.8, "top_k": 50, "seed": 3}])
def test_outputs_identical_and_fewer_passes(make_engine, sp):
    ref = pairs(make_engine(), PROMPTS, sp)
    e = make_engine(**SPEC, speculative_num_draft_tokens=6)
    got = pairs(e, PROMPTS, sp)
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in ref]
    assert [o["text"] for o in got] == [o["text"] for o in ref]
    seconds = got[1::2]
    assert all(o["meta_info"]["spec_accepted_tokens"] > 20 for o in seconds)
    assert all(o["meta_info"]["decode_passes"] <= 15 for o in seconds)   # 40 tokens
    for o in ref:
        assert o["meta_info"]["decode_passes"] == 40 and o["meta_info"]["spec_accepted_tokens"] == 0
    stats = e.get_stats()
    assert stats["spec_acceptance_rate"] > 0.5 and stats["spec_draft_tokens"] >= stats["spec_accepted_tokens"]
    assert pool_idle(e)


def test_sampling_is_seed_for_seed_the_same(make_engine):
    """Each emitted token takes one draw from the request's own generator, drafted or not: the same seed gives
    the same sample, hence the same distribution."""
    on, off = make_engine(**SPEC), make_engine()
    for seed in range(12):
        sp = {"temperature": 1.0, "seed": seed, "max_new_tokens": 12, "ignore_eos": True}
        for p in PROMPTS[:2]:
            assert on.generate(input_ids=p, sampling_params=sp)["output_ids"] == \
                off.generate(input_ids=p, sampling_params=sp)["output_ids"]


@pytest.mark.parametrize("constraint", [
    {"regex": r"(ab|cd|[0-9]{2,4}-)+"},
    {"json_schema": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                                                      "tags": {"type": "array", "items": {"type": "string"}}},
                     "required": ["name", "n", "tags"]}},
])
def test_grammar_outputs_identical(make_engine, constraint):
    sp = {"temperature": 0, "max_new_tokens": 48, **constraint}
    prompt = [[7, 8, 9, 10]]
    ref = pairs(make_engine(), prompt, sp)
    e = make_engine(**SPEC)
    got = pairs(e, prompt, sp)
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in ref]
    assert got[1]["meta_info"]["spec_accepted_tokens"] > 0
    assert pool_idle(e)


def test_concurrent_batch_with_mixed_drafts_stream_stop_logprobs_and_n(make_engine):
    """A batch where some requests draft and others do not; streaming, stop strings, logprobs and n > 1."""
    off, on = make_engine(), make_engine(**SPEC, speculative_num_draft_tokens=4)
    for e in (off, on):
        e.generate(input_ids=PROMPTS[0], sampling_params=GREEDY)   # a corpus for drafts
    first = off.generate(input_ids=PROMPTS[0], sampling_params=GREEDY)["text"]
    stop = first[len(first) // 2:len(first) // 2 + 3]
    sps = [GREEDY, {**GREEDY, "stop": [stop]}, {**GREEDY, "n": 2, "temperature": 0.7, "seed": 9},
           {**GREEDY, "max_new_tokens": 7}]
    prompts = [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[2]]
    ref = off.generate(input_ids=prompts, sampling_params=sps)
    got = on.generate(input_ids=prompts, sampling_params=sps)
    assert [(o["output_ids"], o["text"], o["meta_info"]["finish_reason"]) for o in got] == \
        [(o["output_ids"], o["text"], o["meta_info"]["finish_reason"]) for o in ref]
    assert got[1]["meta_info"]["finish_reason"]["matched"] == stop
    chunks = list(on.generate(input_ids=PROMPTS[0], sampling_params=GREEDY, stream=True))
    assert [t for c in chunks for t in c["output_ids"]] == ref[0]["output_ids"]
    assert "".join(c["text"] for c in chunks) == ref[0]["text"]
    lp_on = on.generate(input_ids=PROMPTS[0], sampling_params=GREEDY, return_logprob=True, top_logprobs_num=2)
    lp_off = off.generate(input_ids=PROMPTS[0], sampling_params=GREEDY, return_logprob=True, top_logprobs_num=2)
    assert lp_on["meta_info"]["spec_accepted_tokens"] > 0
    for a, b in zip(lp_on["meta_info"]["output_token_logprobs"], lp_off["meta_info"]["output_token_logprobs"]):
        assert a[1] == b[1] and a[0] == pytest.approx(b[0], abs=1e-4)
    assert pool_idle(on)


def test_abort_and_retraction_keep_the_pool_whole(make_engine):
    ref = make_engine()
    sp = {"temperature": 0, "max_new_tokens": 60, "ignore_eos": True}
    want = [ref.generate(input_ids=p, sampling_params=sp)["output_ids"] for p in PROMPTS]
    e = make_engine(**SPEC, max_total_tokens=200, chunked_prefill_size=16)
    for p in PROMPTS:
        e.generate(input_ids=p, sampling_params=sp)   # drafts for what follows
    outs = e.generate(input_ids=PROMPTS, sampling_params=sp)   # 3 x (prompt + 60) > 200 slots: retractions
    assert [o["output_ids"] for o in outs] == want
    it = e.generate(input_ids=PROMPTS[1], sampling_params=sp, stream=True)
    head = next(it)
    e.abort(head["meta_info"]["id"])
    assert list(it)[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert pool_idle(e)


def test_options_are_validated(make_engine):
    with pytest.raises(ValueError, match="speculative_algorithm"):
        make_engine(speculative_algorithm="eagle")
    with pytest.raises(ValueError, match="speculative_num_draft_tokens"):
        make_engine(speculative_algorithm="ngram", speculative_num_draft_tokens=0)
    for bad in (-0.1, 1.5, "0.2", True):
        with pytest.raises(ValueError, match="speculative_row_cost"):
            make_engine(speculative_algorithm="ngram", speculative_row_cost=bad)


def test_costly_rows_are_not_drafted(make_engine):
    """With a row pinned at the cost of a whole one-row step, no draft can pay at batch 1: only the occasional
    one-token retry of a declined source is verified, and outputs stay the same."""
    from sglite.runtime.engine.speculative import EXPLORE_EVERY

    off, on = make_engine(), make_engine(speculative_algorithm="ngram", speculative_row_cost=1.0)
    got = pairs(on, PROMPTS, GREEDY)
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in pairs(off, PROMPTS, GREEDY)]
    steps = sum(o["meta_info"]["decode_passes"] for o in got)
    assert on.get_stats()["spec_draft_tokens"] <= steps // EXPLORE_EVERY + 1
    assert on.get_stats()["spec_row_cost"] == 1.0


def line(a, b):
    return lambda rows: a + b * rows


def test_plan_keeps_tokens_while_they_pay():
    from sglite.runtime.engine.speculative import plan_drafts

    # a one-row step of 10 (a = 6, b = 4 a row), p = 0.9: expected tokens per second E(k) / t(1 + k) for
    # k = 0..5 is 1/10, 1.9/14, 2.71/18, 3.44/22, 4.10/26, 4.69/30: best at 4
    assert plan_drafts([(8, 0.9)], 1, line(6.0, 4.0)) == [4]
    assert plan_drafts([(2, 0.9)], 1, line(6.0, 4.0)) == [2]   # the candidate is shorter than what would pay
    assert plan_drafts([(8, 0.3)], 1, line(6.0, 4.0)) == [0]   # 0.3 * 10 < 4
    assert plan_drafts([(8, 0.99)], 1, line(1.0, 0.0)) == [8]  # free rows: everything
    assert plan_drafts([(0, 0.9), (4, 0.0)], 2, line(1.0, 0.0)) == [0, 0]
    # batch 1: the plan is the best length, by brute force, over a grid of chances and costs, with and without
    # a step up from one row to two
    for p in (0.2, 0.4, 0.6, 0.8, 0.95):
        for share in (0.05, 0.2, 0.4, 0.7):
            for jump in (0.0, 0.3):
                def t(rows, share=share, jump=jump):
                    return 1.0 + share * (rows - 1) + (jump if rows > 1 else 0.0)
                rate = [sum(p ** j for j in range(k + 1)) / t(1 + k) for k in range(9)]
                (k,) = plan_drafts([(8, p)], 1, t)
                assert rate[k] == pytest.approx(max(rate), abs=1e-12), (p, share, jump)   # (ties: either)
    # two requests: the better candidate goes first; in a full batch a row is dear against what a step yields
    keep = plan_drafts([(4, 0.5), (4, 0.95)], 2, line(6.0, 4.0))
    assert keep[1] >= 1 and keep[0] <= keep[1]
    assert plan_drafts([(4, 0.6)], 1, line(6.0, 4.0)) == [1]
    assert plan_drafts([(4, 0.6)] + [(0, 0.0)] * 7, 8, line(6.0, 4.0)) == [0] * 8


def test_pass_cost_fits_a_line_through_what_it_sees():
    from sglite.runtime.engine.speculative import PRIOR_ROW_COST, PassCost

    c = PassCost()
    assert c.row_cost() == pytest.approx(PRIOR_ROW_COST)       # nothing seen: the prior
    c.observe(1, 0.020)
    assert c.curve()(1) == pytest.approx(0.020) and c.row_cost() == pytest.approx(PRIOR_ROW_COST)
    for _ in range(20):
        for rows in (1, 3, 5):
            c.observe(rows, 0.012 + 0.008 * rows)              # t1 = 20 ms, 8 ms a row
    t1, per_row = c.model()
    assert t1 == pytest.approx(0.020, rel=0.02) and per_row == pytest.approx(0.008, rel=0.05)
    assert c.curve()(4) == pytest.approx(0.044, rel=0.02)
    for _ in range(40):
        c.observe(3, 0.012 + 0.004 * 3)                        # the machine got faster at 3 rows: recent wins
    assert c.model()[1] < 0.008
    flat = PassCost()
    for _ in range(5):
        flat.observe(1, 0.02)
        flat.observe(4, 0.019)                                 # noise says rows are free: floored
    assert flat.row_cost() > 0
    assert PassCost(0.5).row_cost() == 0.5


def test_acceptance_follows_the_source_and_the_request():
    from sglite.runtime.engine.speculative import Acceptance, DraftState

    acc = Acceptance()
    good, bad = DraftState(source=("own", 4)), DraftState(source=("shared", 2))
    assert acc.rate(good) == acc.rate(bad) == 0.5
    for _ in range(10):
        acc.update(good, 4, 4)
        acc.update(bad, 4, 0)
    assert acc.source_rate(("own", 4)) > 0.9 and acc.source_rate(("shared", 2)) < 0.1
    fresh = DraftState(source=("own", 4))
    assert acc.rate(fresh) == acc.source_rate(("own", 4))      # no record of its own: the source's
    for _ in range(5):
        acc.update(fresh, 3, 0)
    assert acc.rate(fresh) < acc.source_rate(("own", 4)) - 0.3


@pytest.mark.slow
def test_real_model_extraction_identical_with_speculation(real_model):
    """The real model on the bundled reports (the main job's program): greedy JSON outputs are token for token
    the same with speculation on and off, and drafts from the reports are accepted."""
    import json
    from pathlib import Path

    from sglite.protocol import json_schema_text
    from sglite.runtime.engine import Engine

    root = Path(__file__).resolve().parents[3]
    docs = [json.loads(line) for line in (root / "examples/data/reports.jsonl").read_text().splitlines()[:3]]
    schema = {"type": "object", "properties": {
        "company": {"type": "string"}, "period": {"type": "string"},
        "revenue": {"type": "number"}, "currency": {"type": "string"},
        "highlights": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
        "required": ["company", "period", "revenue", "currency", "highlights"]}
    tok = real_model.tokenizer
    prompts = [tok.apply_chat_template([
        {"role": "system", "content": "Extract the fields as JSON: " + json_schema_text(schema)},
        {"role": "user", "content": d["text"]}]) for d in docs]
    for text_schema in (schema, None):
        sp = {"temperature": 0, "max_new_tokens": 160}
        if text_schema is not None:
            sp["json_schema"] = text_schema
        outs = {}
        for spec in (None, "ngram"):
            with Engine(real_model, speculative_algorithm=spec, speculative_row_cost=0.0 if spec else None) as engine:
                outs[spec] = [engine.generate(p, sp) for p in prompts]
        assert [o["output_ids"] for o in outs["ngram"]] == [o["output_ids"] for o in outs[None]]
        accepted = sum(o["meta_info"]["spec_accepted_tokens"] for o in outs["ngram"])
        assert accepted > 0
        passes_on = sum(o["meta_info"]["decode_passes"] for o in outs["ngram"])
        passes_off = sum(o["meta_info"]["decode_passes"] for o in outs[None])
        assert passes_on < passes_off


def test_flush_cache_forgets_finished_outputs(make_engine):
    """Drafts copy finished requests' outputs only while the cache that held them is kept: after flush_cache a
    request drafts as the first one did (same passes, same accepted tokens), not from the output it repeats."""
    e = make_engine(**SPEC, speculative_num_draft_tokens=6)
    p = PROMPTS[2]
    first, second = (e.generate(input_ids=p, sampling_params=GREEDY)["meta_info"] for _ in range(2))
    assert second["spec_accepted_tokens"] > first["spec_accepted_tokens"] + 10     # it copied the first's output
    assert e.flush_cache()
    third = e.generate(input_ids=p, sampling_params=GREEDY)["meta_info"]
    assert (third["decode_passes"], third["spec_accepted_tokens"]) == \
        (first["decode_passes"], first["spec_accepted_tokens"])

"""The offline API's shape and errors, over the tiny model."""
from __future__ import annotations

import asyncio

import pytest
import torch

from .conftest import pool_idle

GREEDY = {"temperature": 0, "max_new_tokens": 8}


def test_generate_single_and_batch_shapes(make_engine):
    e = make_engine()
    out = e.generate("Hello, my name is", GREEDY)
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == 8
    assert meta["prompt_tokens"] == len(e.tokenizer.encode("Hello, my name is"))
    assert meta["finish_reason"] == {"type": "length", "matched": None}
    assert meta["e2e_latency"] > 0
    assert out["text"] == e.tokenizer.decode(out["output_ids"], skip_special_tokens=True)
    outs = e.generate(["a b c", "d e f"], GREEDY)
    assert isinstance(outs, list) and len(outs) == 2
    ids = e.generate(input_ids=[[1, 2, 3], [4, 5]], sampling_params=[GREEDY, {"max_new_tokens": 2}])
    assert [o["meta_info"]["completion_tokens"] for o in ids] == [8, 2]
    assert pool_idle(e)


def test_matches_fresh_forward_pass(make_engine, engine_model):
    """Greedy tokens are the argmax of a full forward pass over prompt + output so far."""
    e = make_engine()
    prompt = engine_model.tokenizer.encode("The quick brown fox")
    out = e.generate(input_ids=prompt, sampling_params=GREEDY)["output_ids"]
    logits = engine_model.logits(prompt + out[:-1])
    assert logits[len(prompt) - 1:].argmax(-1).tolist() == out


@pytest.mark.parametrize("bad", [
    dict(sampling_params={"temperature": -1}),
    dict(sampling_params={"bogus": 1}),
    dict(prompt=None, input_ids=[]),
    dict(prompt=None, input_ids=[10**9]),
    dict(sampling_params=[GREEDY, GREEDY]),
    dict(top_logprobs_num=-1),
])
def test_invalid_requests_raise_before_queueing(make_engine, bad):
    e = make_engine()
    kwargs = dict(prompt="hi", sampling_params=GREEDY)
    kwargs.update(bad)
    with pytest.raises(ValueError):
        e.generate(**kwargs)
    assert not e.core.scheduler.has_work()
    assert e.generate("hi", GREEDY)["meta_info"]["completion_tokens"] == 8  # still serving


def test_bad_values_name_their_field(make_engine):
    from sglite.protocol import RequestError

    e = make_engine()
    for kwargs, param in [(dict(sampling_params={"temperature": -1}), "temperature"),
                          (dict(sampling_params={"regex": "([0-9]"}), "regex"),
                          (dict(sampling_params={"json_schema": {"$ref": "https://example.com/remote.json"}}),
                           "json_schema"),
                          (dict(sampling_params={"logit_bias": {10**7: 5.0}}), "logit_bias"),
                          (dict(top_logprobs_num=-1), "top_logprobs_num")]:
        with pytest.raises(RequestError) as info:
            e.generate("hi", **{"sampling_params": GREEDY, **kwargs})
        assert info.value.param == param, (kwargs, info.value)
    assert not e.core.has_work()


def test_latencies_are_timed_by_the_engine(make_engine):
    """A batch's requests prefill together: every first token comes before any request ends, however late the
    caller reads each result."""
    e = make_engine()
    metas = [o["meta_info"] for o in e.generate(["a b", "c d", "e f", "g h"], {**GREEDY, "ignore_eos": True})]
    assert max(m["ttft"] for m in metas) < min(m["e2e_latency"] for m in metas)


def test_stop_regex_ends_generation(make_engine):
    e = make_engine()
    full = e.generate("Once upon a time", {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True})
    target = full["text"][5:8]
    import re
    out = e.generate("Once upon a time", {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True,
                                          "stop_regex": re.escape(target)})
    assert out["meta_info"]["finish_reason"]["type"] == "stop" and target in out["text"]
    assert len(out["output_ids"]) < len(full["output_ids"])


def test_prompt_longer_than_context(make_engine):
    e = make_engine(max_context=32)
    with pytest.raises(ValueError, match="context"):
        e.generate(input_ids=list(range(40)), sampling_params=GREEDY)
    out = e.generate(input_ids=list(range(28)), sampling_params={"temperature": 0, "max_new_tokens": 100})
    assert out["meta_info"]["completion_tokens"] == 4  # clamped to the context
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_request_larger_than_pool(make_engine):
    e = make_engine(max_total_tokens=64)
    with pytest.raises(ValueError, match="max_new_tokens"):
        e.generate(input_ids=list(range(1, 50)), sampling_params={"max_new_tokens": 30})


def test_stream_concatenates_to_full_text(make_engine):
    e = make_engine()
    params = {"temperature": 0.9, "seed": 3, "max_new_tokens": 12}
    full = e.generate("Once upon a time", params)
    chunks = list(e.generate("Once upon a time", params, stream=True))
    assert "".join(c["text"] for c in chunks) == full["text"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert [t for c in chunks for t in c["output_ids"]] == full["output_ids"]  # increments, like text


def test_async_generate(make_engine):
    e = make_engine()

    async def main():
        a, b = await asyncio.gather(e.async_generate("one", GREEDY), e.async_generate("two", GREEDY))
        chunks = [c async for c in await e.async_generate("one", GREEDY, stream=True)]
        return a, b, chunks

    a, b, chunks = asyncio.run(main())
    assert a["text"] == e.generate("one", GREEDY)["text"]
    assert "".join(c["text"] for c in chunks) == a["text"]


def test_foreground_mode(make_engine):
    e = make_engine(background=False)
    bg = make_engine()
    assert [o["text"] for o in e.generate(["x y", "z"], GREEDY)] == [o["text"] for o in bg.generate(["x y", "z"], GREEDY)]
    assert "".join(c["text"] for c in e.generate("x y", GREEDY, stream=True)) == bg.generate("x y", GREEDY)["text"]


def test_max_new_tokens_zero_prefills_into_cache(make_engine):
    e = make_engine()
    prefix = list(range(100, 160))
    out = e.generate(input_ids=prefix, sampling_params={"max_new_tokens": 0})
    assert out["output_ids"] == [] and out["meta_info"]["finish_reason"]["type"] == "length"
    out = e.generate(input_ids=prefix + [7, 8], sampling_params=GREEDY)
    assert out["meta_info"]["cached_tokens"] == len(prefix)


def test_n_samples_share_prompt_cache(make_engine):
    e = make_engine()
    outs = e.generate(input_ids=list(range(200, 260)), sampling_params={"n": 3, "temperature": 1.0, "seed": 5,
                                                                       "max_new_tokens": 6})
    assert len(outs) == 3
    assert sum(o["meta_info"]["cached_tokens"] for o in outs) >= 2 * 59
    assert len({tuple(o["output_ids"]) for o in outs}) > 1  # different seeds


def test_get_stats_and_flush_cache(make_engine):
    e = make_engine()
    prompt = list(range(300, 340))
    e.generate(input_ids=prompt, sampling_params=GREEDY)
    e.generate(input_ids=prompt, sampling_params=GREEDY)
    s = e.get_stats()
    assert s["cached_tokens"] == 39 and s["prompt_tokens"] == 80
    assert s["cache_hit_rate"] == pytest.approx(39 / 80)
    assert s["forward_passes"] > 0 and s["cached_tree_tokens"] > 0
    assert e.flush_cache() is True
    assert e.get_stats()["cached_tree_tokens"] == 0
    assert e.generate(input_ids=prompt, sampling_params=GREEDY)["meta_info"]["cached_tokens"] == 0


def test_abort_frees_slots(make_engine):
    e = make_engine()
    it = e.generate(input_ids=list(range(1, 30)), sampling_params={"max_new_tokens": 1000, "ignore_eos": True},
                    stream=True)
    first = next(it)
    e.abort(first["meta_info"]["id"])
    last = list(it)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert last["meta_info"]["completion_tokens"] < 1000
    assert pool_idle(e)
    e.abort("no-such-id")  # ignored


def test_shutdown_aborts_in_flight(engine_model):
    from sglite.runtime.engine import Engine
    e = Engine(engine_model, max_total_tokens=1024)
    it = e.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 500, "ignore_eos": True}, stream=True)
    next(it)
    e.shutdown()
    last = list(it)[-1]
    assert last["meta_info"]["finish_reason"]["type"] == "abort"
    assert "shut down" in last["meta_info"]["finish_reason"]["message"]
    with pytest.raises(RuntimeError):
        e.generate("x", GREEDY)


def test_internal_error_aborts_and_engine_recovers(make_engine, monkeypatch):
    e = make_engine()
    real = e.core.runner.forward
    calls = {"n": 0}

    def flaky(batch, table):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(batch, table)
    monkeypatch.setattr(e.core.runner, "forward", flaky)
    out = e.generate("hello there", GREEDY)
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert "boom" in out["meta_info"]["finish_reason"]["message"]
    assert e.generate("hello there", GREEDY)["meta_info"]["finish_reason"]["type"] == "length"
    assert pool_idle(e)


def test_stream_logprobs_add_up(make_engine):
    e = make_engine()
    sp = {"temperature": 0, "max_new_tokens": 10}
    full = e.generate("Stream me", sp, return_logprob=True, logprob_start_len=0)
    chunks = list(e.generate("Stream me", sp, return_logprob=True, logprob_start_len=0, stream=True))
    streamed = [lp for c in chunks for lp in c["meta_info"]["output_token_logprobs"]]
    assert [t for _, t, _ in streamed] == full["output_ids"]
    assert chunks[0]["meta_info"]["input_token_logprobs"] == full["meta_info"]["input_token_logprobs"]
    assert all(c["meta_info"]["input_token_logprobs"] == [] for c in chunks[1:])

"""The engine boundary (`sglite.protocol.EngineAPI`), checked the same way against the server's fake engine, the
language tests' scripted engine and the real `Engine` over the tiny random model: whatever passes here, the server
and the language can drive."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sglite.protocol import (ABORT_BY_CLIENT, ABORT_SHUTDOWN, EngineAPI, FinishKind, GenerateRequest, RequestError,
                             RequestStreamHandle, SamplingParams)

MAX_CONTEXT = 256
LONG = {"max_new_tokens": 200, "ignore_eos": True}   # runs until aborted, in every test here


def _make(kind: str):
    if kind == "scripted":   # the language tests' engine
        from tests.lang.fake_engine import FakeEngine as ScriptedEngine

        return ScriptedEngine(respond=lambda prompt, sp: " the quick brown fox" * 100, max_context=MAX_CONTEXT)
    if kind == "fake":
        from sglite.runtime.tokenizer import load_tokenizer
        from tests.server.fake_engine import FakeEngine

        return FakeEngine(load_tokenizer(), max_context=MAX_CONTEXT)
    from sglite.runtime.engine import Engine
    from sglite.runtime.testing import load_tiny_model

    return Engine(load_tiny_model(max_context=MAX_CONTEXT), max_running_requests=8, max_total_tokens=2048,
                  background=True)


@pytest.fixture(scope="module", params=["fake", "scripted", "real"])
def make_engine(request):
    """make_engine() -> an engine of this parametrization (shut down after the module); `.kind` names it."""
    made = []

    def make():
        made.append(_make(request.param))
        return made[-1]

    make.kind = request.param
    yield make
    for e in made:
        e.shutdown()


@pytest.fixture(scope="module")
def engine(make_engine):
    return make_engine()


def _prompt(engine, n_tokens: int = 5) -> tuple[int, ...]:
    return tuple(engine.tokenizer.encode(" the quick brown fox jumps over the lazy dog" * 20)[:n_tokens])


def _request(engine, params: dict, **kw) -> GenerateRequest:
    return GenerateRequest(input_ids=_prompt(engine), params=SamplingParams.from_dict(params), **kw)


def _check_stream(chunks, out, return_logprob: bool = False) -> None:
    """Increments concatenate to the output, totals grow, exactly the last chunk finishes."""
    assert chunks and chunks[-1].finished and not any(c.finished for c in chunks[:-1])
    assert tuple(t for c in chunks for t in c.new_token_ids) == out.output_ids
    assert "".join(c.text_delta for c in chunks) == out.text
    seen = 0
    for c in chunks:
        seen += len(c.new_token_ids)
        assert c.completion_tokens == seen and c.prompt_tokens == out.prompt_tokens
    assert out.completion_tokens == chunks[-1].completion_tokens and out.finish_reason == chunks[-1].finish_reason
    if return_logprob:
        lps = tuple(x for c in chunks for x in c.new_token_logprobs)
        assert lps == out.output_token_logprobs and [t for _, t, *_ in lps] == list(out.output_ids)
        assert tuple(x for c in chunks for x in c.new_top_logprobs) == out.output_top_logprobs


def test_implements_the_protocol(engine):
    assert isinstance(engine, EngineAPI)
    assert engine.max_context == MAX_CONTEXT and engine.tokenizer.vocab_size > 0


@pytest.mark.parametrize("return_logprob", [False, True])
def test_submit_and_iterate_on_a_thread(engine, return_logprob):
    request = _request(engine, {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
                       return_logprob=return_logprob, top_logprobs_num=2 if return_logprob else 0, stream=True)
    [handle] = engine.submit(request)
    assert isinstance(handle, RequestStreamHandle) and handle.rid == request.rid
    chunks = list(handle)
    out = handle.output()
    _check_stream(chunks, out, return_logprob)
    assert out.completion_tokens == 6 and out.finish_reason.kind is FinishKind.LENGTH
    if return_logprob:
        assert all(len(top) == 2 for top in out.output_top_logprobs)


def test_submit_and_iterate_on_an_event_loop(engine):
    """What the server does: submit from a worker thread with the loop, `async for` on the loop, then
    output() (the end has been reached: it must not wait)."""
    async def run():
        request = _request(engine, {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True}, stream=True)
        [handle] = await asyncio.to_thread(engine.submit, request, asyncio.get_running_loop())
        chunks = [c async for c in handle]
        return chunks, handle.output()

    chunks, out = asyncio.run(run())
    _check_stream(chunks, out)
    assert out.completion_tokens == 5


@pytest.mark.parametrize("bad, param, code", [
    ({"input_ids": (1,) * MAX_CONTEXT}, "input_ids", "context_length_exceeded"),
    ({"input_ids": (10 ** 9,)}, "input_ids", None),
    ({"params": SamplingParams(regex="(ab")}, "regex", "invalid_grammar"),
])
def test_bad_request_raises_before_queueing(engine, bad, param, code):
    request = dataclasses.replace(_request(engine, {"max_new_tokens": 2}), **bad)
    with pytest.raises(RequestError) as e:
        engine.submit(request)
    assert e.value.param == param and (code is None or e.value.code == code), e.value
    # nothing was queued: the rid is free again
    ok = dataclasses.replace(_request(engine, {"max_new_tokens": 2}), rid=request.rid)
    assert engine.submit(ok)[0].output().finish_reason.kind is FinishKind.LENGTH


def test_bad_sampling_value_is_refused_by_the_protocol():
    with pytest.raises(RequestError) as e:
        GenerateRequest(text="x", params={"temperature": -1})
    assert (e.value.param, e.value.code) == ("temperature", "invalid_value")


def test_abort_before_the_first_chunk(engine):
    request = _request(engine, LONG)
    [handle] = engine.submit(request)
    engine.abort(request.rid)
    out = handle.output()
    assert out.finish_reason.kind is FinishKind.ABORT and out.finish_reason.code == ABORT_BY_CLIENT
    assert out.completion_tokens < LONG["max_new_tokens"]


def test_abort_after_the_first_chunk(engine):
    request = _request(engine, LONG, stream=True)
    [handle] = engine.submit(request)
    chunks = iter(handle)
    first = next(chunks)
    assert not first.finished
    engine.abort(request.rid)
    rest = list(chunks)
    out = handle.output()
    _check_stream([first, *rest], out)
    assert out.finish_reason.kind is FinishKind.ABORT and out.finish_reason.code == ABORT_BY_CLIENT
    assert out.completion_tokens < LONG["max_new_tokens"]


def test_abort_of_an_unknown_id_is_ignored(engine):
    engine.abort("no-such-request")


def test_n_samples(engine):
    request = _request(engine, {"max_new_tokens": 4, "temperature": 1.0, "seed": 7, "n": 2, "ignore_eos": True})
    handles = engine.submit(request)
    assert [h.rid for h in handles] == request.sample_ids() == [f"{request.rid}-0", f"{request.rid}-1"]
    outs = [h.output() for h in handles]
    assert all(o.completion_tokens == 4 for o in outs)
    # sample i is seeded seed + i: the same as a one-sample request with that seed
    again = engine.submit(_request(engine, {"max_new_tokens": 4, "temperature": 1.0, "seed": 8, "ignore_eos": True}))
    assert again[0].output().output_ids == outs[1].output_ids
    # abort(rid) ends every sample
    request = _request(engine, {**LONG, "n": 2})
    handles = engine.submit(request)
    engine.abort(request.rid)
    assert all(h.output().finish_reason.kind is FinishKind.ABORT for h in handles)


def test_shutdown_aborts_what_is_in_flight(make_engine):
    engine = make_engine()
    request = _request(engine, LONG, stream=True)
    [handle] = engine.submit(request)
    chunks = iter(handle)
    next(chunks)
    engine.shutdown()
    list(chunks)
    reason = handle.output().finish_reason
    assert reason.kind is FinishKind.ABORT and reason.code == ABORT_SHUTDOWN

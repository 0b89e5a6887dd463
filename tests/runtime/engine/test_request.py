"""Req's lifecycle and parts, driven through an EngineCore by hand: one lifecycle field (finish_reason), status
derived from it and the KV, kv.len advanced once per step past exactly what the pass computed."""
from __future__ import annotations

import pytest

from sglite.protocol import FinishKind, GenerateRequest, RequestError, SamplingParams


@pytest.fixture
def core(engine_model):
    from sglite.runtime.engine import EngineConfig, EngineCore

    c = EngineCore(engine_model, EngineConfig(max_total_tokens=2048, max_running_requests=8, background=False,
                                              chunked_prefill_size=4))
    c.debug_checks = True
    yield c
    c.shutdown()


def test_status_follows_finish_reason_and_kv(core):
    from sglite.runtime.engine.request import ReqStatus

    greedy = SamplingParams(temperature=0, max_new_tokens=3, ignore_eos=True)
    (req,) = core.add(GenerateRequest(input_ids=list(range(5, 15)), params=greedy))
    assert req.status is ReqStatus.WAITING and req.kv.row is None and req.kv.len == 0
    core.step()    # a 4-token chunk of the 10-token prompt
    assert req.status is ReqStatus.RUNNING and req.kv.row is not None
    assert (req.kv.len, req.in_prompt, req.output_ids) == (4, True, [])
    core.step()
    assert req.kv.len == 8 and req.output_ids == []
    core.step()    # the prompt's last 2 tokens: the first output token is sampled
    assert req.kv.len == 10 and len(req.output_ids) == 1 and req.num_pending == 1
    core.step()
    assert req.kv.len == 11 and len(req.output_ids) == 2
    core.step()    # the third token ends it: released in the same step
    assert req.finish_reason.kind is FinishKind.LENGTH
    assert req.status is ReqStatus.FINISHED and req.kv.row is None and req.kv.len == 0
    assert not core.has_work()


def test_abort_finishes_a_waiting_request_once(core):
    from sglite.runtime.engine.request import ReqStatus

    (req,) = core.add(GenerateRequest(input_ids=[5, 6, 7], params=SamplingParams(max_new_tokens=4)))
    (chunk,) = core.abort(req.rid)
    assert req.status is ReqStatus.FINISHED and chunk.finish_reason.kind is FinishKind.ABORT
    assert core.abort(req.rid) == [] and not core.has_work()


def test_cache_hit_tokens_is_what_the_first_admission_found(core):
    greedy = SamplingParams(temperature=0, max_new_tokens=1, ignore_eos=True)
    prompt = list(range(20, 32))
    first = core.add(GenerateRequest(input_ids=prompt, params=greedy))[0]
    while core.has_work():
        core.step()
    again = core.add(GenerateRequest(input_ids=prompt + [40], params=greedy))[0]
    while core.has_work():
        core.step()
    assert first.cache_hit_tokens == 0
    assert again.cache_hit_tokens == len(prompt)   # the whole first prompt is in the tree; its last token too
    assert core.get_stats()["cached_tokens"] == len(prompt)


def test_logit_bias_vocabulary_check_is_the_protocols(core):
    p = SamplingParams(logit_bias=((3, 1.0), (core.vocab_size, 2.0)))
    with pytest.raises(RequestError) as e:
        p.check_vocab(core.vocab_size)
    assert e.value.param == "logit_bias" and str(core.vocab_size) in str(e.value)
    with pytest.raises(RequestError) as e2:
        core.add(GenerateRequest(input_ids=[5], params=p))
    assert str(e2.value) == str(e.value) and not core.has_work()
    SamplingParams(logit_bias=((core.vocab_size - 1, 1.0),)).check_vocab(core.vocab_size)   # the last id is fine

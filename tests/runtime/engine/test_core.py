"""EngineCore by hand: add, step, abort, with no thread anywhere."""
from __future__ import annotations

import threading

import pytest

from sglite.protocol import ABORT_BY_CLIENT, FinishKind, GenerateRequest, RequestError, SamplingParams


@pytest.fixture
def core(engine_model):
    from sglite.runtime.engine import EngineConfig, EngineCore

    c = EngineCore(engine_model, EngineConfig(max_total_tokens=2048, max_running_requests=8, background=False))
    c.debug_checks = True
    yield c
    c.shutdown()


def run_to_end(core, limit=200):
    chunks = []
    for _ in range(limit):
        if not core.has_work():
            return chunks
        chunks += core.step()
    raise AssertionError("the core did not finish")


def test_add_then_step_until_finished_without_threads(core, engine_model):
    threads_before = set(threading.enumerate())
    greedy = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    a = GenerateRequest(input_ids=[5, 6, 7, 8], params=greedy)
    b = GenerateRequest(text="hello there", params=greedy.replace(max_new_tokens=3))
    core.add(a)
    core.add(b)
    chunks = run_to_end(core)
    assert set(threading.enumerate()) <= threads_before   # nothing started a thread (others may have ended)
    by_rid = {a.rid: [], b.rid: []}
    for c in chunks:
        by_rid[c.rid].append(c)
    for req, n in ((a, 6), (b, 3)):
        got = by_rid[req.rid]
        assert [c.finished for c in got] == [False] * (len(got) - 1) + [True]
        assert got[-1].finish_reason.kind is FinishKind.LENGTH
        ids = [t for c in got for t in c.new_token_ids]
        assert len(ids) == n == got[-1].completion_tokens
    # greedy tokens are the argmax of a fresh forward pass over the prompt and the output so far
    ids = [t for c in by_rid[a.rid] for t in c.new_token_ids]
    logits = engine_model.logits([5, 6, 7, 8] + ids[:-1])
    assert logits[3:].argmax(-1).tolist() == ids
    assert not core.active and core.kv.allocator.available + core.kv.cache.evictable_size == core.pool_tokens


def test_abort_and_bad_requests(core):
    r = GenerateRequest(input_ids=[1, 2, 3], params=SamplingParams(max_new_tokens=50, ignore_eos=True))
    core.add(r)
    core.step()
    [final] = core.abort(r.rid)
    assert final.finish_reason.kind is FinishKind.ABORT and final.finish_reason.code == ABORT_BY_CLIENT
    assert not core.has_work() and core.abort(r.rid) == []   # unknown now: ignored
    with pytest.raises(RequestError) as info:
        core.add(GenerateRequest(input_ids=[10**9]))
    assert info.value.param == "input_ids" and not core.has_work()
    with pytest.raises(RequestError) as info:
        core.add(GenerateRequest(input_ids=[1], params=SamplingParams(regex="(unclosed")))
    assert info.value.param == "regex" and not core.has_work()


def test_a_failed_step_aborts_in_flight_requests_and_the_core_recovers(core, monkeypatch):
    r = GenerateRequest(input_ids=[1, 2, 3], params=SamplingParams(max_new_tokens=5))
    core.add(r)
    monkeypatch.setattr(core.runner, "forward", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    [final] = core.step()
    assert final.finish_reason.code == "internal_error" and "boom" in final.finish_reason.message
    monkeypatch.undo()
    core.add(GenerateRequest(input_ids=[1, 2, 3], params=SamplingParams(max_new_tokens=2, ignore_eos=True)))
    assert run_to_end(core)[-1].completion_tokens == 2

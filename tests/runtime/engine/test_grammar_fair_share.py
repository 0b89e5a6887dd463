"""Fair share of grammar work (grammar_share.py): a request whose grammar is slow to mask does not hold back a plain
request beside it. The slow grammar is a real regex whose matcher's mask costs SLOW_MASK_S on a fake clock (the
fair share's and the masks' clocks are replaced, so the test does not depend on this machine's speed): the plain
request keeps getting steps without it, the slow one still progresses, and each output is the one it gets alone."""
from __future__ import annotations

import types

import pytest

from sglite.protocol import FinishKind, GenerateRequest, SamplingParams
from sglite.runtime.engine import grammar_backend, grammar_masks, grammar_share, scheduler

pytest.importorskip("sglite.runtime.constrained")

SLOW_MASK_S = 0.2     # fake seconds one mask of the slow grammar costs
TICK_S = 0.001        # fake seconds every other clock reading advances (a fast step costs a few)
PLAIN_TOKENS = 40


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += TICK_S
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    fake_time = types.SimpleNamespace(perf_counter=fake.perf_counter)
    for module in (scheduler, grammar_masks, grammar_backend):   # the step clock is the Scheduler's
        monkeypatch.setattr(module, "time", fake_time)
    return fake


def _reqs(engine, rid: str, prompt: str, **params):
    return engine.core.make_reqs(GenerateRequest(text=prompt, rid=rid, params=SamplingParams(temperature=0,
                                                                                              **params)))


def _make_slow(req, clock: FakeClock, fills: list[int]) -> None:
    fill = req.matcher.fill_next_token_bitmask

    def slow_fill(*args, **kwargs):
        clock.now += SLOW_MASK_S
        fills.append(1)
        return fill(*args, **kwargs)
    req.matcher.fill_next_token_bitmask = slow_fill


def _run(engine, reqs) -> None:
    core = engine.core
    core.add(reqs)
    while core.has_work():
        core.step()


def test_a_slow_grammar_leaves_a_plain_request_most_steps(make_engine, clock):
    engine = make_engine(background=False, grammar_mask_overlap="off", enable_jump_forward=False)
    slow_params = dict(regex="[ab]{400}", max_new_tokens=40, close_at_budget=False)
    plain_params = dict(max_new_tokens=PLAIN_TOKENS, ignore_eos=True)

    alone_slow = _reqs(engine, "slow-alone", "Letters:", **slow_params)
    _run(engine, alone_slow)
    alone_plain = _reqs(engine, "plain-alone", "Tell me a story.", **plain_params)
    _run(engine, alone_plain)

    fills: list[int] = []
    slow = _reqs(engine, "slow", "Letters:", **slow_params)
    _make_slow(slow[0], clock, fills)
    plain = _reqs(engine, "plain", "Tell me a story.", **plain_params)
    core = engine.core
    core.add(slow)
    core.add(plain)
    slow_steps_beside_plain = 0
    while not plain[0].finished:
        before = len(fills)
        core.step()
        slow_steps_beside_plain += len(fills) > before
    while core.has_work():
        core.step()

    # without the fair share the slow request would be in every one of the plain request's ~PLAIN_TOKENS steps;
    # with it, each slow step (SLOW_MASK_S) is followed by about as much fake time of steps without it
    assert slow_steps_beside_plain <= 3, slow_steps_beside_plain
    assert slow_steps_beside_plain >= 1   # it is not starved either
    assert plain[0].output_ids == alone_plain[0].output_ids          # batch invariance: same tokens
    assert slow[0].output_ids == alone_slow[0].output_ids
    assert len(slow[0].output_ids) == 40   # it ran to its length: the regex cannot end sooner


def test_slow_requests_alone_still_share_steps_within_the_step_budget(make_engine, clock):
    """With nobody else waiting there is no debt; a step takes slow requests up to SLOW_STEP_GRAMMAR_S of their
    grammar time (at least one), fewest passes first, so all of them progress in turn."""
    engine = make_engine(background=False, grammar_mask_overlap="off", enable_jump_forward=False)
    per_step = int(grammar_share.SLOW_STEP_GRAMMAR_S // SLOW_MASK_S) or 1
    reqs, fills = [], []
    for i in range(3 * per_step):
        rs = _reqs(engine, f"s{i}", f"Letters {i}:", regex="[ab]{1,200}", max_new_tokens=6, close_at_budget=False)
        _make_slow(rs[0], clock, fills)
        reqs += rs
    core = engine.core
    core.add(reqs)
    core.step()     # the prefill: their cost is not known before it
    while core.has_work():
        before = len(fills)
        core.step()
        assert len(fills) - before <= per_step
    assert all(r.output_ids and r.finish_reason.kind is not FinishKind.ABORT for r in reqs)
    assert core.scheduler.grammar_share.debt == 0.0

"""Scheduling with the tiny model: batching, chunked prefill, prefix cache on/off, retraction, concurrency.
Each equivalence test compares greedy tokens and also seeded samples, which are sensitive to any logit change."""
from __future__ import annotations

import random
import threading

import pytest

from .conftest import pool_idle


def prompts(n: int, shared: int = 0, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(1000, 40000) for _ in range(shared)]
    return [prefix + [rng.randrange(1000, 40000) for _ in range(rng.randint(3, 40))] for _ in range(n)]


def params(n: int, max_new: int = 10) -> list[dict]:
    out = []
    for i in range(n):
        if i % 2:
            out.append({"temperature": 0.8, "seed": i, "max_new_tokens": max_new})
        else:
            out.append({"temperature": 0, "max_new_tokens": max_new - i % 3})
    return out


def run(engine, ps, sp) -> list[list[int]]:
    return [o["output_ids"] for o in engine.generate(input_ids=ps, sampling_params=sp)]


def one_by_one(engine, ps, sp) -> list[list[int]]:
    return [engine.generate(input_ids=p, sampling_params=s)["output_ids"] for p, s in zip(ps, sp)]


def test_batch_equals_one_at_a_time(make_engine):
    ps, sp = prompts(8, shared=20), params(8)
    e = make_engine()
    batched = run(e, ps, sp)
    assert e.get_stats()["forward_passes"] < sum(len(o) for o in batched)  # really batched
    e.flush_cache()
    assert batched == one_by_one(e, ps, sp)
    assert pool_idle(e)


def test_cache_on_off_identical(make_engine):
    ps, sp = prompts(8, shared=30, seed=1), params(8)
    on, off = make_engine(), make_engine(disable_radix_cache=True)
    first_on = run(on, ps, sp)
    assert first_on == run(off, ps, sp)
    again = run(on, ps, sp)   # now served from the cache (prompt and output)
    assert again == first_on
    assert on.get_stats()["cached_tokens"] > 8 * 30
    assert off.get_stats()["cached_tokens"] == 0


@pytest.mark.parametrize("chunk", [5, 16])
def test_chunked_equals_unchunked(make_engine, chunk):
    ps, sp = prompts(6, shared=25, seed=2), params(6)
    ref = run(make_engine(chunked_prefill_size=-1), ps, sp)
    e = make_engine(chunked_prefill_size=chunk)
    assert run(e, ps, sp) == ref
    assert e.get_stats()["forward_passes"] > 25 // chunk


@pytest.mark.parametrize("mixed", [True, False])
def test_chunked_prefill_interleaves_with_decode(make_engine, mixed):
    """A long prompt is prefilled in chunks while a running request keeps decoding: in the same forward passes
    (mixed) or in alternating ones."""
    e = make_engine(chunked_prefill_size=8, enable_mixed_batch=mixed)
    steps = []
    real = e.core.runner.forward

    def spy(batch, table):
        steps.append((batch.num_prefill, len(batch.reqs) - batch.num_prefill))
        return real(batch, table)
    e.core.runner.forward = spy
    it = e.generate(input_ids=[5, 6, 7], sampling_params={"temperature": 0, "max_new_tokens": 40}, stream=True)
    next(it)
    e.generate(input_ids=list(range(1000, 1100)), sampling_params={"temperature": 0, "max_new_tokens": 1})
    list(it)
    chunk_steps = [i for i, (p, _) in enumerate(steps) if p][1:]   # skip the short prompt's own prefill
    assert len(chunk_steps) >= 100 // 8
    if mixed:
        assert all(steps[i][1] == 1 for i in chunk_steps)  # the decode rode along every time
    else:
        assert all(steps[i][1] == 0 and steps[i + 1] == (0, 1) for i in chunk_steps[:-1])


def test_retraction_under_tiny_pool_loses_nothing(make_engine):
    ps, sp = prompts(6, seed=3), [{"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}] * 6
    ref = run(make_engine(), ps, sp)
    small = make_engine(max_total_tokens=120, chunked_prefill_size=16)
    assert run(small, ps, sp) == ref
    assert small.get_stats()["num_retractions"] > 0
    assert pool_idle(small)
    off = make_engine(max_total_tokens=120, disable_radix_cache=True)
    assert run(off, ps, sp) == ref
    assert off.get_stats()["num_retractions"] > 0


def test_concurrent_threads_equal_sequential(make_engine):
    ps, sp = prompts(12, shared=15, seed=4), params(12)
    e = make_engine()
    expect = one_by_one(make_engine(), ps, sp)
    results = [None] * len(ps)

    def worker(i):
        results[i] = e.generate(input_ids=ps[i], sampling_params=sp[i])["output_ids"]
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(ps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expect
    assert e.get_stats()["forward_passes"] < sum(len(r) for r in results)


def test_in_batch_prefix_sharing_computes_prefix_once(make_engine):
    ps = prompts(8, shared=200, seed=5)
    sp = {"temperature": 0, "max_new_tokens": 2}
    e = make_engine()
    run(e, ps, [sp] * 8)
    s = e.get_stats()
    unique = 200 + sum(len(p) - 200 for p in ps)
    assert s["prefill_tokens_computed"] <= unique + 8  # the shared 200 tokens once, not 8 times
    assert s["cached_tokens"] >= 7 * 200


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_policies_give_same_outputs(make_engine, policy):
    ps, sp = prompts(10, shared=10, seed=6), params(10)
    ref = one_by_one(make_engine(), ps, sp)
    assert run(make_engine(schedule_policy=policy, max_running_requests=3), ps, sp) == ref


def test_lpm_admits_longest_cached_prefix_first(make_engine):
    e = make_engine(background=False, max_running_requests=1)
    cached = list(range(500, 560))
    e.generate(input_ids=cached, sampling_params={"max_new_tokens": 0})
    from sglite.runtime.engine.request import Req
    from sglite.runtime.engine.sampling_params import SamplingParams
    cold = Req("cold", list(range(2000, 2060)), SamplingParams(max_new_tokens=1))
    warm = Req("warm", cached + [9], SamplingParams(max_new_tokens=1))
    e.core.scheduler.add(cold)
    e.core.scheduler.add(warm)
    assert [r.rid for r in e.core.scheduler._ordered_waiting()] == ["warm", "cold"]


def test_retraction_with_a_chunked_prefill_in_flight(make_engine):
    """Decode runs out of slots while a long prompt is half prefilled: the chunked request yields its slots."""
    ps = [list(range(1000, 1010)), list(range(2000, 2085))]
    sp = [{"temperature": 0, "max_new_tokens": 60, "ignore_eos": True},
          {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}]
    ref = one_by_one(make_engine(), ps, sp)
    for mixed in (True, False):
        e = make_engine(max_total_tokens=100, chunked_prefill_size=8, enable_mixed_batch=mixed)
        it = e.generate(input_ids=ps[0], sampling_params=sp[0], stream=True)
        head = next(it)
        second = e.generate(input_ids=ps[1], sampling_params=sp[1])
        first = head["output_ids"] + [t for c in it for t in c["output_ids"]]   # stream ids are increments
        assert [first, second["output_ids"]] == ref
        assert e.get_stats()["num_retractions"] > 0
        assert pool_idle(e)


def test_long_chunk_with_many_decodes_runs_alone_then_decodes(make_engine):
    """Padding 5 decode rows to a 1024-token chunk costs more than it saves: that chunk runs alone and the
    running requests decode in the next step (never starved)."""
    e = make_engine(chunked_prefill_size=1024)
    steps = []
    real = e.core.runner.forward

    def spy(batch, table):
        steps.append((batch.num_prefill_tokens, len(batch.reqs) - batch.num_prefill))
        return real(batch, table)
    e.core.runner.forward = spy
    its = [e.generate(input_ids=[7 + i, 8, 9], sampling_params={"temperature": 0, "max_new_tokens": 40},
                      stream=True) for i in range(5)]
    for it in its:
        next(it)
    e.generate(input_ids=list(range(3000, 5100)), sampling_params={"temperature": 0, "max_new_tokens": 1})
    for it in its:
        list(it)
    big = [i for i, (p, _) in enumerate(steps) if p >= 1000]
    assert len(big) >= 2 and all(steps[i][1] == 0 and steps[i + 1] == (0, 5) for i in big)


def test_two_format_plan_batch_equals_one_at_a_time():
    """With decode rows in one weight format and prefill rows in another, a request's greedy output must not
    depend on what shares its batch (formats follow each row's phase, not the pass's size)."""
    from dataclasses import replace

    import torch

    from sglite.runtime.engine import Engine
    from sglite.runtime.linear import SizedLinear
    from sglite.runtime.model import LlamaModel, Model
    from sglite.runtime.testing import random_weights, tiny_config
    from sglite.runtime.tokenizer import load_tokenizer
    from sglite.runtime.weight_plan import WeightPlan

    tok = load_tokenizer()
    cfg = tiny_config(tok.vocab_size)
    weights = random_weights(cfg, seed=0)
    # an untied random head: with tied embeddings a random model mostly repeats its input token
    weights["output.weight"] = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    cfg = replace(cfg, tie_word_embeddings=False)
    net = LlamaModel(cfg, weights, plan=WeightPlan("int8", "bf16"))
    assert isinstance(net.layers[0].qkv, SizedLinear)
    ps, sp = prompts(12, shared=20, seed=4), params(12)   # decode passes of 12 rows; alone, of 1
    with Engine(Model(net, tok), max_total_tokens=4096, max_running_requests=16) as e:
        batched = run(e, ps, sp)
        e.flush_cache()
        assert batched == one_by_one(e, ps, sp)

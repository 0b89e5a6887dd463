"""Batch invariance (EngineConfig.batch_invariant, on by default on the CPU): a request's tokens and logprobs are
the same bits whatever shares its steps, however its prompt is chunked, and whether its prefix comes from the
cache. Checked against the same requests run one at a time, and shown to be a real property: with it off, the
same comparison finds differences (SDPA's prefill and the shared-prefix cascade)."""
from __future__ import annotations

import pytest
import torch

SP = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
PREFIX = list(range(100, 260))                                    # shared by every prompt: 160 tokens
PROMPTS = [PREFIX + [500 + i, 900 + 7 * i, 1300 + i] * (3 + i % 4) for i in range(26)]


@pytest.fixture(scope="module")
def bf16_model():
    """The tiny model in bfloat16 (the formats the default model runs in on the CPU; float32 matmuls are not
    row-independent, see the last test), with an untied random head."""
    from sglite.runtime.linear import make_head
    from sglite.runtime.model import LlamaModel, Model
    from sglite.runtime.testing import random_weights, tiny_config
    from sglite.runtime.tokenizer import load_tokenizer

    tok = load_tokenizer()
    cfg = tiny_config(tok.vocab_size)
    net = LlamaModel(cfg, random_weights(cfg, 0), dtype=torch.bfloat16)
    net.head = make_head(torch.randn(net.head.out_features, net.head.in_features,
                                     generator=torch.Generator().manual_seed(1)) * 0.5, "bf16", "bf16")
    return Model(net, tok)


@pytest.fixture
def make_bf16_engine(bf16_model):
    from sglite.runtime.engine import Engine

    engines = []

    def make(**options):
        engine = Engine(bf16_model, chunked_prefill_size=64, max_running_requests=32, max_total_tokens=8192,
                        **options)
        engine.core.debug_checks = True
        engines.append(engine)
        return engine

    yield make
    for e in engines:
        e.shutdown()


def outputs(results) -> list[tuple]:
    return [(tuple(r["output_ids"]), tuple(lp for lp, *_ in r["meta_info"]["output_token_logprobs"]))
            for r in results]


def alone_and_together(make_engine, **options) -> tuple[list[tuple], list[tuple]]:
    """Each prompt by itself (the cache warm from the ones before: its prefix is read, not computed), then all
    in one call on a fresh engine: 26 requests decode together (a shared prefix over 24 requests is where the
    cascade would run), prompts chunked by 64 tokens and prefilled beside other requests' decode rows."""
    e = make_engine(**options)
    alone = outputs([e.generate(input_ids=p, sampling_params=SP, return_logprob=True) for p in PROMPTS])
    together = outputs(make_engine(**options).generate(input_ids=PROMPTS, sampling_params=SP,
                                                       return_logprob=True))
    return alone, together


def test_a_request_comes_out_the_same_alone_and_in_a_batch(make_bf16_engine):
    alone, together = alone_and_together(make_bf16_engine)
    assert make_bf16_engine().get_stats()["batch_invariant"] is True
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, f"prompt {i}"


def test_without_it_the_same_comparison_finds_differences(make_bf16_engine):
    """The property is not free: SDPA's prefill rows and the cascade's rows depend on the call's shapes."""
    alone, together = alone_and_together(make_bf16_engine, batch_invariant=False)
    assert make_bf16_engine(batch_invariant=False).get_stats()["batch_invariant"] is False
    assert sum(a != t for a, t in zip(alone, together)) > 0


def test_the_claim_follows_the_probe_and_a_dependent_projection_is_named(make_engine, engine_model, monkeypatch):
    """The float32 tiny model: the engine claims the property exactly when every projection's probe passes
    (torch's float32 matmul took another path below ~12 rows here), and refuses to promise it, naming the
    projection, when one does not."""
    from sglite.runtime.engine import model_runner
    from sglite.runtime.linear import leaf_layers, rows_independent

    probed = all(rows_independent(x) for layer in engine_model.net.linears() for x in leaf_layers(layer))
    assert make_engine().get_stats()["batch_invariant"] is probed
    monkeypatch.setattr(model_runner, "rows_independent", lambda layer: layer.dtype != torch.float32)
    assert make_engine().get_stats()["batch_invariant"] is False
    with pytest.raises(ValueError, match=r"batch_invariant=True cannot hold: the DenseLinear float32 \[\d+ x 64\]"):
        make_engine(batch_invariant=True)


def test_bad_values_are_named(make_engine):
    with pytest.raises(ValueError, match="batch_invariant"):
        make_engine(batch_invariant="yes")

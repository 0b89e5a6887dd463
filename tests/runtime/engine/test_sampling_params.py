"""SamplingParams validation: invalid values raise ValueError naming the key."""
from __future__ import annotations

import dataclasses

import pytest

from sglite.runtime.engine import EngineConfig, SamplingParams


@pytest.mark.parametrize("key,value", [
    ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", 0), ("top_k", -2), ("min_p", 1.5),
    ("max_new_tokens", -1), ("frequency_penalty", 3.0), ("presence_penalty", -2.5), ("repetition_penalty", 0.0),
    ("n", 0), ("stop", [""]), ("stop_token_ids", [-1]), ("seed", "x"), ("ignore_eos", "yes"),
    ("max_new_tokens", 1.5), ("temperature", "hot"),
])
def test_invalid_value_names_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        SamplingParams.from_dict({key: value})


def test_unknown_key_is_named():
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams.from_dict({"max_tokens": 5})


def test_min_new_tokens_above_max():
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams.from_dict({"max_new_tokens": 2, "min_new_tokens": 3})


def test_only_one_grammar():
    with pytest.raises(ValueError, match="only one"):
        SamplingParams.from_dict({"regex": "a", "json_schema": "{}"})


def test_conversions_and_frozen():
    p = SamplingParams.from_dict({"stop": "###", "json_schema": {"type": "object"}, "temperature": 0, "top_p": None})
    assert p.stop == ("###",) and p.json_schema == '{"type": "object"}' and p.is_greedy and p.top_p == 1.0
    assert p.grammar_spec == ("json_schema", '{"type": "object"}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.temperature = 1.0
    assert dataclasses.replace(p, temperature=0.5).temperature == 0.5


def test_engine_config_validation():
    with pytest.raises(ValueError, match="schedule_policy"):
        EngineConfig(schedule_policy="random")
    with pytest.raises(ValueError, match="chunked_prefill_size"):
        EngineConfig(chunked_prefill_size=0)
    with pytest.raises(ValueError, match="max_batch"):
        EngineConfig.from_kwargs(max_batch=3)
    for key, bad in (("num_threads", 0), ("grammar_mask_overlap", "maybe"), ("json_property_order", "sorted"),
                     ("json_whitespace", "pretty")):
        with pytest.raises(ValueError, match=key):
            EngineConfig(**{key: bad})


def test_num_threads_sets_torch_threads(make_engine):
    import torch

    before = torch.get_num_threads()
    try:
        make_engine(num_threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)

"""Engine options: EngineConfig validation; sampling options are the protocol's (tests/test_protocol.py)."""
from __future__ import annotations

import pytest

from sglite.runtime.engine import EngineConfig, SamplingParams


def test_engine_uses_the_protocol_definition():
    from sglite import protocol

    assert SamplingParams is protocol.SamplingParams   # one definition (tests/test_protocol.py covers it)


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

"""The request protocol (sglite/protocol.py): one validation of every sampling field, errors that name their
field, one schema conversion. Torch-free: this module must not import torch."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from sglite.protocol import (FinishKind, FinishReason, GenerateOutput, GenerateRequest, RequestError,
                             SamplingParams, StreamChunk, chunk_to_dict, json_schema_text)


@pytest.mark.parametrize("key,value", [
    ("temperature", -0.1), ("temperature", -1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", 0), ("top_k", -2),
    ("min_p", 1.5), ("max_new_tokens", -1), ("frequency_penalty", 3.0), ("presence_penalty", -2.5),
    ("repetition_penalty", 0.0), ("n", 0), ("stop", [""]), ("stop_token_ids", [-1]), ("seed", "x"),
    ("ignore_eos", "yes"), ("max_new_tokens", 1.5), ("temperature", "hot"), ("json_schema", "{not json"),
    ("json_schema", 42), ("stop", 5),
])
def test_invalid_value_raises_request_error_naming_the_field(key, value):
    with pytest.raises(RequestError) as info:
        SamplingParams.from_dict({key: value})
    assert info.value.param == key and key in str(info.value) and isinstance(info.value, ValueError)


def test_unknown_key_is_named_with_a_hint():
    with pytest.raises(RequestError) as info:
        SamplingParams.from_dict({"temprature": 0.5})
    assert info.value.param == "temprature" and info.value.code == "unknown_param"
    assert "temperature" in info.value.message


def test_aliases_and_conversions():
    p = SamplingParams.from_dict({"max_tokens": 5, "stop": "###", "json_schema": {"type": "object"},
                                  "temperature": 0, "top_p": None})
    assert p.max_new_tokens == 5 and p.stop == ("###",) and p.json_schema == '{"type": "object"}'
    assert p.is_greedy and p.top_p == 1.0 and isinstance(p.temperature, float)
    assert p.constraint == ("json_schema", '{"type": "object"}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.temperature = 1.0
    assert p.replace(temperature=0.5, stop=["a"]).stop == ("a",)
    with pytest.raises(RequestError) as info:
        p.replace(top_k=0)
    assert info.value.param == "top_k"


def test_cross_field_rules():
    with pytest.raises(RequestError, match="min_new_tokens"):
        SamplingParams.from_dict({"max_new_tokens": 2, "min_new_tokens": 3})
    with pytest.raises(RequestError, match="only one") as info:
        SamplingParams.from_dict({"regex": "a", "json_schema": "{}"})
    assert info.value.param == "json_schema"


def test_to_dict_round_trips():
    p = SamplingParams.from_dict({"max_new_tokens": 7, "stop": ["x"], "temperature": 0.0, "regex": "[a-z]+"})
    assert p.to_dict() == {"max_new_tokens": 7, "stop": ["x"], "temperature": 0.0, "regex": "[a-z]+"}
    assert SamplingParams.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_pydantic_models_are_closed_dicts_as_given():
    from pydantic import BaseModel, ConfigDict

    class Inner(BaseModel):
        x: int

    class Outer(BaseModel):
        name: str
        inner: Inner

    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int

    closed = json.loads(json_schema_text(Outer))
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["Inner"]["additionalProperties"] is False
    assert json.loads(json_schema_text(Open)).get("additionalProperties", True) is True   # extra="allow": open
    as_dict = Outer.model_json_schema()
    assert json.loads(json_schema_text(as_dict)) == as_dict   # a dict is the user's exact schema
    assert SamplingParams.from_dict({"json_schema": Outer}).json_schema == json_schema_text(Outer)


def test_generate_request_validation():
    r = GenerateRequest(text="hi", params={"max_new_tokens": 3, "n": 2})
    assert r.sample_ids() == [f"{r.rid}-0", f"{r.rid}-1"] and r.params.max_new_tokens == 3
    assert GenerateRequest(input_ids=[1, 2]).input_ids == (1, 2)
    for kwargs, param in [(dict(), "prompt"), (dict(text="a", input_ids=[1]), "prompt"),
                          (dict(text="a", top_logprobs_num=-1), "top_logprobs_num"),
                          (dict(text="a", params={"temperature": -1}), "temperature")]:
        with pytest.raises(RequestError) as info:
            GenerateRequest(**kwargs)
        assert info.value.param == param, kwargs


def test_outputs_to_sglang_dicts():
    reason = FinishReason.abort("shutdown", "engine shut down")
    assert reason.kind is FinishKind.ABORT and reason.to_dict() == {
        "type": "abort", "matched": None, "message": "engine shut down", "code": "shutdown"}
    assert FinishReason.stop(2).to_dict() == {"type": "stop", "matched": 2}
    out = GenerateOutput("r", "ab", (1, 2), FinishReason.length(), prompt_tokens=3).to_dict()
    assert out["text"] == "ab" and out["output_ids"] == [1, 2] and out["meta_info"]["completion_tokens"] == 2
    assert "output_token_logprobs" not in out["meta_info"]
    chunk = StreamChunk("r", "b", (2,), prompt_tokens=3, completion_tokens=2)
    assert chunk_to_dict(chunk, False) == {"text": "b", "output_ids": [2], "meta_info": {
        "id": "r", "prompt_tokens": 3, "completion_tokens": 2, "forced_tokens": 0, "cached_tokens": 0,
        "decode_passes": 0, "spec_accepted_tokens": 0, "capped_values": 0, "closed_at_budget": False,
        "finish_reason": None}}


def test_request_error_pickles():
    import pickle

    e = pickle.loads(pickle.dumps(RequestError("top_p", "invalid_value", "bad")))
    assert (e.param, e.code, e.message) == ("top_p", "invalid_value", "bad")


def test_protocol_imports_no_torch():
    code = "import sys, sglite.protocol; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_output_counters_are_one_list():
    """A counter both a stream chunk and a finished output carry is in OUTPUT_COUNTERS, which meta_info reports."""
    import dataclasses

    from sglite.protocol import OUTPUT_COUNTERS, FinishReason, GenerateOutput, StreamChunk

    def counters(cls):
        return {f.name for f in dataclasses.fields(cls) if f.type in ("int", "bool")}

    assert counters(StreamChunk) == set(OUTPUT_COUNTERS)
    assert counters(GenerateOutput) | {"completion_tokens"} == set(OUTPUT_COUNTERS)   # a property there
    out = GenerateOutput("r", "t", (1, 2), FinishReason.stop(), prompt_tokens=3, capped_values=1)
    assert {k: out.meta_info()[k] for k in OUTPUT_COUNTERS} == {k: getattr(out, k) for k in OUTPUT_COUNTERS}

"""One field list: every SamplingParams field reaches the engine through both OpenAI routes under its OpenAI name,
and each list that names sampling fields outside sglite/protocol.py is tied to it here."""
from __future__ import annotations

import dataclasses

import pytest

from sglite.backend import openai as openai_backend
from sglite.protocol import CONSTRAINT_KINDS, FIELD_NAMES, OPENAI_NAMES, SamplingParams
from sglite.server import ModelInfo
from sglite.server.bodies import ChatCompletionRequest, CompletionRequest
from sglite.server.openai_api import _PASSTHROUGH, OpenAIServing

# one value off its default for every field (constraints: one at a time, so regex stands for them all here)
OFF_DEFAULT = {
    "max_new_tokens": 7, "min_new_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
    "frequency_penalty": 0.5, "presence_penalty": -0.5, "repetition_penalty": 1.1, "stop": ("x",),
    "stop_token_ids": (3,), "stop_regex": ("y+",), "ignore_eos": True, "skip_special_tokens": False,
    "no_stop_trim": True, "n": 2, "seed": 11, "regex": "[ab]+", "logit_bias": ((5, 1.5),),
    "dry_multiplier": 0.4, "dry_base": 2.0, "dry_allowed_length": 3, "dry_sequence_breakers": ("\n",),
    "close_at_budget": False,
}


def _body_value(name: str, value):
    if name == "logit_bias":
        return {str(t): b for t, b in value}
    return list(value) if isinstance(value, tuple) else value


def test_every_field_has_a_value_here():
    assert set(OFF_DEFAULT) | set(CONSTRAINT_KINDS) == FIELD_NAMES, "a new SamplingParams field: add it above"


@pytest.mark.parametrize("body_type", [ChatCompletionRequest, CompletionRequest])
def test_openai_bodies_accept_every_sampling_field(body_type):
    names = set(body_type.model_fields)
    missing = sorted(OPENAI_NAMES.get(f, f) for f in FIELD_NAMES if OPENAI_NAMES.get(f, f) not in names)
    assert not missing, f"{body_type.__name__} does not accept {missing}"


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_every_field_reaches_sampling_params(route):
    from sglite.runtime.tokenizer import load_tokenizer

    serving = OpenAIServing(client=None, info=ModelInfo(name="m", tokenizer=load_tokenizer(), max_context=512))
    body = {OPENAI_NAMES.get(k, k): _body_value(k, v) for k, v in OFF_DEFAULT.items()}
    if route == "chat":
        req = ChatCompletionRequest.model_validate({**body, "messages": [{"role": "user", "content": "hi"}]})
    else:
        req = CompletionRequest.model_validate({**body, "prompt": "hi"})
    params = serving._sampling_params(req, prompt_len=4, max_tokens=req.max_tokens, prompt_param="prompt")
    assert params == SamplingParams(**OFF_DEFAULT)
    assert dataclasses.replace(params, close_at_budget=True) != params   # the comparison sees every field


def test_hand_lists_agree_with_protocol():
    assert set(_PASSTHROUGH) | set(OPENAI_NAMES) | {"logit_bias"} == FIELD_NAMES
    assert set(openai_backend._PARAM_NAMES) <= FIELD_NAMES
    for ours, theirs in openai_backend._PARAM_NAMES.items():
        assert theirs == OPENAI_NAMES.get(ours, ours)
    for flavour, kinds in openai_backend.CONSTRAINT_FIELDS.items():
        assert set(kinds) <= set(CONSTRAINT_KINDS), flavour

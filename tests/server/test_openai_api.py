"""The OpenAI-compatible endpoints, driven by the real `openai` client."""
from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel

from sglite.protocol import SamplingParams, closed_schema, json_schema_text

MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_models(client):
    import openai

    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_chat_completion(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_greedy_is_deterministic_and_n(client):
    a = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, temperature=0)
    b = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, temperature=0, n=2)
    assert len(b.choices) == 2 and [c.index for c in b.choices] == [0, 1]
    assert b.choices[0].message.content == a.choices[0].message.content
    assert b.usage.prompt_tokens == a.usage.prompt_tokens  # the prompt counts once


def test_chat_stream_matches_non_stream(client):
    full = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-4  # greedy picks the top token


def test_completions(client):
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5, temperature=0, logprobs=1)
    assert r.object == "text_completion"
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens
    batch = client.completions.create(model="tiny", prompt=["a", "b c"], max_tokens=3, temperature=0)
    assert len(batch.choices) == 2


def test_completions_stream(client):
    stream = client.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    full = client.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0)
    assert text == full.choices[0].text


def test_stop_string(client, real_engine):
    full = client.completions.create(model="tiny", prompt="Hello", max_tokens=12, temperature=0)
    text = full.choices[0].text
    if len(text.strip()) < 4:
        pytest.skip("greedy output too short to pick a stop string from")
    stop = text.strip()[2:4]
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=12, temperature=0, stop=[stop])
    assert stop not in r.choices[0].text and r.choices[0].finish_reason == "stop"


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "ok": {"type": "boolean"}, "kind": {"enum": ["a", "b"]}},
          "required": ["name", "ok", "kind"], "additionalProperties": False}


def test_response_format_json_schema(client, grammar):
    jsonschema = pytest.importorskip("jsonschema")
    r = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=64, temperature=0.7, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


def test_json_closed_at_max_tokens_reports_length(client, grammar):
    """A json_schema output that max_tokens cuts short is closed by its grammar (valid JSON), and the reason is
    `length`, as OpenAI would give for an output that ran out of tokens."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}},
              "required": ["notes"], "additionalProperties": False}
    reasons = []
    for seed in range(4):
        r = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=16, temperature=1.0, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "notes", "schema": schema}})
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        assert r.usage.completion_tokens <= 16
        reasons.append(r.choices[0].finish_reason)
    assert "length" in reasons, reasons


class Address(BaseModel):
    city: str
    zip: int


class Person(BaseModel):   # every field required, as OpenAI's strict mode asks of a model
    name: str
    tags: list[str]
    kind: Literal["a", "b"]
    address: Address


@pytest.fixture()
def sent_requests(engine_and_info, monkeypatch) -> list:
    """The GenerateRequests the server hands the engine during the test."""
    engine, sent = engine_and_info[0], []
    real_submit = engine.submit
    monkeypatch.setattr(engine, "submit", lambda request, loop=None: sent.append(request) or real_submit(request, loop))
    return sent


def test_pydantic_response_format_is_json_schema_text(client, engine_and_info, sent_requests):
    """`parse(response_format=Model)` in the openai SDK sends a strict json_schema; the server hands the engine
    the schema `protocol.json_schema_text(Model)` gives, so both entry points compile to one grammar."""
    import openai

    with pytest.raises(openai.LengthFinishReasonError):   # one token: never a whole object
        client.chat.completions.parse(model="tiny", messages=MESSAGES, max_tokens=1, response_format=Person)
    sent = sent_requests[0].params.json_schema
    assert json.loads(sent) == json.loads(json_schema_text(Person))
    grammar = getattr(engine_and_info[0], "grammar", None)   # the real engine's compiler caches by schema
    if grammar is not None:
        assert grammar.compile(SamplingParams(json_schema=sent)) is \
            grammar.compile(SamplingParams.from_dict({"json_schema": Person}))


@pytest.mark.parametrize("strict", [True, False, None])
def test_response_format_strict_closes_objects(client, sent_requests, strict):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1, response_format={
        "type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": strict}})
    sent = json.loads(sent_requests[0].params.json_schema)
    assert sent == (closed_schema(schema) if strict else schema)


def test_extra_body_regex(client, grammar):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16, temperature=1.0,
                                       extra_body={"regex": "(yes|no)-[0-9]{3}"})
    import re

    assert re.fullmatch("(yes|no)-[0-9]{3}", r.choices[0].message.content)


def test_extra_body_span_of(client, grammar):
    """sglite's own field: the reply is a verbatim span of the given text."""
    text = "Acme Widgets Ltd. reported revenue of 512.3 million and a loss of 3.1 in Q4."
    for seed in range(3):
        r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=1.0,
                                           seed=seed, extra_body={"span_of": text})
        out = r.choices[0].message.content
        assert out and out in text, out


def test_response_format_json_object(client, grammar):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0,
                                       response_format={"type": "json_object"})
    assert r.choices[0].message.content.lstrip().startswith("{")  # random weights: an object, maybe unfinished


def test_chat_stream_n2(client):
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, temperature=1.0, seed=3,
                                            n=2, stream=True)
    texts, finished = {0: "", 1: ""}, set()
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    full = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, temperature=1.0, seed=3, n=2)
    assert [c.message.content for c in full.choices] == [texts[0], texts[1]]  # seed + i per choice: reproducible


def test_completions_echo_logprobs(client, engine_and_info, real_engine):
    r = client.completions.create(model="tiny", prompt="One two three", max_tokens=2, temperature=0, echo=True,
                                  logprobs=1)
    choice = r.choices[0]
    assert choice.text.startswith("One two three")
    prompt_len = len(engine_and_info[1].tokenizer.encode("One two three"))
    assert len(choice.logprobs.tokens) == prompt_len + r.usage.completion_tokens
    assert choice.logprobs.token_logprobs[0] is None  # nothing predicts the first prompt token


def test_stream_logprobs_cover_every_token(client, real_engine):
    first = client.completions.create(model="tiny", prompt="Hello", max_tokens=1, temperature=0).choices[0].text
    # a stop string that starts with the first token's text: the engine holds that text back for a step
    stream = client.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0, logprobs=0,
                                       stop=[first + "\x00"], stream=True, stream_options={"include_usage": True})
    n_logprobs, usage = 0, None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            n_logprobs += len(c.logprobs.tokens) if c.logprobs else 0
    assert n_logprobs == usage.completion_tokens

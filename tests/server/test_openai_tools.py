"""OpenAI chat API: tools and tool_choice (calls generated under the functions' schemas, `tool_calls` whole and
streamed), the openai SDK's parse and stream helpers, unknown models, max_tokens, logit_bias."""
from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from sglite.server.bodies import ChatCompletionRequest
from sglite.server.tools import ToolCallText, parse_call, render_tool_messages, tool_plan

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                                       "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_call(call):
    jsonschema = pytest.importorskip("jsonschema")
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


# --- units ----------------------------------------------------------------------------------------------------
def test_tool_plan_modes():
    def plan(**kw):
        return tool_plan(ChatCompletionRequest(messages=MESSAGES, **kw))
    assert plan() is None and plan(tools=TOOLS, tool_choice="none") is None
    assert plan(tools=TOOLS).mode == "auto"
    p = plan(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert p.mode == "required" and [t.function.name for t in p.callable] == ["get_time"]
    assert p.call_schema["properties"]["name"] == {"const": "get_time"}
    assert len(plan(tools=TOOLS, tool_choice="required").call_schema["anyOf"]) == 2


def test_call_text_streams_the_generated_arguments():
    text = '{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}'
    for step in (1, 3, 7):
        t = ToolCallText()
        deltas = [d for i in range(0, len(text), step) for d in t.feed(text[i:i + step], final=False)]
        deltas += t.feed("", final=True)
        assert deltas[0]["function"] == {"name": "get_weather", "arguments": ""} and deltas[0]["id"] == t.id
        args = "".join(d["function"]["arguments"] for d in deltas[1:])
        assert args == '{"city":"Paris","unit":"c"}' == parse_call(text)[1]
    t = ToolCallText()   # arguments before name: parsed whole at the end
    assert t.feed('{"arguments": {"tz": "UTC"}, "name": "get_time"}', final=False) == []
    (d,) = t.feed("", final=True)
    assert d["function"]["name"] == "get_time" and json.loads(d["function"]["arguments"]) == {"tz": "UTC"}


def test_tool_messages_rendering():
    plan = tool_plan(ChatCompletionRequest(messages=MESSAGES, tools=TOOLS))
    history = [{"role": "system", "content": "Be brief."}, MESSAGES[0],
               {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    out = render_tool_messages(history, plan, tool_role=False)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.\n\nYou can call functions.")
    assert '"get_weather"' in out[0]["content"] and '"get_time"' in out[0]["content"]
    tagged = out[2]["content"]   # as `auto` generates calls
    assert tagged.startswith("<tool_call>\n") and tagged.endswith("\n</tool_call>")
    assert json.loads(tagged[len("<tool_call>"):-len("</tool_call>")]) == {
        "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
    assert "tool_calls" not in out[2]
    assert out[3] == {"role": "user", "content": "Result of get_weather (call_1):\n18 C, sunny"}
    kept = render_tool_messages(history, None, tool_role=True)
    assert kept[3]["role"] == "tool" and len(kept) == 4 and kept[0]["content"] == "Be brief."


# --- over HTTP --------------------------------------------------------------------------------------------------
def test_required_tool_call(client, grammar):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                       max_tokens=64, temperature=0.8, seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    check_call(call)


def test_named_tool_call_streams_like_whole(client, grammar):
    kw = dict(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=64, temperature=0,
              tool_choice={"type": "function", "function": {"name": "get_time"}})
    whole = client.chat.completions.create(**kw).choices[0]
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_time"
    check_call(call)
    name, args, ids, finish = None, "", set(), None
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or ():
                ids.add(d.id) if d.id else None
                name = d.function.name or name
                args += d.function.arguments or ""
    assert (name, args, finish, len(ids)) == ("get_time", call.function.arguments, "tool_calls", 1)


def _angle_bias(info, bias):
    return {str(info.tokenizer.encode("<")[0]): bias}


def test_auto_answers_text_otherwise(client, engine_and_info, grammar):
    """No `<tool_call>` written: the reply is all content (text + calls: test_tool_structural_tags.py)."""
    kw = dict(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=8, temperature=0,
              logit_bias=_angle_bias(engine_and_info[1], -100))
    r = client.chat.completions.create(**kw)
    choice = r.choices[0]
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kw, stream=True)
                       if c.choices)
    assert streamed == choice.message.content


def test_tool_history_round_trip(client):
    messages = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]
    r = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, tool_choice="none",
                                       max_tokens=4)
    assert r.choices[0].message.tool_calls is None


@pytest.mark.parametrize("kw,param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "strnig"}}}}}], "tool_choice": "required"}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "strnig"}}}}}]}, "tools"),                       # auto: the structural tag's schema
])
def test_tool_errors(client, grammar, kw, param):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, **kw)
    assert info.value.body["param"] == param


class Weather(BaseModel):
    city: str = Field(max_length=10)
    unit: Literal["c", "f"]


def test_sdk_parse_with_pydantic_tool(client, grammar):
    import openai

    r = client.chat.completions.parse(model="tiny", messages=MESSAGES, max_tokens=64, temperature=0,
                                      tools=[openai.pydantic_function_tool(Weather)], tool_choice="required")
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "Weather" and isinstance(call.function.parsed_arguments, Weather)


def test_sdk_parse_response_format(client, grammar):
    r = client.chat.completions.parse(model="tiny", messages=MESSAGES, max_tokens=64, temperature=0,
                                      response_format=Weather)
    assert isinstance(r.choices[0].message.parsed, Weather)


@pytest.mark.parametrize("beta", [False, True])
def test_sdk_stream_helpers(client, grammar, beta):
    completions = client.beta.chat.completions if beta else client.chat.completions
    with completions.stream(model="tiny", messages=MESSAGES, max_tokens=64, temperature=0,
                            response_format=Weather) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == final.choices[0].message.content
    assert isinstance(final.choices[0].message.parsed, Weather)


def test_sdk_stream_helper_with_tool(client, grammar):
    import openai

    with client.chat.completions.stream(model="tiny", messages=MESSAGES, max_tokens=64, temperature=0,
                                        tools=[openai.pydantic_function_tool(Weather)],
                                        tool_choice="required") as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    assert len(done) == 1 and isinstance(done[0].parsed_arguments, Weather)
    assert final.choices[0].message.tool_calls[0].function.parsed_arguments == done[0].parsed_arguments


# --- other OpenAI rules -----------------------------------------------------------------------------------------
def test_unknown_model_is_404(client):
    import openai

    for call in (lambda: client.chat.completions.create(model="gpt-9", messages=MESSAGES, max_tokens=2),
                 lambda: client.completions.create(model="gpt-9", prompt="x", max_tokens=2)):
        with pytest.raises(openai.NotFoundError) as info:
            call()
        assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"


def test_max_tokens_below_one(client):
    import openai

    for kw in ({"max_tokens": 0}, {"max_completion_tokens": 0}, {"max_tokens": -3}):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="tiny", messages=MESSAGES, **kw)
        assert info.value.body["param"] == next(iter(kw))
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=0)
    scored = client.completions.create(model="tiny", prompt="One two", max_tokens=0, echo=True, logprobs=0)
    assert scored.choices[0].text == "One two" and scored.usage.completion_tokens == 0


def test_logit_bias(client, engine_and_info, real_engine):
    tid = engine_and_info[1].tokenizer.encode(" banana")[0]
    r = client.completions.create(model="tiny", prompt="Hello", max_tokens=4, temperature=0, logprobs=0,
                                  logit_bias={str(tid): 100})
    assert r.choices[0].text == " banana" * 4
    sampled = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3, temperature=1.0, seed=1,
                                             logit_bias={str(tid): 100})
    assert sampled.choices[0].message.content == " banana" * 3


@pytest.mark.parametrize("bias,param", [({"99999999": 1}, "logit_bias"), ({"5": 101}, "logit_bias"),
                                        ({"x": 1}, "logit_bias")])
def test_logit_bias_errors(client, bias, param):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, logit_bias=bias)
    assert info.value.body["param"] == param


def test_seed_n_and_top_logprobs(client):
    kw = dict(model="tiny", messages=MESSAGES, max_tokens=5, temperature=1.0, seed=11, n=3, logprobs=True,
              top_logprobs=3)
    a, b = client.chat.completions.create(**kw), client.chat.completions.create(**kw)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    for c in a.choices:
        assert all(len(e.top_logprobs) == 3 for e in c.logprobs.content)

"""tool_choice "auto" under a structural tag: the reply is free text in which `<tool_call>` starts a call under
the function's schema. A scripted engine (the FakeEngine replying with a fixed text, then EOS) checks the split
into `content` + `tool_calls`, whole and streamed; the grammar of ToolPlan.structural_tag is checked model-free
to accept those scripts and refuse calls outside the schemas."""
from __future__ import annotations

import json

import pytest

from sglite.protocol import FinishReason, GenerateOutput, StreamChunk
from sglite.server import ModelInfo, ServerThread, create_app
from sglite.server.bodies import ChatCompletionRequest
from sglite.server.tool_reply import ToolReplyText, split_reply
from sglite.server.tools import tool_plan

from .fake_engine import FakeEngine
from .test_openai_tools import MESSAGES, SCHEMAS, TOOLS

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
TEXT_AND_CALL = f"Let me check the weather.\n{WEATHER_CALL}"
TWO_CALLS = f"  I will look up two things.\n{WEATHER_CALL}\nand then\n{TIME_CALL}\n"


class ScriptedEngine(FakeEngine):
    """Replies to every request with `script`, one token per step, then stops as at EOS; keeps the requests."""

    def __init__(self, tokenizer, script: str):
        super().__init__(tokenizer, max_context=2048)
        self.script_ids = tokenizer.encode(script)
        self.requests = []

    def submit(self, request, loop=None):
        self.requests.append(request)
        return super().submit(request, loop)

    def _step(self, s) -> None:
        new = (self.script_ids[len(s.out)],) if s.abort is None and len(s.out) < len(self.script_ids) else ()
        s.out += new
        finish = s.abort
        if finish is None and len(s.out) == len(self.script_ids):
            finish = FinishReason.stop()
        elif finish is None and len(s.out) >= s.request.params.max_new_tokens:
            finish = FinishReason.length()
        text = self.tokenizer.decode(list(new))
        s.text += text
        chunk = StreamChunk(s.rid, text, new, prompt_tokens=len(s.ids), completion_tokens=len(s.out),
                            finish_reason=finish)
        output = None
        if finish is not None:
            with self._lock:
                del self._running[s.rid]
            output = GenerateOutput(s.rid, s.text, tuple(s.out), finish, len(s.ids))
        s.handle.push(chunk, output)


@pytest.fixture(scope="module")
def tokenizer():
    from sglite.runtime.tokenizer import load_tokenizer
    return load_tokenizer()


@pytest.fixture()
def scripted(tokenizer):
    """(make_client(script) -> (openai client, engine)); servers are closed at the end."""
    import openai

    opened = []

    def make(script: str):
        engine = ScriptedEngine(tokenizer, script)
        server = ServerThread(create_app(engine, ModelInfo(name="tiny", tokenizer=tokenizer, max_context=2048)))
        server.__enter__()
        opened.append((server, engine))
        return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60), engine
    yield make
    for server, engine in opened:
        server.__exit__(None, None, None)
        engine.shutdown()


def _stream(client, **kw):
    """(content, {index: (name, arguments)}, ids, finish) from a streamed choice 0."""
    content, calls, ids, finish = "", {}, set(), None
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            content += c.delta.content or ""
            for d in c.delta.tool_calls or ():
                if d.id:
                    ids.add(d.id)
                name, args = calls.get(d.index, (None, ""))
                calls[d.index] = (d.function.name or name, args + (d.function.arguments or ""))
    return content, calls, ids, finish


# --- over HTTP, scripted --------------------------------------------------------------------------------------
def test_auto_text_and_a_call(scripted):
    client, engine = scripted(TEXT_AND_CALL)
    kw = dict(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=100)
    choice = client.chat.completions.create(**kw).choices[0]
    assert choice.message.content == "Let me check the weather."
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert call.function.arguments == '{"city": "Paris", "unit": "c"}'
    assert choice.finish_reason == "tool_calls"
    tag = json.loads(engine.requests[-1].params.structural_tag)   # the reply was generated under the tag
    assert tag["triggers"] == ["<tool_call>"] and engine.requests[-1].params.json_schema is None
    assert [s["schema"] for s in tag["structures"]] == list(SCHEMAS.values())
    assert "<tool_call>" in _prompt(engine)   # the tools prompt says how to call

    content, calls, ids, finish = _stream(client, **kw)
    assert content == choice.message.content and finish == "tool_calls" and len(ids) == 1
    assert calls == {0: ("get_weather", call.function.arguments)}


def _prompt(engine) -> str:
    return engine.tokenizer.decode(list(engine.requests[-1].input_ids))


def test_auto_two_calls_streamed_like_whole(scripted):
    client, _ = scripted(TWO_CALLS)
    kw = dict(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=200)
    msg = client.chat.completions.create(**kw).choices[0].message
    assert msg.content == "I will look up two things.\nand then"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"tz": "CET"})]
    content, calls, ids, finish = _stream(client, **kw)
    assert content == msg.content and len(ids) == 2 and finish == "tool_calls"
    assert calls == {i: (c.function.name, c.function.arguments) for i, c in enumerate(msg.tool_calls)}


def test_auto_only_a_call_has_null_content(scripted):
    client, _ = scripted(TIME_CALL)
    msg = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=100).choices[0]
    assert msg.message.content is None and msg.message.tool_calls[0].function.name == "get_time"


def test_auto_cut_by_max_tokens_is_length(scripted, tokenizer):
    client, _ = scripted(TEXT_AND_CALL)
    cut = len(tokenizer.encode("Let me check the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arg"))
    choice = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=cut).choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content.startswith("Let me check the weather.<tool_call>")


# --- the split, unit --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,content,names", [
    ("Just text, no tools.", "Just text, no tools.", []),
    ("  \n", "", []),
    ("Compare a < b and <tool_ca", "Compare a < b and <tool_ca", []),   # a trigger's start stays text at the end
    (TEXT_AND_CALL + "\n", "Let me check the weather.", ["get_weather"]),
    (TWO_CALLS, "I will look up two things.\nand then", ["get_weather", "get_time"]),
    (WEATHER_CALL + TIME_CALL, None, ["get_weather", "get_time"]),
    ('Hm <tool_call>\n{"na', 'Hm<tool_call>\n{"na', []),            # cut before the name: text
])
def test_split_reply(text, content, names):
    got_content, calls = split_reply(text)
    assert got_content == content and [c["function"]["name"] for c in calls] == names
    for c in calls:
        assert json.loads(c["function"]["arguments"]) is not None
    for step in (1, 2, 3, 7):   # fed in pieces, the deltas add up to the same split
        r = ToolReplyText()
        deltas = [r.feed(text[i:i + step], final=False) for i in range(0, len(text), step)] + [r.feed("", True)]
        assert "".join(d.get("content", "") for d in deltas) == (content or "")
        args = {}
        for d in deltas:
            for p in d.get("tool_calls", ()):
                args[p["index"]] = args.get(p["index"], "") + p["function"]["arguments"]
        assert [args[i] for i in sorted(args)] == [c["function"]["arguments"] for c in calls]


# --- the grammar the tag compiles to, model-free --------------------------------------------------------------
@pytest.mark.parametrize("text,ok", [
    (TEXT_AND_CALL, True),
    (TWO_CALLS, True),
    ("No call at all.", True),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "k"}}\n</tool_call>', False),
    ('<tool_call>\n{"name": "get_date", "arguments": {}}\n</tool_call>', False),
    ('<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}', False),   # EOS only after the call ends
])
def test_structural_tag_grammar(tokenizer, text, ok):
    from sglite.runtime.constrained import GrammarCompiler

    plan = tool_plan(ChatCompletionRequest(messages=MESSAGES, tools=TOOLS))
    g = GrammarCompiler(tokenizer).compile_structural_tag(plan.structural_tag)
    m = g.matcher()
    accepted = True
    for t in tokenizer.encode(text):
        allowed = bool(m.allowed_mask()[t])
        assert allowed == m.accept_token(t)
        if not allowed:
            accepted = False
            break
    assert (accepted and m.is_accepting()) is ok

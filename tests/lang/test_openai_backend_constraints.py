"""The OpenAI backend sends each constraint in the body field of the server's flavour (vLLM's guided_*, SGLang's
and sglite's own fields, OpenAI's response_format) and refuses, before any request, one the flavour lacks.
The server is an httpx.MockTransport that records the bodies."""
from __future__ import annotations

import json

import httpx
import pytest

import sglite as sgl
from sglite.backend.openai import CONSTRAINT_FIELDS

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
CONSTRAINTS = {"regex": "[0-9]+", "ebnf": 'root ::= "yes" | "no"', "grammar": 'start: "yes" | "no"',
               "json_schema": SCHEMA}


def _backend(server=None, base_url="http://fake/v1"):
    bodies = []

    def reply(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "x", "choices": [{"index": 0, "text": "42", "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    client = httpx.Client(transport=httpx.MockTransport(reply))
    return sgl.OpenAI("m", base_url=base_url, client=client, is_chat_model=False, server=server), bodies


def _run(backend, kind, value):
    @sgl.function
    def prog(s):
        s += "Q:" + sgl.gen("x", max_tokens=4, **{kind: value})
    return prog.run(backend=backend)


@pytest.mark.parametrize("server", sorted(CONSTRAINT_FIELDS))
@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
def test_constraint_fields_per_server(server, kind):
    backend, bodies = _backend(server)
    state = _run(backend, kind, CONSTRAINTS[kind])
    field = CONSTRAINT_FIELDS[server].get(kind)
    if field is None:   # refused by name before any request
        assert not bodies and kind in str(state.error()) and repr(server) in str(state.error())
        return
    assert state.error() is None and state["x"] == "42"
    (body,) = bodies
    sent = {k: v for k, v in body.items() if k in {f for fields in CONSTRAINT_FIELDS.values() for f in fields.values()}}
    assert list(sent) == [field]
    if field == "response_format":
        assert sent[field] == {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA}}
    elif field == "guided_json":
        assert sent[field] == SCHEMA                 # vLLM takes the schema as an object
    elif kind == "json_schema":
        assert json.loads(sent[field]) == SCHEMA     # SGLang / sglite take JSON text
    else:
        assert sent[field] == CONSTRAINTS[kind]


def test_server_flavour_default_and_errors():
    assert _backend(base_url="https://api.openai.com/v1")[0].server == "openai"
    assert _backend(base_url="http://localhost:30000/v1")[0].server == "sglang"
    with pytest.raises(ValueError, match="server must be one of"):
        _backend(server="tgi")

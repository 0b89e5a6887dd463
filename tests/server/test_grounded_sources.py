"""The server's `sources` field: the texts a json_schema's grounded fields name, resolved on the server (native
/generate, one mapping or one per prompt; OpenAI routes through the request body's extra field)."""
from __future__ import annotations

import json

import pytest

DOC = "Northwind Robotics reported revenue of 412.6 million and EPS of 1.12 for the quarter."
SCHEMA = {"type": "object", "properties": {"company": {"type": "string", "x-sglite-span": "doc", "maxLength": 24},
                                           "eps": {"type": "number", "x-sglite-number": "doc"}},
          "required": ["company", "eps"]}


def _check(record: dict, doc: str = DOC) -> None:
    assert record["company"] and record["company"] in doc
    assert record["eps"] in (412.6, 1.12)


def test_native_generate_resolves_sources(http):
    body = {"text": "Extract: " + DOC, "sources": {"doc": DOC},
            "sampling_params": {"max_new_tokens": 60, "temperature": 0, "json_schema": json.dumps(SCHEMA)}}
    r = http.post("/generate", json=body)
    assert r.status_code == 200, r.text
    _check(json.loads(r.json()["text"]))


def test_native_batch_takes_a_source_per_prompt(http):
    other = "Bolt Ltd had EPS of 0.35 and revenue of 78.0 million."
    body = {"text": ["a", "b"], "sources": [{"doc": DOC}, {"doc": other}],
            "sampling_params": {"max_new_tokens": 60, "temperature": 0, "json_schema": json.dumps(SCHEMA)}}
    outs = http.post("/generate", json=body).json()
    first, second = (json.loads(o["text"]) for o in outs)
    _check(first)
    assert second["company"] in other and second["eps"] in (0.35, 78.0)


@pytest.mark.parametrize("body, says", [
    ({"sources": {"doc": DOC}, "sampling_params": {"max_new_tokens": 4}}, "no json_schema"),
    ({"sources": {"report": DOC}, "sampling_params": {"max_new_tokens": 4, "json_schema": json.dumps(SCHEMA)}},
     "names the source 'doc'"),
    ({"sources": {"doc": "  "}, "sampling_params": {"max_new_tokens": 4, "json_schema": json.dumps(SCHEMA)}},
     "is empty"),
])
def test_bad_sources_are_a_400_naming_the_field(http, body, says):
    r = http.post("/generate", json={"text": "x", **body})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "sources" and says in err["message"]


def test_openai_chat_takes_sources_in_the_body(client):
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": DOC}], max_tokens=60, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
        extra_body={"sources": {"doc": DOC}})
    _check(json.loads(r.choices[0].message.content))

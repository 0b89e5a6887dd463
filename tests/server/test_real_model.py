"""The server around the real default model (SmolLM2-135M-Instruct): a chat answer and a schema-constrained
answer that validates. Slow: loads the model."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "country": {"type": "string", "maxLength": 20}},
          "required": ["city", "country"], "additionalProperties": False}


@pytest.fixture(scope="module")
def real_client():
    import openai

    from sglite.runtime.engine import Engine
    from sglite.server import ModelInfo, ServerThread, create_app

    engine = Engine(max_running_requests=4, max_total_tokens=8192)
    with ServerThread(create_app(engine, ModelInfo.from_engine(engine, name="smollm2"))) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    engine.shutdown()


def test_chat(real_client):
    r = real_client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "What is 2+2?"}],
                                            max_tokens=16, temperature=0)
    assert r.choices[0].message.content.strip()


def test_json_schema(real_client):
    jsonschema = pytest.importorskip("jsonschema")
    r = real_client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Name a city and its country as JSON."}],
        max_tokens=64, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA}})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)

"""The language's RuntimeEndpoint backend speaks /generate: generation, streaming, prefix commit and select."""
from __future__ import annotations

import pytest


@pytest.fixture()
def endpoint(server, engine_and_info):
    RuntimeEndpoint = pytest.importorskip("sglite.backend.runtime_endpoint").RuntimeEndpoint
    ep = RuntimeEndpoint(server.url, tokenizer=engine_and_info[1].tokenizer)
    yield ep
    ep.shutdown()


def test_generate_and_stream(endpoint):
    body = {"prompt": "The capital of France is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    out = endpoint._generate(body)
    chunks = list(endpoint._generate_stream(body))
    assert "".join(c["text"] for c in chunks) == out["text"]
    assert chunks[-1]["meta_info"]["finish_reason"] == out["meta_info"]["finish_reason"]


def test_commit_prefix_and_select(endpoint, real_engine):
    from sglite.backend.base import Prompt
    from sglite.lang.choices import token_length_normalized

    prompt = Prompt("Q: Is the sky blue?\nA:")
    endpoint.commit_prefix(prompt)
    decision = endpoint.select(prompt, [" yes", " no", " maybe"], 0.0, token_length_normalized)
    assert decision is not None
    assert endpoint.get_model_info()["tokenizer_path"] == "default"

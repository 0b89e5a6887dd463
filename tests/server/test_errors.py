"""Bad input gets a 4xx with an OpenAI-style error body naming the problem; the server keeps serving."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

from .conftest import API_KEY

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def test_malformed_json(http):
    err = _error(http.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type":
                                                                                       "application/json"}), 400)
    assert "JSON" in err["message"]


def test_body_not_an_object(http):
    _error(http.post("/v1/chat/completions", json=[1, 2]), 400)


@pytest.mark.parametrize("patch, param", [
    ({"max_tokens": "ten"}, "max_tokens"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"temperature": [1]}, "temperature"),
    ({"max_tokenz": 3}, "max_tokenz"),
])
def test_wrong_types_and_unknown_fields(http, patch, param):
    err = _error(http.post("/v1/chat/completions", json={**CHAT, **patch}), 400)
    assert err["param"] == param


@pytest.mark.parametrize("patch, param", [
    ({"temperature": -1.0}, "temperature"),
    ({"max_tokens": -3}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"top_logprobs": 3}, "top_logprobs"),  # without logprobs
])
def test_invalid_sampling_values(http, patch, param):
    err = _error(http.post("/v1/chat/completions", json={**CHAT, **patch}), 400)
    assert err["param"] == param


def test_temperature_minus_one_names_the_param(http):
    """The issue's done-when: SamplingParams' RequestError becomes a 400 naming the field, on both APIs."""
    for path, body in (("/generate", {"text": "x", "sampling_params": {"temperature": -1}}),
                       ("/v1/chat/completions", {**CHAT, "temperature": -1})):
        err = _error(http.post(path, json=body), 400)
        assert (err["param"], err["code"]) == ("temperature", "invalid_value"), err


def test_engine_names_are_the_clients_names(http):
    """An engine's param is renamed to the field this API's client sent: max_new_tokens is max_tokens on the
    OpenAI routes, the prompt is 'messages' in chat and 'text' in /generate."""
    err = _error(http.post("/v1/chat/completions", json={**CHAT, "max_tokens": -3}), 400)
    assert err["param"] == "max_tokens"
    err = _error(http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": -3}}), 400)
    assert err["param"] == "max_new_tokens"
    err = _error(http.post("/generate", json={"text": "x", "sampling_params": {"max_tokens": -3}}), 400)
    assert err["param"] == "max_new_tokens"


def test_a_plain_value_error_from_the_engine_is_a_500(http, engine_and_info, monkeypatch):
    """The engine refuses requests with RequestError; any other exception is a bug, not the client's fault."""
    def submit(request, loop=None):
        raise ValueError("not a RequestError")
    monkeypatch.setattr(engine_and_info[0], "submit", submit)
    err = _error(http.post("/generate", json={"text": "x"}), 500)
    assert err["code"] == "internal_error" and err["param"] is None


def test_prompt_over_context(http, engine_and_info):
    _, info = engine_and_info
    err = _error(http.post("/v1/completions", json={"prompt": " hello" * (info.max_context + 10), "max_tokens": 2}),
                 400)
    assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
    err = _error(http.post("/v1/chat/completions", json={**CHAT, "max_tokens": info.max_context}), 400)
    assert err["param"] == "max_tokens"
    err = _error(http.post("/generate", json={"text": " hello" * (info.max_context + 10)}), 400)
    assert (err["param"], err["code"]) == ("text", "context_length_exceeded")


def test_bad_regex(http):
    err = _error(http.post("/v1/chat/completions", json={**CHAT, "regex": "(ab"}), 400)
    assert (err["param"], err["code"]) == ("regex", "invalid_grammar")


def test_bad_schema(http, grammar):
    err = _error(http.post("/v1/chat/completions", json={**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": "lots"}}}}),
        400)
    assert err["param"] == "response_format"


def test_openai_client_raises_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], temperature=-2)
    assert e.value.body["param"] == "temperature"
    # and the server is still fine
    assert client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                          max_tokens=1).choices


def test_stream_error_is_400_before_streaming(http):
    r = http.post("/v1/chat/completions", json={**CHAT, "stream": True, "temperature": -1})
    assert _error(r, 400)["param"] == "temperature"


def test_body_too_large(http, server):
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * (100 * 1024)}]}
    err = _error(http.post("/v1/chat/completions", json=big), 413)
    assert err["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"prompt": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'
    _error(http.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"}), 413)


def test_api_key(keyed_server):
    import openai as oa

    no_key = oa.OpenAI(base_url=keyed_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(oa.AuthenticationError):
        no_key.models.list()
    r = httpx.post(keyed_server.url + "/generate", json={"text": "hi"})
    assert _error(r, 401)["code"] == "invalid_api_key"
    assert httpx.get(keyed_server.url + "/health").status_code == 200  # liveness needs no key
    ok = oa.OpenAI(base_url=keyed_server.url + "/v1", api_key=API_KEY, max_retries=0)
    assert ok.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=1)


def test_unknown_route_and_method(http):
    _error(http.get("/v1/nothing"), 404)
    _error(http.get("/generate"), 405)


def test_json_without_content_type_is_accepted(http):
    r = http.post("/v1/completions", content=b'{"prompt": "hi", "max_tokens": 2}',
                  headers={"content-type": "application/x-www-form-urlencoded"})  # what `curl -d` sends
    assert r.status_code == 200, r.text


def test_overload_is_503_and_recovers(engine_and_info):
    from sglite.server import ServerThread, create_app

    engine, info = engine_and_info
    body = {"text": "Go", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}, "stream": True}
    with ServerThread(create_app(engine, info, max_pending=2)) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        with c.stream("POST", "/generate", json=body) as a, c.stream("POST", "/generate", json=body) as b:
            assert a.status_code == b.status_code == 200
            busy = c.post("/generate", json={"text": "x"})
            assert _error(busy, 503)["code"] == "server_overloaded" and busy.headers["retry-after"] == "1"
        # both streams were dropped (aborted); once their engine requests end, new ones are accepted again
        for _ in range(200):
            r = c.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}})
            if r.status_code == 200:
                break
            time.sleep(0.05)
        assert r.status_code == 200

"""Requests an attacker would send get a 4xx naming the problem, never a 500, and the probes answer."""
from __future__ import annotations

import httpx
import pytest

from sglite.server import ServerThread, create_app

from .conftest import API_KEY


def test_a_body_nested_too_deep_is_a_400(http):
    r = http.post("/generate", content=b"[" * 10_000, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    deep = b'{"text": "hi", "sampling_params": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}"
    r = http.post("/generate", content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text


def test_non_ascii_bearer_tokens_are_401_not_500(keyed_server):
    with httpx.Client(base_url=keyed_server.url, timeout=30) as c:
        r = c.get("/v1/models", headers={"Authorization": "Bearer éé".encode("utf-8")})
        assert r.status_code == 401
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 401   # it runs the model: the key guards it


def test_a_non_ascii_api_key_matches_itself(engine_and_info):
    engine, info = engine_and_info
    with ServerThread(create_app(engine, info, api_key="clé")) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.get("/v1/models", headers={"Authorization": "Bearer clé".encode("utf-8")}).status_code == 200
        assert c.get("/v1/models", headers={"Authorization": b"Bearer cle"}).status_code == 401


@pytest.mark.parametrize("sampling, extra, param", [
    ({"max_new_tokens": 10 ** 9}, {}, "max_new_tokens"),
    ({"n": 1000}, {}, "n"),
    ({"max_new_tokens": 2}, {"return_logprob": True, "top_logprobs_num": 1000}, "top_logprobs_num"),
])
def test_generate_refuses_what_the_openai_routes_refuse(http, sampling, extra, param):
    r = http.post("/generate", json={"text": "hi", "sampling_params": sampling, **extra})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_health_generate_generates_one_token(http):
    r = http.get("/health_generate")
    assert r.status_code == 200 and r.text == "ok"


class _SlowCompiles:
    """The tiny engine, with every constrained submit (where the grammar compiles) taking `delay` seconds."""

    def __init__(self, engine, delay: float):
        self._engine, self.delay = engine, delay

    def submit(self, request, loop=None):
        if request.params.constraint is not None:
            import time
            time.sleep(self.delay)
        return self._engine.submit(request, loop)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_slow_compiles_do_not_hold_up_plain_requests(engine_and_info):
    import concurrent.futures
    import time

    engine, info = engine_and_info
    with ServerThread(create_app(_SlowCompiles(engine, 3.0), info)) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 2, "regex": "[ab]+"}}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            slow = [pool.submit(c.post, "/generate", json=body) for _ in range(8)]
            time.sleep(0.3)
            t = time.monotonic()
            r = c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}})
            plain_s = time.monotonic() - t
            assert r.status_code == 200 and plain_s < 2.0, plain_s   # not queued behind 8 x 3 s of compiles
            assert all(f.result().status_code == 200 for f in slow)

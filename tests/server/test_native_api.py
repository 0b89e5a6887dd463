"""Native endpoints: /generate (what RuntimeEndpoint speaks), /health, /get_model_info, /flush_cache, /metrics."""
from __future__ import annotations

import json

import pytest

from sglite.protocol import ABORT_INTERNAL, ABORT_SHUTDOWN, FinishReason


def test_health_and_model_info(http, engine_and_info):
    assert http.get("/health").status_code == 200
    info = http.get("/get_model_info").json()
    assert info["is_generation"] and info["max_context"] == engine_and_info[1].max_context


def test_generate_text_and_ids(http, engine_and_info):
    _, info = engine_and_info
    r = http.post("/generate", json={"text": "The sky is", "sampling_params": {"max_new_tokens": 5,
                                                                                "temperature": 0}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["output_ids"]) == out["meta_info"]["completion_tokens"] <= 5
    assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length")
    ids = info.tokenizer.encode("The sky is")
    again = http.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 5,
                                                                               "temperature": 0}}).json()
    assert again["output_ids"] == out["output_ids"]


def test_generate_batch_and_logprobs(http):
    r = http.post("/generate", json={"text": ["a", "b"], "sampling_params": {"max_new_tokens": 3, "temperature": 0},
                                     "return_logprob": True, "top_logprobs_num": 2})
    outs = r.json()
    assert isinstance(outs, list) and len(outs) == 2
    for out in outs:
        lps = out["meta_info"]["output_token_logprobs"]
        assert len(lps) == out["meta_info"]["completion_tokens"]
        assert all(len(top) == 2 for top in out["meta_info"]["output_top_logprobs"])


def test_generate_stream(http):
    """SGLang's stream format: each event holds the result so far; the last one is the non-streamed result."""
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    full = http.post("/generate", json=body).json()
    with http.stream("POST", "/generate", json={**body, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln[len("data: "):] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(ln) for ln in lines[:-1]]
    for a, b in zip(events, events[1:]):
        assert b["text"].startswith(a["text"]) and b["output_ids"][:len(a["output_ids"])] == a["output_ids"]
    last = events[-1]
    assert last["text"] == full["text"] and last["output_ids"] == full["output_ids"]
    assert last["meta_info"]["finish_reason"] == full["meta_info"]["finish_reason"]


def test_generate_errors(http):
    r = http.post("/generate", json={"text": "x", "sampling_params": {"temperature": -1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2, "bogus": 1}})
    assert r.status_code == 400 and "bogus" in r.json()["error"]["message"]
    assert http.post("/generate", json={"sampling_params": {}}).status_code == 400
    assert http.post("/generate", json={"input_ids": [10 ** 9]}).status_code == 400


def test_flush_cache_and_metrics(http):
    http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert http.post("/flush_cache").status_code == 200
    text = http.get("/metrics").text
    for name in ("sglite_time_to_first_token_seconds_bucket", "sglite_time_per_output_token_seconds",
                 "sglite_generation_tokens_total", "sglite_prompt_tokens_total", "sglite_http_requests_total",
                 "sglite_num_queue_requests", "sglite_cache_hit_rate"):
        assert name in text, name


def test_health_answers_while_streaming(server, http):
    import time

    import httpx

    body = {"text": "Go", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}, "stream": True}
    with httpx.Client(base_url=server.url, timeout=60) as c, c.stream("POST", "/generate", json=body) as r:
        lines = r.iter_lines()
        next(ln for ln in lines if ln.startswith("data: "))
        t0 = time.perf_counter()
        assert http.get("/health").status_code == 200
        assert http.get("/metrics").status_code == 200
        assert time.perf_counter() - t0 < 2.0


def _finish_every_request_with(monkeypatch, engine, reason):
    """Makes each sample's last chunk arrive with `reason`, as if the engine had ended it so on its own."""
    import dataclasses

    real_submit = engine.submit

    class Handle:
        def __init__(self, h):
            self.h, self.rid = h, h.rid

        async def __aiter__(self):
            async for chunk in self.h:
                yield dataclasses.replace(chunk, finish_reason=reason) if chunk.finished else chunk

        def output(self):
            return dataclasses.replace(self.h.output(), finish_reason=reason)

    monkeypatch.setattr(engine, "submit", lambda request, loop=None: [Handle(h) for h in real_submit(request, loop)])


@pytest.mark.parametrize("code, status", [(ABORT_INTERNAL, 500), (ABORT_SHUTDOWN, 503)])
def test_engine_side_abort_is_an_error(http, engine_and_info, monkeypatch, code, status):
    """A request the engine aborts on its own (not the client) must not look like a finished response; the
    status comes from FinishReason.code (shutdown: 503), never from the message text."""
    _finish_every_request_with(monkeypatch, engine_and_info[0], FinishReason.abort(code, "boom"))
    r = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == status and "boom" in r.json()["error"]["message"]
    with http.stream("POST", "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2},
                                                "stream": True}) as s:
        events = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
    assert "boom" in events[-2] and events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: "):])["error"]["code"] == ("shutting_down" if status == 503 else code)


def test_generate_n_samples(http):
    body = {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "temperature": 1.0, "seed": 5, "n": 3}}
    outs = http.post("/generate", json=body).json()
    assert isinstance(outs, list) and len(outs) == 3
    again = http.post("/generate", json=body).json()
    assert [o["text"] for o in outs] == [o["text"] for o in again]
    assert http.post("/generate", json={"text": "Hi", "sampling_params": {"n": 0}}).status_code == 400


def test_generate_long_text_over_context(http, engine_and_info, real_engine):
    long_text = "word " * (2 * engine_and_info[1].max_context)  # tokenized on a worker thread (> 4096 chars)
    r = http.post("/generate", json={"text": long_text, "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "text"
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_concurrent_requests_are_batched(server, http, real_engine):
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def passes() -> float:
        line = next(ln for ln in http.get("/metrics").text.splitlines() if ln.startswith("sglite_forward_passes "))
        return float(line.split()[1])

    body = {"text": "Count:", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}
    before = passes()
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: httpx.post(server.url + "/generate", json=body, timeout=60).json(), range(8)))
    assert all(o["meta_info"]["completion_tokens"] == 16 for o in outs)
    assert passes() - before < 8 * 16 / 2  # one at a time would take 8 x 16 forward passes


def test_generate_constrained_logprobs_whole_and_streamed(http):
    """sglite's own field: each output token's logprob under the grammar's mask, with its text (kept even
    without return_text_in_logprobs: the texts place the values); stream events carry them cumulatively."""
    body = {"text": "Give a number", "return_constrained_logprob": True,
            "sampling_params": {"max_new_tokens": 12, "temperature": 0, "regex": "[0-9]{1,6}"}}
    full = http.post("/generate", json=body).json()
    entries = full["meta_info"]["output_token_constrained_logprobs"]
    assert [e[1] for e in entries] == full["output_ids"]
    assert "".join(e[2] for e in entries).startswith(full["text"]) and all(e[0] <= 1e-6 for e in entries)
    with http.stream("POST", "/generate", json={**body, "stream": True}) as r:
        events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: ") and ln != "data: [DONE]"]
    assert [e[1:] for e in events[-1]["meta_info"]["output_token_constrained_logprobs"]] == [e[1:] for e in entries]
    plain = http.post("/generate", json={k: v for k, v in body.items() if k != "return_constrained_logprob"}).json()
    assert "output_token_constrained_logprobs" not in plain["meta_info"]

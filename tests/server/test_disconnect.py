"""A client that goes away mid-request gets its engine request aborted and its KV slots freed."""
from __future__ import annotations

import time

import httpx
import pytest


def scrape(http: httpx.Client) -> dict[str, float]:
    """/metrics as {name{labels}: value}."""
    out = {}
    for line in http.get("/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def wait_idle(http: httpx.Client, timeout: float = 20.0) -> dict[str, float]:
    """Waits until nothing runs or waits in the engine and the server awaits no request."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(http)
        busy = (m.get("sglite_num_running_requests", 0) + m.get("sglite_num_queue_requests", 0)
                + m.get("sglite_num_inflight_requests", 0))
        if busy == 0:
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"engine still busy after {timeout}s: {m}")
        time.sleep(0.05)


def slots_outside_cache(http: httpx.Client) -> float:
    """In-use KV slots the prefix cache does not own; 0 when idle unless something leaked. (Checked before a
    flush: a flush resets the allocator and would hide a leak.)"""
    m = wait_idle(http)
    return m["sglite_kv_pool_used_slots"] - m.get("sglite_kv_pool_cached_slots", 0)


def pool_used_after_flush(http: httpx.Client) -> float:
    m = wait_idle(http)
    assert http.post("/flush_cache").status_code == 200
    m = scrape(http)
    assert "sglite_kv_pool_used_slots" in m, "engine stats give no KV pool use"
    return m["sglite_kv_pool_used_slots"]


def _aborted(m: dict[str, float]) -> float:
    return m.get("sglite_requests_aborted_by_client_total", 0)


@pytest.mark.parametrize("lines_read", [1, 3])  # 1: gone right after the role chunk, maybe before any token
def test_stream_disconnect_aborts(server, http, lines_read):
    idle = pool_used_after_flush(http)
    before = _aborted(scrape(http))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 400,
            "temperature": 1.0, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.url, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= lines_read:
                    break
    # the connection is closed; the request must be aborted long before 400 tokens
    m = wait_idle(http)
    assert _aborted(m) == before + 1
    assert m.get('sglite_requests_finished_total{reason="abort"}', 0) >= 1
    assert slots_outside_cache(http) == 0
    assert pool_used_after_flush(http) == idle


def test_non_stream_disconnect_aborts(server, http):
    idle = pool_used_after_flush(http)
    before = _aborted(scrape(http))
    body = {"text": "Once", "sampling_params": {"max_new_tokens": 450, "ignore_eos": True}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/generate", json=body, timeout=0.3)
    m = wait_idle(http)
    assert _aborted(m) == before + 1
    assert slots_outside_cache(http) == 0
    assert pool_used_after_flush(http) == idle

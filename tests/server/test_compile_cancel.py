"""A grammar compile whose request is aborted, or whose HTTP client went away, is cancelled at its next budget
checkpoint: the compile worker is freed long before the compile budget runs out, and other requests are served
meanwhile. The slow compile is a constraint whose compile loops over budget checkpoints, as a real compile's
inner loops do, until it is stopped."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from sglite.protocol import GenerateRequest, RequestError, SamplingParams
from sglite.runtime.constrained.budget import checkpoint
from sglite.server import ModelInfo, ServerThread, create_app

SLOW = "s(l)o(w)"    # the constraint text whose compile never ends by itself
BUDGET_S = 60.0


@pytest.fixture(scope="module")
def engine():
    from sglite.runtime.engine import Engine
    from sglite.runtime.testing import load_tiny_model

    engine = Engine(model=load_tiny_model(max_context=512), max_running_requests=8, max_total_tokens=4096,
                    background=True, grammar_compile_budget_s=BUDGET_S)
    engine.grammar._get_compiler()       # the token index, built before any test times a compile
    original = engine.grammar._compile

    def compile_(compiler, kind, text):
        while text == SLOW:
            checkpoint("a test's endless construct")
            time.sleep(0.005)
        return original(compiler, kind, text)
    engine.grammar._compile = compile_
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def server(engine):
    with ServerThread(create_app(engine, ModelInfo.from_engine(engine, name="tiny"))) as s:
        yield s


def _wait_until(cond, seconds: float) -> float:
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < seconds, "timed out"
        time.sleep(0.01)
    return time.monotonic() - t


def test_engine_abort_cancels_a_compile_under_way(engine):
    request = GenerateRequest(text="hi", params=SamplingParams(max_new_tokens=4, regex=SLOW), rid="slow-1")
    caught: list[BaseException] = []

    def submit() -> None:
        try:
            engine.submit(request)
        except BaseException as e:   # noqa: BLE001 - checked below
            caught.append(e)
    worker = threading.Thread(target=submit)
    worker.start()
    _wait_until(lambda: engine.grammar.compiling() == 1, 10)
    time.sleep(0.2)
    assert worker.is_alive()             # still compiling: nothing else would stop it for a minute
    t = time.monotonic()
    engine.abort("slow-1")
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - t < 2.0
    assert isinstance(caught[0], RequestError) and caught[0].code == "request_aborted"
    assert engine.grammar.compiling() == 0


def test_an_abort_that_overtakes_its_compile_stops_it_at_once(engine):
    engine.abort("slow-2")               # e.g. the client left while the request waited for a compile worker
    t = time.monotonic()
    with pytest.raises(RequestError) as e:
        engine.submit(GenerateRequest(text="hi", params=SamplingParams(max_new_tokens=4, regex=SLOW), rid="slow-2"))
    assert e.value.code == "request_aborted" and time.monotonic() - t < 2.0


def test_a_client_that_leaves_frees_its_compile_worker(engine, server):
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 4, "regex": SLOW}}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for _ in range(3):   # more slow requests than compile workers, each gone before its compile ends
            with pytest.raises(httpx.ReadTimeout):
                http.post("/generate", json=body, timeout=0.5)
        waited = _wait_until(lambda: engine.grammar.compiling() == 0, 5)
        assert waited < 5 < BUDGET_S
        # the workers are free: constrained and plain requests are served at once
        t = time.monotonic()
        r = http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3, "regex": "ab?c"}})
        assert r.status_code == 200 and r.json()["text"] in ("ac", "abc")
        r = http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3}})
        assert r.status_code == 200
        assert time.monotonic() - t < 10


def test_plain_requests_are_served_while_compiles_run(engine, server):
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 4, "regex": SLOW}}
    with httpx.Client(base_url=server.url, timeout=60) as http:
        slow = [threading.Thread(target=lambda: pytest.raises(httpx.ReadTimeout, http.post, "/generate", json=body,
                                                              timeout=3.0)) for _ in range(2)]
        for t in slow:
            t.start()
        _wait_until(lambda: engine.grammar.compiling() == 2, 2)   # every compile worker busy
        r = http.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3}}, timeout=2)
        assert r.status_code == 200 and engine.grammar.compiling() == 2
        for t in slow:
            t.join()
        _wait_until(lambda: engine.grammar.compiling() == 0, 5)

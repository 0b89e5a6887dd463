"""Fixtures: an HTTP server on a free loopback port around the real Engine with the tiny random model (or, while
the engine is unavailable, the contract-shaped FakeEngine), and clients for it."""
from __future__ import annotations

import os

import pytest

from sglite.server import ModelInfo, ServerThread, create_app

API_KEY = "test-key"


def _real_engine_available() -> bool:
    if os.environ.get("SGLITE_SERVER_FAKE_ENGINE"):
        return False
    try:
        from sglite.runtime.engine import Engine  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def engine_and_info():
    if _real_engine_available():
        from sglite.runtime.engine import Engine
        from sglite.runtime.testing import load_tiny_model

        model = load_tiny_model(max_context=512)
        engine = Engine(model=model, max_running_requests=16, max_total_tokens=8192, background=True)
        info = ModelInfo.from_engine(engine, name="tiny")
    else:
        from sglite.runtime.tokenizer import load_tokenizer

        from .fake_engine import FakeEngine

        tok = load_tokenizer()
        engine = FakeEngine(tok, max_context=512)
        info = ModelInfo(name="tiny", tokenizer=tok, max_context=512)
    yield engine, info
    engine.shutdown()


@pytest.fixture(scope="session")
def real_engine(engine_and_info):
    engine, _ = engine_and_info
    if type(engine).__name__ == "FakeEngine":
        pytest.skip("needs the real Engine (sglite.runtime.engine) for grammar-constrained decoding")
    return engine


@pytest.fixture(scope="session")
def server(engine_and_info):
    engine, info = engine_and_info
    with ServerThread(create_app(engine, info, max_body_bytes=64 * 1024)) as s:
        yield s


@pytest.fixture(scope="session")
def keyed_server(engine_and_info):
    engine, info = engine_and_info
    with ServerThread(create_app(engine, info, api_key=API_KEY)) as s:
        yield s


@pytest.fixture()
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture()
def http(server):
    import httpx

    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def grammar(real_engine):
    try:
        from sglite.runtime.constrained import GrammarCompiler  # noqa: F401
    except ImportError:
        pytest.skip("sglite.runtime.constrained has no GrammarCompiler yet")
    return real_engine

from __future__ import annotations

import pytest

from .fake_engine import FakeEngine


@pytest.fixture
def fake():
    return FakeEngine()


@pytest.fixture
def backend_of():
    from sglite.backend.runtime import Runtime

    def make(engine):
        return Runtime(engine=engine)
    return make


@pytest.fixture(scope="module")
def tiny_runtime(tiny_model):
    """The in-process Runtime on the tiny random-weight model (one engine per test module)."""
    from sglite.backend.runtime import Runtime

    with Runtime(tiny_model, max_total_tokens=16384, max_running_requests=16) as rt:
        yield rt

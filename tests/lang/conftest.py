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

"""Shared fixtures: the tokenizer, a tiny random-weight model, and (for tests marked slow) the real SmolLM2."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tokenizer():
    from sglite.runtime.tokenizer import load_tokenizer
    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny_model():
    from sglite.runtime.testing import load_tiny_model
    return load_tiny_model(seed=0)


@pytest.fixture(scope="session")
def real_model():
    from sglite.runtime.model import load_model
    return load_model()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA} (it lies beside the checkout in CI)")
    return SHARED_DATA

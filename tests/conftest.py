"""Shared fixtures: the tokenizer, a tiny random-weight model, and (for tests marked slow) the real SmolLM2."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


class _InstalledKernelsFirst(importlib.abc.MetaPathFinder):
    """Top-level `kernels` is the installed distribution of that name (Hugging Face's, which transformers imports
    when it is installed), not this checkout's kernels/ folder: pytest puts the checkout on sys.path (tests/ is a
    package), and the folder is only ever imported as `sglite.kernels`; nor bench/kernels.py, which a test that
    imports a bench script puts within reach. Without an installed `kernels`, nothing
    changes (transformers then does not look for one)."""

    def find_spec(self, name, path=None, target=None):
        if name != "kernels":
            return None
        elsewhere = [p for p in sys.path if Path(p or ".").resolve() not in (REPO, REPO / "bench")]
        return importlib.machinery.PathFinder.find_spec(name, elsewhere)


sys.meta_path.insert(0, _InstalledKernelsFirst())


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

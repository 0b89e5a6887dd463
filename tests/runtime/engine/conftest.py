"""Engine fixtures: engines over the session's tiny random model, integrity-checked after every step."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine_model():
    """The tiny model with an untied random output head: with tied embeddings a random model mostly repeats
    its input token, which would make greedy-equality tests too easy to pass."""
    import torch

    from sglite.runtime.linear import DenseLinear
    from sglite.runtime.testing import load_tiny_model

    model = load_tiny_model(seed=0)
    g = torch.Generator().manual_seed(1)
    model.net.head = DenseLinear(torch.randn(model.net.head.weight.shape, generator=g) * 0.5)
    return model


def engines_over(model, **defaults):
    """A fixture's body: yields make(**options) -> Engine over `model` (options over `defaults`), integrity-checked
    after every step; all are shut down after the test."""
    from sglite.runtime.engine import Engine

    engines = []

    def make(**options):
        engine = Engine(model, **{**defaults, **options})
        engine.core.debug_checks = True
        engines.append(engine)
        return engine

    yield make
    for e in engines:
        e.shutdown()


@pytest.fixture
def make_engine(engine_model):
    """make_engine(**options) -> Engine over the tiny model."""
    yield from engines_over(engine_model, max_total_tokens=4096, max_running_requests=16)


def pool_idle(engine) -> bool:
    """Every slot is free or held only by the (unlocked) prefix cache."""
    kv = engine.core.kv
    cached = kv.cache.evictable_size if kv.cache else 0
    return kv.allocator.available + cached == engine.pool_tokens and not kv.running

"""Fixtures of the extract tests."""
from __future__ import annotations

import pytest

import sglite.runtime.engine.engine as engine_module
from sglite.runtime.weight_plan import WeightPlan


@pytest.fixture
def machine(monkeypatch):
    """Engines on the tiny model; `machine["auto"]` is the plan "auto" decides; `machine["asked"]` what each
    engine was asked for."""
    from sglite.runtime.testing import load_tiny_model
    real, state = engine_module.Engine, {"auto": "bf16", "asked": [], "engines": []}

    def engine(model=None, weights="auto", **options):
        state["asked"].append(weights)
        net_model = load_tiny_model(max_context=512)
        object.__setattr__(net_model.net, "plan", WeightPlan.parse(state["auto"] if weights == "auto" else weights))
        eng = real(net_model, max_running_requests=8, max_total_tokens=4096, **options)
        state["engines"].append(eng)
        return eng
    monkeypatch.setattr(engine_module, "Engine", engine)
    yield state
    for eng in state["engines"]:
        eng.shutdown()

"""A model that would not fit in the memory available is refused before a weight is read, with the numbers; under
weights='auto' a plan whose bf16 prefill copy would not fit falls back to its decode format alone."""
from __future__ import annotations

import logging

import pytest

from sglite.runtime.gguf_loader import GGUFFile
from sglite.runtime.memory_fit import ModelDoesNotFitError, Need, check_fits, estimate, weight_bytes
from sglite.runtime.weight_plan import WeightPlan

from .test_gguf_quants import _write


def _need(tmp_path, kind: str, plan: WeightPlan) -> Need:
    path = tmp_path / f"{kind}.gguf"
    if not path.exists():
        _write(path, kind)
    f = GGUFFile(path)
    return estimate(f.tensors(), f.config(), plan, kv_bytes=1_000_000, vnni=True)


def test_estimates_follow_the_formats(tmp_path):
    four = _need(tmp_path, "Q4_K", WeightPlan("w4a8", "w4a8"))
    two = _need(tmp_path, "Q4_K", WeightPlan("w4a8", "bf16"))
    fp32 = _need(tmp_path, "Q4_K", WeightPlan("fp32", "fp32"))
    assert four.weights < two.weights < fp32.weights
    assert weight_bytes("Q4_K", "w4a8", 1000, vnni=True) == pytest.approx(625)
    assert weight_bytes("Q6_K", "w4a8", 1000, vnni=True) == pytest.approx(820.3125)   # 6.5625 bits
    assert weight_bytes("Q6_K", "w4a8", 1000, vnni=False) == 1000       # int8 per channel without VNNI
    assert four.peak == four.weights + four.transient + four.kv + four.runtime


def test_check_names_needed_and_available():
    need = Need(weights=6_000_000_000, transient=500_000_000, kv=2_000_000_000)
    check_fits(need, "m.gguf", WeightPlan("w4a8", "w4a8"), available=20_000_000_000)    # fits: nothing
    with pytest.raises(ModelDoesNotFitError) as e:
        check_fits(need, "m.gguf", WeightPlan("w4a8", "bf16"), available=4_000_000_000)
    msg = str(e.value)
    assert "m.gguf needs about 9.1 GB" in msg and "4.0 GB available" in msg and "weights='w4a8'" in msg


def _load(path, weights, available, monkeypatch):
    from sglite.runtime.model import load_model

    monkeypatch.setenv("SGLITE_MEMORY_AVAILABLE", str(available))
    return load_model(str(path), weights=weights, kv_bytes=0)


def test_refused_before_loading_and_auto_drops_the_second_copy(tmp_path, monkeypatch, caplog):
    from sglite.kernels import w4a8_cpu

    if not w4a8_cpu.available():
        pytest.skip("the w4a8 kernel does not build here")   # pragma: no cover
    path = tmp_path / "Q4_K.gguf"
    _write(path, "Q4_K")
    f = GGUFFile(path)
    single = estimate(f.tensors(), f.config(), WeightPlan("w4a8", "w4a8"), 0, vnni=True).peak
    double = estimate(f.tensors(), f.config(), WeightPlan("w4a8", "bf16"), 0, vnni=True).peak
    import sglite.runtime.model as model_module
    monkeypatch.setattr(model_module.LlamaModel, "__init__", _never)
    with pytest.raises(ModelDoesNotFitError, match="needs about"):
        _load(path, "w4a8", single - 1, monkeypatch)                         # refused before the model is built
    monkeypatch.undo()
    import sglite.runtime.weight_plan as wp
    monkeypatch.setattr(wp, "choose_weight_plan", lambda *a, **k: WeightPlan("w4a8", "bf16"))
    with caplog.at_level(logging.WARNING, logger="sglite.runtime"):
        model = _load(path, "auto", (single + double) // 2, monkeypatch)
    assert model.net.plan == WeightPlan("w4a8", "w4a8") and "does not fit" in caplog.text
    assert _load(path, "auto", double + 1, monkeypatch).net.plan == WeightPlan("w4a8", "bf16")


def _never(*args, **kwargs):
    raise AssertionError("the model was built although it does not fit")

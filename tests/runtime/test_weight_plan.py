"""`weights="auto"`: measured once per machine and cached, with the W4A8 kernel's build in the key (a plan
measured with the kernel must not be reused where it cannot run); the kernel formats refused by name where
their kernel is unavailable."""
import pytest

from sglite.runtime import weight_plan as wp
from sglite.runtime.weight_plan import WeightPlan, choose_weight_plan


def test_auto_is_measured_once_and_again_when_the_kernel_build_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    measured = []

    def fake_measure(hidden, intermediate, vocab):
        measured.append(wp.w4a8_cpu.unavailable_reason() is None)
        return WeightPlan("w4a16" if measured[-1] else "int4", "bf16"), {}

    monkeypatch.setattr(wp, "measure_weight_plan", fake_measure)
    monkeypatch.setattr(wp, "_busy", lambda: None)
    monkeypatch.setattr(wp, "_PROCESS_PLANS", {})
    monkeypatch.setattr(wp.w4a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(wp.w4a8_cpu, "isa", lambda: "avx512_vnni")
    monkeypatch.setattr(wp.w4a8_cpu, "build_id", lambda: "0123456789abcdef")
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == [True]                                           # the second came from the cache
    monkeypatch.setattr(wp.w4a8_cpu, "build_id", lambda: "fedcba9876543210")   # the kernel's source changed
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == [True, True]
    monkeypatch.setattr(wp.w4a8_cpu, "unavailable_reason", lambda: "no C compiler (cc)")
    monkeypatch.setattr(wp.w4a8_cpu, "isa", lambda: None)
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("int4", "bf16")
    assert measured == [True, True, False]


def test_a_plan_measured_on_a_busy_machine_is_kept_for_the_process_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    monkeypatch.setattr(wp, "_PROCESS_PLANS", {})
    measured = []
    monkeypatch.setattr(wp, "measure_weight_plan", lambda *a: (measured.append(1), (WeightPlan("bf16", "bf16"), {}))[1])
    monkeypatch.setattr(wp, "_busy", lambda: 3.7)
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("bf16", "bf16")
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("bf16", "bf16")
    assert len(measured) == 1 and not (tmp_path / "weight_plans_v3.json").exists()
    monkeypatch.setattr(wp, "_PROCESS_PLANS", {})                      # a new process measures again
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("bf16", "bf16")
    assert len(measured) == 2


def test_formats_are_timed_in_turns():
    times = wp._time_formats(["fp32", "bf16"], [(32, 64), (64, 32)], (1, 4), trials=2)
    assert set(times) == {"fp32", "bf16"} and all(set(t) == {1, 4} for t in times.values())
    assert all(0 < v < 1e-3 for t in times.values() for v in t.values())      # seconds per weight


def test_kernel_formats_are_refused_by_name_where_the_kernel_is_unavailable(monkeypatch):
    monkeypatch.setattr(wp.w4a8_cpu, "unavailable_reason", lambda: "SGLITE_NATIVE_KERNELS=0")
    with pytest.raises(ValueError, match=r"w4a16\+bf16.*unavailable here \(SGLITE_NATIVE_KERNELS=0\)"):
        choose_weight_plan("w4a16+bf16", "cpu", 64, 128, 256)
    assert choose_weight_plan("int4+bf16", "cpu", 64, 128, 256) == WeightPlan("int4", "bf16")


def test_plan_names():
    assert WeightPlan.parse("w4a16+bf16") == WeightPlan("w4a16", "bf16")
    assert str(WeightPlan("w4a8", "w4a8")) == "w4a8"
    with pytest.raises(ValueError, match="need different activation dtypes"):
        WeightPlan("w4a16", "fp32")
    with pytest.raises(ValueError, match="unknown weight format 'w4a4'"):
        WeightPlan.parse("w4a4")

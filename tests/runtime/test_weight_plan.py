"""`weights="auto"`: measured once per machine and cached, with the W4A8 and W8A8 kernels' builds in the key (a plan
measured with the kernel must not be reused where it cannot run); decided from the CPU's flags, and kept, on a
busy machine; one process decides while the others wait; the kernel formats refused by name where their kernel is
unavailable."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from sglite.kernels import w4a8_cpu, w8a8_cpu
from sglite.runtime import weight_plan as wp
from sglite.runtime.weight_plan import WeightPlan, choose_weight_plan


def test_auto_is_measured_once_and_again_when_the_kernel_build_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    measured = []

    def fake_measure(hidden, intermediate, vocab):
        measured.append(w4a8_cpu.unavailable_reason() is None)
        return WeightPlan("w4a16" if measured[-1] else "int4", "bf16"), {}

    monkeypatch.setattr(wp, "measure_weight_plan", fake_measure)
    monkeypatch.setattr(wp, "_busy", lambda: None)
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(w4a8_cpu, "isa", lambda: "avx512_vnni")
    monkeypatch.setattr(w4a8_cpu, "build_id", lambda: "0123456789abcdef")
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == [True]                                           # the second came from the cache
    monkeypatch.setattr(w4a8_cpu, "build_id", lambda: "fedcba9876543210")   # the kernel's source changed
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == [True, True]
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: "no C compiler (cc)")
    monkeypatch.setattr(w4a8_cpu, "isa", lambda: None)
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("int4", "bf16")
    assert measured == [True, True, False]


def test_a_rebuilt_w8a8_kernel_decides_again(tmp_path, monkeypatch):
    """The 8-bit twin runs the w4a16 format over 8-bit block weights (Q8_0, Q6_K...): a change to it (its source
    or layout, hence its build) is measured anew, as the W4A8 kernel's is; so is its loss."""
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    measured = []
    monkeypatch.setattr(wp, "measure_weight_plan",
                        lambda *a: (measured.append(1), (WeightPlan("w4a16", "bf16"), {}))[1])
    monkeypatch.setattr(wp, "_busy", lambda: None)
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(w4a8_cpu, "isa", lambda: "avx512_vnni")
    monkeypatch.setattr(w4a8_cpu, "build_id", lambda: "0123456789abcdef")
    monkeypatch.setattr(w8a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(w8a8_cpu, "isa", lambda: "avx512_vnni")
    monkeypatch.setattr(w8a8_cpu, "build_id", lambda: "1111111111111111", raising=False)
    for _ in range(2):
        assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert len(measured) == 1
    monkeypatch.setattr(w8a8_cpu, "build_id", lambda: "2222222222222222", raising=False)   # its layout changed
    choose_weight_plan("auto", "cpu", 64, 128, 256)
    assert len(measured) == 2
    monkeypatch.setattr(w8a8_cpu, "unavailable_reason", lambda: "no AVX-512 VNNI")
    choose_weight_plan("auto", "cpu", 64, 128, 256)
    assert len(measured) == 3
    keys = list(json.loads((tmp_path / "weight_plans_v3.json").read_text()))
    assert [k.rsplit("|", 1)[1].split(",")[1] for k in keys] == \
        ["w8a8:avx512_vnni:1111111111111111", "w8a8:avx512_vnni:2222222222222222", "w8a8:none"]


def test_the_kernel_builds_name_both_kernels_as_loaded():
    builds = dict(part.split(":", 1) for part in wp.kernel_builds().split(","))
    assert set(builds) == {"w4a8", "w8a8"}
    if w8a8_cpu.available():
        assert builds["w8a8"] == f"{w8a8_cpu.isa()}:{w8a8_cpu.library().build_id}"
    else:
        assert builds["w8a8"] == "none"


def test_a_busy_machine_takes_no_timings_and_keeps_the_plan_its_flags_give(tmp_path, monkeypatch):
    """Timings under load once flipped the plan from process to process (six processes, three plans): on a busy
    machine nothing is timed, the plan follows from the flags, and it is kept for every later process."""
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(w4a8_cpu, "isa", lambda: "avx512_vnni")
    monkeypatch.setattr(w4a8_cpu, "build_id", lambda: "0123456789abcdef")
    monkeypatch.setattr(wp, "cpu_flags", lambda: ["avx2", "avx512f", "amx_bf16"])
    measured = []
    monkeypatch.setattr(wp, "measure_weight_plan", lambda *a: (measured.append(1), (WeightPlan("bf16", "bf16"), {}))[1])
    monkeypatch.setattr(wp, "_busy", lambda: 3.7)
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == []
    (entry,) = json.loads((tmp_path / "weight_plans_v3.json").read_text()).values()
    assert (entry["small"], entry["large"], entry["decided_by"]) == ("w4a16", "bf16", "flags (busy machine)")
    monkeypatch.setattr(wp, "_busy", lambda: None)                     # a later, idle process keeps it
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("w4a16", "bf16")
    assert measured == []


def test_load_during_the_measurement_discards_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path))
    monkeypatch.setattr(wp, "cpu_flags", lambda: ["avx2"])
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: "no C compiler (cc)")
    loads = iter([None, 2.5])
    monkeypatch.setattr(wp, "_busy", lambda: next(loads))
    monkeypatch.setattr(wp, "measure_weight_plan", lambda *a: (WeightPlan("bf16", "bf16"), {}))
    assert choose_weight_plan("auto", "cpu", 64, 128, 256) == WeightPlan("int4", "int4")


def test_the_rule_plans():
    assert wp.rule_weight_plan(["avx2", "avx512_bf16"], kernel=True) == WeightPlan("w4a16", "bf16")
    assert wp.rule_weight_plan(["avx2"], kernel=True) == WeightPlan("w4a16", "w4a16")
    assert wp.rule_weight_plan([], kernel=False) == WeightPlan("int4", "int4")


_DECIDE = textwrap.dedent("""
    import json, sys
    from sglite.runtime import weight_plan as wp
    wp._busy = lambda: None                    # time the machine even though the test loads it
    print(json.dumps(str(wp.choose_weight_plan("auto", "cpu", 64, 128, 256))))
""")


def test_concurrent_processes_beside_a_busy_loop_decide_once(tmp_path):
    """Two processes start together beside a busy loop: one measures (under the cache's lock), the other waits
    and reads its answer, so both run the same plan, and the cache holds one decision."""
    env = {**os.environ, "SGLITE_CACHE": str(tmp_path)}
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        procs = [subprocess.Popen([sys.executable, "-c", _DECIDE], env=env, stdout=subprocess.PIPE, text=True)
                 for _ in range(2)]
        plans = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        spin.kill()
        spin.wait()
    assert plans[0] == plans[1]
    (entry,) = json.loads((tmp_path / "weight_plans_v3.json").read_text()).values()
    assert str(WeightPlan(entry["small"], entry["large"])) == plans[0] and entry["decided_by"] == "timings"


def test_formats_are_timed_in_turns():
    times = wp._time_formats(["fp32", "bf16"], [(32, 64), (64, 32)], (1, 4), trials=2)
    assert set(times) == {"fp32", "bf16"} and all(set(t) == {1, 4} for t in times.values())
    assert all(0 < v < 1e-3 for t in times.values() for v in t.values())      # seconds per weight


def test_kernel_formats_are_refused_by_name_where_the_kernel_is_unavailable(monkeypatch):
    monkeypatch.setattr(w4a8_cpu, "unavailable_reason", lambda: "SGLITE_NATIVE_KERNELS=0")
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

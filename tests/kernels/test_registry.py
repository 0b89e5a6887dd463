"""kernels/registry.py: one row for every kernel module, agreeing with each module's own probe; the reasons it
gives (SGLITE_NATIVE_KERNELS=0, a path the runtime does not use, a missing CPU flag); reading it without probing
compiles nothing; and native.py rebuilds a kernel when a header it includes changes."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglite.kernels import native, registry

KERNELS_DIR = Path(registry.__file__).parent


def _run(code: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_kernel_module_has_a_row():
    modules = {p.stem for p in KERNELS_DIR.glob("*.py")} - {"__init__"}
    assert modules - registry.SUPPORT_MODULES == set(registry.KERNELS)
    assert {p.stem for p in KERNELS_DIR.glob("*.c")} <= set(registry.KERNELS)   # each C source is a kernel's
    assert [r.name for r in registry.describe()] == list(registry.KERNELS)
    printed = registry.table(registry.describe())
    assert all(name in printed for name in registry.KERNELS)


def test_availability_agrees_with_each_modules_own_probe():
    for name, k in registry.KERNELS.items():
        row = registry.status(name)
        if k.backend == "triton":      # no probe of their own: triton importable
            assert row.available == (importlib.util.find_spec("triton") is not None), name
            continue
        mod = importlib.import_module(f"sglite.kernels.{name}")
        assert row.available == mod.available(), name
        assert row.use == (row.available and (k.use_on is None or row.isa in k.use_on)), name
        if k.backend == "c":
            if not row.available:
                assert row.why == mod.unavailable_reason(), name
            assert (row.isa, row.build) == ((mod.isa(), mod.build_id()) if row.available else (None, None)), name


def test_the_native_isa_paths_are_the_builds_own():
    from sglite.kernels import decode_attention_cpu, w4a8_cpu, w8a8_cpu
    if not w4a8_cpu.available():
        pytest.skip(f"no native kernels here: {w4a8_cpu.unavailable_reason()}")
    assert registry.status("w4a8_cpu").isa == w4a8_cpu.isa() in ("avx512_vnni", "avx2", "scalar")
    assert registry.use("w8a8_cpu") == (w8a8_cpu.isa() == "avx512_vnni")
    if decode_attention_cpu.available():
        assert registry.status("decode_attention_cpu").isa == f"c:{decode_attention_cpu.native_isa()}"
    if not os.environ.get("SGLITE_NATIVE_MARCH"):      # a native build takes the path the CPU's flags predict
        flags = registry.cpu_flags()
        assert registry.KERNELS["w4a8_cpu"].predicted_path(flags) == w4a8_cpu.isa()
        assert registry.KERNELS["w8a8_cpu"].predicted_path(flags) == w8a8_cpu.isa()


def test_native_kernels_turned_off_report_why_in_a_subprocess(tmp_path):
    rows = _run("""
        import json
        from sglite.kernels import registry, w4a8_cpu
        rows = {r.name: r._asdict() for r in registry.describe(probe=False)}
        rows["probed"] = {r.name: r._asdict() for r in registry.describe()}
        rows["module"] = [w4a8_cpu.available(), w4a8_cpu.unavailable_reason()]
        print(json.dumps(rows))
    """, SGLITE_NATIVE_KERNELS="0", SGLITE_CACHE=str(tmp_path))
    for table in (rows, rows["probed"]):
        for name in ("w4a8_cpu", "w8a8_cpu"):
            assert (table[name]["available"], table[name]["use"], table[name]["why"]) == \
                (False, False, "SGLITE_NATIVE_KERNELS=0"), name
    assert rows["module"] == [False, "SGLITE_NATIVE_KERNELS=0"]
    if rows["probed"]["decode_attention_cpu"]["available"]:   # the numba kernel runs instead of the C one
        assert rows["probed"]["decode_attention_cpu"]["isa"] == "numba"
    assert not list(tmp_path.rglob("*.so"))


def test_reading_without_probing_compiles_nothing_and_imports_no_torch(tmp_path):
    rows = _run("""
        import json, sys
        from sglite.kernels import registry
        light = "torch" not in sys.modules and "numba" not in sys.modules
        rows = {r.name: r._asdict() for r in registry.describe(probe=False)}
        print(json.dumps({"light": light, **rows}))
    """, SGLITE_CACHE=str(tmp_path))
    assert rows["light"]
    assert not list(tmp_path.rglob("*.so"))
    assert rows["w4a8_cpu"]["available"] is None or rows["w4a8_cpu"]["why"] == "SGLITE_NATIVE_KERNELS=0"


def test_a_kernel_off_the_path_the_runtime_uses_says_why(monkeypatch):
    from sglite.kernels import w8a8_cpu
    monkeypatch.setattr(w8a8_cpu, "unavailable_reason", lambda: None)
    monkeypatch.setattr(w8a8_cpu, "isa", lambda: "scalar")
    monkeypatch.setattr(w8a8_cpu, "build_id", lambda: "0123456789abcdef")
    monkeypatch.setattr(registry, "cpu_flags", lambda: frozenset({"avx2", "fma", "f16c", "avx512f"}))
    row = registry.status("w8a8_cpu")
    assert (row.available, row.use, row.isa) == (True, False, "scalar")
    assert row.why == "used on avx512_vnni only: the CPU lacks avx512bw, avx512_vnni"
    monkeypatch.setattr(registry, "cpu_flags", lambda: frozenset(registry._PATH_FLAGS["avx512_vnni"]))
    assert registry.status("w8a8_cpu").why == "used on avx512_vnni only: this build takes scalar"
    monkeypatch.setattr(w8a8_cpu, "isa", lambda: "avx512_vnni")
    assert registry.use("w8a8_cpu") and registry.status("w8a8_cpu").why is None


def test_an_unknown_kernel_names_the_known_ones():
    with pytest.raises(KeyError, match="no kernel 'w2a8_cpu'.*w4a8_cpu"):
        registry.status("w2a8_cpu")


def test_editing_an_included_header_rebuilds(tmp_path, monkeypatch):
    if shutil.which(os.environ.get("CC") or "cc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("SGLITE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "probe.c"
    src.write_text('#include "probe.h"\nint probe(void) { return PROBE; }\n')
    (tmp_path / "probe.h").write_text("#define PROBE 1\n")
    assert native.local_includes(src) == [(tmp_path / "probe.h").resolve()]
    first = native.build(src)
    (tmp_path / "probe.h").write_text("#define PROBE 2\n")
    second = native.build(src)
    assert first.build_id != second.build_id and (first.probe(), second.probe()) == (1, 2)
    assert native.local_includes(KERNELS_DIR / "w4a8_cpu.c") == [(KERNELS_DIR / "native.h").resolve()]

"""A small version of bench/serve_load.py: 50 concurrent streaming requests, some abandoned mid-stream; no 5xx,
every finished response complete, and nothing leaked from the KV pool afterwards."""
from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("serve_load", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_concurrent_streams_with_aborts(server):
    bench = _load_bench()
    report = asyncio.run(bench.run_load(server.url, num_requests=50, concurrency=50, abort_fraction=0.2, seed=1,
                                        model="tiny", bad_fraction=0.1))
    aborted = [o for o in report.outcomes if o.aborted]
    assert aborted and report.finished and report.bad
    assert report.server_errors == 0, [o.error for o in report.outcomes if o.status >= 500]
    assert not report.incomplete, [(o.status, o.error) for o in report.incomplete]
    assert report.idle
    assert report.leaked_slots == 0, f"{report.leaked_slots} KV slots leaked"
    assert report.used_after_flush == 0

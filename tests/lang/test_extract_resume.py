"""`sglite extract` killed with SIGKILL mid-job loses nothing it finished, and
`--resume` completes the job: the output then holds each input id exactly once, and every line parses.
Runs the tiny random-weight model; the schema bounds every field, so its records finish within --max-tokens."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sglite.extract import main

from ..extract_jobs import append_cut_line, person_job, sigkill_after

N_DOCS = 12
KILL_AFTER = 3   # lines in the output when the job is killed

# The job as a separate process on the tiny model. Its backend lets one program generate at a time, with a pause,
# so records arrive one by one and the kill lands mid-job whatever the machine's speed.
JOB = """
import sys, threading, time
import sglite as sgl
import pytest

from sglite.extract import main
from sglite.runtime.testing import load_tiny_model

class OneAtATime(sgl.Runtime):
    lock = threading.Lock()

    def generate(self, prompt, params):
        with self.lock:
            time.sleep(0.2)
            return super().generate(prompt, params)

sys.exit(main(sys.argv[1:], backend=OneAtATime(load_tiny_model(), max_running_requests=4)))
"""


def _job_files(tmp_path: Path) -> list[str]:
    (tmp_path / "job.py").write_text(JOB)
    return person_job(tmp_path, N_DOCS)


def test_sigkill_then_resume_gives_each_id_once(tmp_path, tiny_runtime):
    args = _job_files(tmp_path)
    out = tmp_path / "o.jsonl"
    killed = sigkill_after([sys.executable, str(tmp_path / "job.py"), *args], out, KILL_AFTER, timeout_s=300)
    done = [json.loads(x) for x in killed.splitlines()]
    assert KILL_AFTER <= len(done) < N_DOCS, "the kill landed mid-job"
    append_cut_line(out, killed, done, N_DOCS)

    assert main(args + ["--resume"], backend=tiny_runtime) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    ids = [x["id"] for x in lines]
    assert sorted(ids) == [f"d{i:02d}" for i in range(N_DOCS)], ids          # each id exactly once
    assert lines[:len(done)] == done                                          # nothing finished was rewritten
    for x in lines:
        assert set(x) - {"confidence"} in ({"id", "record", "spans"}, {"id", "record", "error", "raw"})
        assert (x["record"] is None) == ("error" in x)


def test_extract_through_a_server_with_url(tmp_path, tiny_runtime):
    """--url: the same job against `sglite serve`'s API (here a server around the tiny model's engine)."""
    pytest.importorskip("fastapi")
    from sglite.server import ModelInfo, ServerThread, create_app

    args = _job_files(tmp_path)
    engine = tiny_runtime.engine
    with ServerThread(create_app(engine, ModelInfo.from_engine(engine, name="tiny"))) as server:
        assert main(args + ["--url", server.url]) == 0
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == [f"d{i:02d}" for i in range(N_DOCS)]
    assert all(set(x) - {"confidence"} == {"id", "record", "spans"} for x in lines)

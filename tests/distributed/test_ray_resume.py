"""`sglite extract --ray ADDRESS` whose driver is killed with SIGKILL mid-job loses nothing it wrote, and
`--resume` (here in-process, on the same local cluster) completes the job with each id exactly once."""
from __future__ import annotations

import json
import sys

from sglite.extract import main

from ..extract_jobs import append_cut_line, output_lines, person_job, sigkill_after

N_DOCS = 24
KILL_AFTER = 3


def test_driver_killed_then_resume_gives_each_id_once(tmp_path, ray_cluster, tiny_path):
    args = person_job(tmp_path, N_DOCS) + ["--model", str(tiny_path), "--weights", "bf16", "--num-threads", "1",
                                         "--replicas", "2", "--shard-size", "2"]
    out = tmp_path / "o.jsonl"
    killed = sigkill_after([sys.executable, "-m", "sglite.extract", *args, "--ray", ray_cluster], out, KILL_AFTER,
                           timeout_s=180)
    done = [json.loads(x) for x in killed.splitlines()]
    assert KILL_AFTER <= len(done) < N_DOCS, "the kill landed mid-job"
    append_cut_line(out, killed, done, N_DOCS)

    # the dead driver's replicas are released by Ray; the resumed job's own wait for the 2 CPUs
    assert main(args + ["--resume", "--ray"]) == 0
    lines = output_lines(tmp_path)
    assert sorted(x["id"] for x in lines) == [f"d{i:02d}" for i in range(N_DOCS)]   # each id exactly once
    assert lines[:len(done)] == done                                                # nothing rewritten
    assert all(set(x) - {"confidence"} == {"id", "record", "spans"} for x in lines)

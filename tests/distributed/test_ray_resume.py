"""`sglite extract --ray ADDRESS` whose driver is killed with SIGKILL mid-job loses nothing it wrote, and
`--resume` (here in-process, on the same local cluster) completes the job with each id exactly once."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from sglite.extract import main

from .conftest import job_args, output_lines

N_DOCS = 24
KILL_AFTER = 3


def test_driver_killed_then_resume_gives_each_id_once(tmp_path, ray_cluster, tiny_path):
    args = job_args(tmp_path, N_DOCS) + ["--model", str(tiny_path), "--weights", "bf16", "--num-threads", "1",
                                         "--replicas", "2", "--shard-size", "2"]
    out = tmp_path / "o.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "sglite.extract", *args, "--ray", ray_cluster],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while (out.read_bytes().count(b"\n") if out.exists() else 0) < KILL_AFTER:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the job wrote no records"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    killed = out.read_bytes()
    done = [json.loads(x) for x in killed.splitlines()]
    assert KILL_AFTER <= len(done) < N_DOCS, "the kill landed mid-job"
    # a write cut short leaves a partial last line: --resume drops it and runs that document again
    victim = next(f"d{i:02d}" for i in range(N_DOCS) if f"d{i:02d}" not in {x["id"] for x in done})
    out.write_bytes(killed + json.dumps({"id": victim, "record": {"name": "Per"}}).encode()[:20])

    # the dead driver's replicas are released by Ray; the resumed job's own wait for the 2 CPUs
    assert main(args + ["--resume", "--ray"]) == 0
    lines = output_lines(tmp_path)
    assert sorted(x["id"] for x in lines) == [f"d{i:02d}" for i in range(N_DOCS)]   # each id exactly once
    assert lines[:len(done)] == done                                                # nothing rewritten
    assert all(set(x) == {"id", "record"} for x in lines)

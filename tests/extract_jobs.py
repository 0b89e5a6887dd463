"""What the `sglite extract` tests share, local and on Ray: the person-extraction job's files, and a job process
killed with SIGKILL once it has written some records."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 150}},
                 "required": ["name", "age"]}   # every field bounded: records finish within --max-tokens 32


def person_job(folder: Path, n_docs: int) -> list[str]:
    """`sglite extract` arguments for n_docs short person documents d00, d01, ... (files written into folder;
    the output is folder/o.jsonl)."""
    (folder / "s.json").write_text(json.dumps(PERSON_SCHEMA))
    (folder / "p.txt").write_text("Extract the person named in the document and their age, as JSON.")
    with open(folder / "d.jsonl", "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"id": f"d{i:02d}", "text": f"Person {i} is {20 + i} years old."}) + "\n")
    return ["--schema", str(folder / "s.json"), "--prompt", str(folder / "p.txt"), "--input",
            str(folder / "d.jsonl"), "--output", str(folder / "o.jsonl"), "--max-tokens", "32"]


def output_lines(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "o.jsonl").read_text().splitlines()]


def sigkill_after(cmd: list[str], out: Path, lines: int, timeout_s: float) -> bytes:
    """Runs `cmd`, kills it with SIGKILL once `out` holds `lines` complete lines, and returns out's bytes then.
    Fails the test if the process exits first or writes nothing within timeout_s."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout_s
        while (out.read_bytes().count(b"\n") if out.exists() else 0) < lines:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the job wrote no records"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    return out.read_bytes()


def append_cut_line(out: Path, killed: bytes, done: list[dict], n_docs: int) -> None:
    """Leaves `out` as a write cut short by a crash would: `killed` plus the start of an unfinished document's
    line (--resume must drop it and run that document again)."""
    victim = next(f"d{i:02d}" for i in range(n_docs) if f"d{i:02d}" not in {x["id"] for x in done})
    out.write_bytes(killed + json.dumps({"id": victim, "record": {"name": "Per"}}).encode()[:20])

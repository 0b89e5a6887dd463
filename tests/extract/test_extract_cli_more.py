"""`sglite extract` on the scripted engine: a full disk, SIGTERM, the weights the help names, the progress bar's
phases, an empty document, and the pydantic schema with --max-retries and chunking from the command line."""
from __future__ import annotations

import errno
import io
import json
import os
import signal
import textwrap
import time

import pytest

import sglite as sgl
from sglite.extract import main
from sglite.extract.output import ResultLog
from tests.lang.fake_engine import FakeEngine

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def _files(tmp_path, docs):
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "p.txt").write_text("Extract the person and their age.")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return ["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"), "--input",
            str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl")]


def _person(prompt, sp):
    doc = prompt.rstrip().rsplit("\n\n", 1)[-1]
    return json.dumps({"name": doc.split()[0], "age": int("".join(c for c in doc if c.isdigit()) or 0)})


DOCS = [{"id": f"d{i}", "text": f"P{i} is {20 + i}."} for i in range(6)]


def test_a_full_disk_is_exit_3_with_one_line(tmp_path, capsys, monkeypatch):
    appended = []

    def append(self, line):
        if len(appended) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        appended.append(line)
    monkeypatch.setattr(ResultLog, "append", append)
    assert main(_files(tmp_path, DOCS), backend=sgl.Runtime(engine=FakeEngine(respond=_person))) == 3
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("sglite extract:")]
    assert err[-1].startswith("sglite extract: cannot write") and "No space left on device" in err[-1]
    assert "--resume" in err[-1] and "Traceback" not in err[-1]


def test_sigterm_stops_the_job_with_143_and_says_how_to_resume(tmp_path, capsys):
    def respond(prompt, sp):
        if "P3 is" in prompt:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
        return _person(prompt, sp)
    before = signal.getsignal(signal.SIGTERM)
    assert main(_files(tmp_path, DOCS), backend=sgl.Runtime(engine=FakeEngine(respond=respond, latency=0.05))) == 143
    err = capsys.readouterr().err
    assert "sglite extract: terminated (SIGTERM);" in err and "rerun with --resume" in err
    assert signal.getsignal(signal.SIGTERM) == before   # the CLI's handler is removed again


def test_an_empty_document_is_an_error_line_not_a_record(tmp_path, capsys):
    eng = FakeEngine(respond=_person)
    assert main(_files(tmp_path, [{"id": "e", "text": "   "}, {"id": "a", "text": "Ann is 31."}]),
                backend=sgl.Runtime(engine=eng)) == 1
    lines = {x["id"]: x for x in map(json.loads, (tmp_path / "o.jsonl").read_text().splitlines())}
    assert lines["e"]["record"] is None and "empty document" in lines["e"]["error"]
    assert "1/2 validated" in capsys.readouterr().out and len(eng.gen_calls()) == 1


def test_every_weight_format_the_help_names_is_one_the_runtime_takes(capsys):
    from sglite.runtime.weight_plan import WeightPlan

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    named = text.split("--weights WEIGHTS weight format: auto (measured on this machine), ")[1].split(" or SMALL")[0]
    formats = [f.strip() for f in named.split(",") if f.strip()]
    assert "w4a16" in formats and "int4+bf16" not in text
    for f in formats:
        WeightPlan.parse(f)
    pair = text.split("decode rows + prefill rows) such as ")[1].split()[0]
    assert str(WeightPlan.parse(pair)) == pair == "w4a16+bf16"


def test_pydantic_schema_and_retries_from_the_command_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "people_model.py").write_text(textwrap.dedent('''
        from pydantic import BaseModel, field_validator

        class Person(BaseModel):
            name: str
            age: int

            @field_validator("age")
            @classmethod
            def adult(cls, v):
                if v < 18:
                    raise ValueError("must be an adult")
                return v
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = _files(tmp_path, [{"id": "a", "text": "Ann is 31."}, {"id": "k", "text": "Kid is 7."}])
    args[args.index("--schema") + 1] = "people_model:Person"

    def respond(prompt, sp):
        return '{"name": "Kid", "age": 18}' if "must be an adult" in prompt else _person(prompt, sp)
    assert main(args + ["--max-retries", "1"], backend=sgl.Runtime(engine=FakeEngine(respond=respond))) == 0
    lines = {x["id"]: x for x in map(json.loads, (tmp_path / "o.jsonl").read_text().splitlines())}
    assert lines["a"]["tries"] == 1 and lines["k"]["tries"] == 2 and lines["k"]["retried"] == ["age"]
    out = capsys.readouterr().out
    assert "re-asked" in out and [r.split()[-1] for r in out.splitlines() if r.startswith("age ")] == ["(50%)"]
    args[args.index("--schema") + 1] = "people_model:Nobody"
    assert main(args + ["--overwrite"]) == 2
    assert "cannot import it" in capsys.readouterr().err


def test_progress_never_shows_tokens_as_documents(monkeypatch):
    from sglite.extract import progress
    from sglite.extract.inputs import Document
    from sglite.extract.job import JobSpec
    from sglite.lang.chat_template import ChatTemplate

    class Backend:
        stats = {"prefill_tokens_computed": 0, "decode_tokens": 0}
        fail = False

        def get_server_info(self):
            if self.fail:
                raise ConnectionError("a tick without counters")
            return {"stats": dict(self.stats)}

        def tokenize(self, text):
            return text.split()

        def chat_template(self):
            return ChatTemplate.chatml()

    monkeypatch.setattr(progress, "TICK_S", 0.02)
    backend, out = Backend(), io.StringIO()
    docs = [Document(i, "one two three", f"d:{i}") for i in range(3)] + [Document("big", "w " * 1000, "d:big")]
    p = progress.Progress(backend, JobSpec("Extract.", {}, "{}", 8, 0.0), docs, "", file=out, interval_s=0.01)
    p.start()
    time.sleep(0.2)
    backend.fail = True            # a failed read while prefilling: the bar stays on tokens
    backend.stats["prefill_tokens_computed"] += 5
    time.sleep(0.2)
    backend.fail = False
    p.doc_done("big", generated=False)   # refused before generating: its tokens leave the total
    time.sleep(0.3)
    drawn = out.getvalue().replace("\r", "\n")
    p.doc_done(0)
    time.sleep(0.2)
    p.close()
    prefill = [x for x in drawn.split("\n") if x.startswith("prefill")]
    assert "doc" not in drawn and any("/1.02k" in x for x in prefill) and "5.00/" in prefill[-1], drawn[-300:]
    assert "k" not in prefill[-1].split("/")[1].split("tok")[0], prefill[-1]   # the big document's tokens left
    assert "2/4" in out.getvalue().replace("\r", "\n").rstrip().rsplit("\n", 1)[-1]   # big and 0

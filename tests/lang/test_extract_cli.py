"""`sglite extract` with a scripted engine: the output format, validation, the summary, exit statuses, the
checks that run before the model loads, and the output file's new / resume / overwrite rules."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

import sglite as sgl
from sglite.extract import main

from .fake_engine import FakeEngine

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
DOCS = [{"id": "a", "text": "Ann is 31."}, {"id": "b", "text": "Bo is 7."}, {"id": "c", "text": "Cy is old."}]
NO_MODEL = ["--model", "/nonexistent/model.gguf"]   # a check that ran after loading would report this instead


def _files(tmp_path, schema=SCHEMA, docs=DOCS, prompt="Extract the person named in the document, with their age."):
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "p.txt").write_text(prompt)
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return ["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"),
            "--input", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl")]


def _doc(prompt):
    """The document in a prompt: the fake engine's model has no chat template, so the prompt is plain text."""
    return prompt.rstrip().rsplit("\n\n", 1)[-1]


def _respond(prompt, sp):
    assert "json_schema" in sp
    doc = _doc(prompt)
    name = doc.split()[0]
    age = "".join(ch for ch in doc if ch.isdigit())
    return json.dumps({"name": name, "age": int(age)}) if age else json.dumps({"name": name, "age": "old"})


def _lines(tmp_path, name="o.jsonl"):
    return [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]


def _by_id(lines):
    return {x["id"]: x for x in lines}


def test_extract_writes_records_apart_from_ids_and_reports_invalid(tmp_path, capsys):
    eng = FakeEngine(respond=_respond)
    rc = main(_files(tmp_path), backend=sgl.Runtime(engine=eng))
    out = _by_id(_lines(tmp_path))
    assert sorted(out) == ["a", "b", "c"]   # completion order; joined back by id
    assert out["a"] == {"id": "a", "record": {"name": "Ann", "age": 31},
                        "spans": {"/name": {"start": 0, "end": 3, "match": "exact"},
                                  "/age": {"start": 7, "end": 9, "match": "exact"}}}
    assert out["c"]["record"] is None and "schema" in out["c"]["error"] and '"old"' in out["c"]["raw"]
    stdout = capsys.readouterr().out
    assert rc == 1 and "2/3 validated" in stdout and "1 failed" in stdout
    assert eng.prefill_calls(), "the shared instructions were prefilled once"


def test_a_property_named_id_stays_in_the_record(tmp_path):
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
              "required": ["id", "name"]}
    eng = FakeEngine(respond=lambda p, sp: json.dumps({"id": "EMP-9", "name": "Ann"}))
    assert main(_files(tmp_path, schema=schema), backend=sgl.Runtime(engine=eng)) == 0
    out = _by_id(_lines(tmp_path))
    assert out["a"]["record"] == {"id": "EMP-9", "name": "Ann"}


def test_a_failing_backend_writes_no_line_so_resume_runs_the_document_again(tmp_path, capsys):
    args = _files(tmp_path)
    assert main(args, backend=sgl.Runtime(engine=FakeEngine(respond=_respond, fail_on="Bo is"))) == 1
    assert sorted(_by_id(_lines(tmp_path))) == ["a", "c"]
    assert "1 documents did not run and are not in the output (RuntimeError: scripted" in capsys.readouterr().err
    assert main(args + ["--resume"], backend=sgl.Runtime(engine=FakeEngine(respond=_respond))) == 1   # c: invalid
    assert sorted(x["id"] for x in _lines(tmp_path)) == ["a", "b", "c"]


def test_a_request_refused_for_one_document_is_its_result_line(tmp_path):
    def respond(prompt, sp):
        if "Bo is" in prompt:
            raise sgl.RequestError("prompt", "context_length_exceeded", "the prompt is too long")
        return _respond(prompt, sp)
    assert main(_files(tmp_path), backend=sgl.Runtime(engine=FakeEngine(respond=respond))) == 1
    error = _by_id(_lines(tmp_path))["b"]["error"]
    assert error == "request refused (context_length_exceeded, prompt): the prompt is too long"


def test_summary_counts_null_empty_and_absent_fields(tmp_path, capsys):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"},
                                               "age": {"type": ["integer", "null"]}}, "required": ["name"]}
    answers = {"Ann": {"name": "Ann", "tags": [], "age": None}, "Bo": {"name": " ", "tags": ["x"], "age": 7},
               "Cy": {"name": "Cy"}}
    eng = FakeEngine(respond=lambda p, sp: json.dumps(answers[_doc(p).split()[0]]))
    assert main(_files(tmp_path, schema=schema), backend=sgl.Runtime(engine=eng)) == 0
    rows = {r.split()[0]: r.split()[1:] for r in capsys.readouterr().out.splitlines()[3:6]}
    # null, empty (count, share), absent, not found in the document
    assert rows["name"] == ["0", "1", "(33%)", "0", "0"]
    assert rows["tags"] == ["0", "1", "(33%)", "1", "(33%)", "1", "(33%)"]    # Bo's "x" is not in "Bo is 7."
    assert rows["age"] == ["1", "(33%)", "0", "1", "(33%)", "0"]


# --- refused before the model loads: one line on stderr, exit 2 ----------------------------------------------------
def _refused(args, capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model" not in err and err.startswith("sglite extract: "), err
    return err


def test_unsupported_keyword_fails_fast_naming_it(tmp_path):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    args = _files(tmp_path, schema=schema) + NO_MODEL
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "sglite.extract", *args], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 2 and "'uniqueItems' at #/properties/tags" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o.jsonl").exists()
    print(f"refused in {elapsed:.1f} s")


@pytest.mark.parametrize("schema_text, says", [("{not json", "is not JSON"),
                                              ('{"type": "object", "required": "name"}', "not a valid JSON Schema")])
def test_bad_schema_fails_fast(tmp_path, capsys, schema_text, says):
    args = _files(tmp_path)
    (tmp_path / "s.json").write_text(schema_text)
    assert says in _refused(args + NO_MODEL, capsys)


def test_unwritable_output_fails_fast(tmp_path, capsys):
    args = _files(tmp_path)
    args[args.index("--output") + 1] = str(tmp_path / "no_such_dir" / "o.jsonl")
    assert "does not exist" in _refused(args + NO_MODEL, capsys)
    args[args.index("--output") + 1] = str(tmp_path)
    assert "is a directory" in _refused(args + NO_MODEL, capsys)


def test_unreachable_server_fails_fast(tmp_path, capsys):
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = _refused(_files(tmp_path) + ["--url", f"http://127.0.0.1:{port}"], capsys)
    assert "cannot reach the server" in err


def test_existing_output_needs_resume_or_overwrite(tmp_path, capsys):
    args = _files(tmp_path)
    (tmp_path / "o.jsonl").write_text('{"id": "z", "record": {}}\n')
    assert "--resume" in _refused(args + NO_MODEL, capsys)
    assert (tmp_path / "o.jsonl").read_text() == '{"id": "z", "record": {}}\n'
    eng = FakeEngine(respond=_respond)
    main(args + ["--overwrite"], backend=sgl.Runtime(engine=eng))
    assert sorted(_by_id(_lines(tmp_path))) == ["a", "b", "c"]


def test_overwrite_keeps_the_old_output_when_a_check_fails(tmp_path, capsys):
    args = _files(tmp_path, schema={"type": "object", "properties": {"a": {"$ref": "https://example.com/x.json"}}})
    (tmp_path / "o.jsonl").write_text('{"id": "z", "record": {}}\n')
    assert "'$ref' at #/properties/a" in _refused(args + ["--overwrite"] + NO_MODEL, capsys)
    assert (tmp_path / "o.jsonl").read_text() == '{"id": "z", "record": {}}\n'


def test_resume_runs_only_missing_ids_and_drops_a_cut_off_line(tmp_path, capsys):
    args = _files(tmp_path)
    (tmp_path / "o.jsonl").write_text('{"id": "b", "record": {"name": "Bo", "age": 7}}\n{"id": "a", "rec')
    eng = FakeEngine(respond=_respond)
    assert main(args + ["--resume"], backend=sgl.Runtime(engine=eng)) == 1
    lines = _lines(tmp_path)
    assert sorted(x["id"] for x in lines) == ["a", "b", "c"]
    assert sorted(_doc(c["prompt"]).split()[0] for c in eng.gen_calls()) == ["Ann", "Cy"]
    cap = capsys.readouterr()
    assert "cut-off line" in cap.err and "2/3 validated (1 from an earlier run)" in cap.out
    calls = len(eng.gen_calls())
    assert main(args + ["--resume"], backend=sgl.Runtime(engine=eng)) == 1   # nothing left: no call, no line
    assert len(eng.gen_calls()) == calls and len(_lines(tmp_path)) == 3


def test_readme_extract_files_match_the_example_program():
    """README's `sglite extract` command uses these two files: the main-job example's schema (its grounded
    fields, naming the input document) and instructions."""
    import importlib
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    sys.path.insert(0, str(examples))
    try:
        ex = importlib.import_module("financial_report_extraction")
    finally:
        sys.path.remove(str(examples))
    data = examples / "data"
    assert json.loads((data / "financial_report.schema.json").read_text()) == ex.grounded_schema()
    assert (data / "financial_report.prompt.txt").read_text().strip() == ex.INSTRUCTIONS


def test_progress_counts_prefill_tokens_then_documents(monkeypatch):
    import io

    from sglite.extract import progress
    from sglite.extract.inputs import Document
    from sglite.extract.job import JobSpec
    from sglite.lang.chat_template import ChatTemplate

    class Backend:   # the engine's counters, moved by the test
        stats = {"prefill_tokens_computed": 100, "decode_tokens": 7}

        def get_server_info(self):
            return {"stats": dict(self.stats)}

        def tokenize(self, text):
            return text.split()

        def chat_template(self):
            return ChatTemplate.chatml()

    def shown(out, text):   # wait until the bar's latest drawing holds `text`
        deadline = time.monotonic() + 10
        while text not in out.getvalue().replace("\r", "\n").rstrip().rsplit("\n", 1)[-1]:
            assert time.monotonic() < deadline, out.getvalue()[-500:]
            time.sleep(0.01)

    monkeypatch.setattr(progress, "TICK_S", 0.02)
    backend, out = Backend(), io.StringIO()
    docs = [Document(i, "one two three", f"d:{i}") for i in range(4)]
    p = progress.Progress(backend, JobSpec("Extract.", {}, "{}", 8, 0.0), docs, "", file=out, interval_s=0.01)
    p.start()
    shown(out, "0.00/28.0")   # the counters' starting values were read; the prompts hold 28 tokens
    backend.stats["prefill_tokens_computed"] += 12
    shown(out, "12.0/")                                    # prefill tokens since the start, of the prompts' total
    p.doc_done()
    backend.stats["decode_tokens"] += 30
    shown(out, "1/4")
    p.close()
    assert "prefill" in out.getvalue() and "30 tokens out" in out.getvalue()

"""`sglite extract` with a scripted engine: output lines in order, validation, summary, exit status."""
from __future__ import annotations

import json

import sglite as sgl
from sglite.extract import main

from .fake_engine import FakeEngine


def _files(tmp_path, prompt="Extract the person named in the document, with their age in years."):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "p.txt").write_text(prompt)
    docs = [{"id": "a", "text": "Ann is 31."}, {"id": "b", "text": "Bo is 7."}, {"id": "c", "text": "Cy is old."}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return ["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"),
            "--input", str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl")]


def _respond(prompt, sp):
    assert "json_schema" in sp
    doc = prompt.rsplit("User: ", 1)[-1]
    name = doc.split()[0]
    age = "".join(ch for ch in doc if ch.isdigit())
    return json.dumps({"name": name, "age": int(age)}) if age else json.dumps({"name": name, "age": "old"})


def test_extract_writes_results_and_reports_invalid(tmp_path, capsys):
    eng = FakeEngine(respond=_respond)
    rc = main(_files(tmp_path), backend=sgl.Runtime(engine=eng))
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["a", "b", "c"]
    assert lines[0] == {"id": "a", "name": "Ann", "age": 31}
    assert "schema" in lines[2]["error"]
    assert rc == 1 and "2/3 validated" in capsys.readouterr().out
    assert eng.prefill_calls(), "the shared instructions were prefilled once"


def test_extract_bad_inputs_fail_fast(tmp_path, capsys):
    args = _files(tmp_path)
    (tmp_path / "s.json").write_text("{not json")
    assert main(args, backend=sgl.Runtime(engine=FakeEngine())) == 2
    assert "s.json" in capsys.readouterr().err


def test_closed_schema_only_closes_open_objects():
    from sglite.protocol import closed_schema
    s = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}},
                                          "c": {"type": "object", "additionalProperties": True,
                                                "properties": {}}}}
    out = closed_schema(s)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"]["additionalProperties"] is True and "additionalProperties" not in s

"""`sglite extract`'s inputs: JSONL, CSV, .txt/.md files, directories and globs; ids; the errors that name
the file and line to fix."""
from __future__ import annotations

import json

import pytest

import sglite as sgl
from sglite.extract import SetupError, main
from sglite.extract.inputs import load_documents

from .fake_engine import FakeEngine


def test_jsonl_ids_come_from_the_id_field_or_the_line_number(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"key": "k1", "body": "one"}\n\n{"body": "three"}\n"plain text"\n')
    docs = load_documents([str(tmp_path / "d.jsonl")], text_field="body", id_field="key")
    assert [(d.id, d.text) for d in docs] == [("k1", "one"), (3, "three"), (4, "plain text")]


def test_csv_takes_a_text_column_and_an_id_column(tmp_path):
    (tmp_path / "d.csv").write_text('ref,report,other\nR1,"Acme, Inc. grew\nby 5%",x\n,second,y\n')
    docs = load_documents([str(tmp_path / "d.csv")], text_field="report", id_field="ref")
    assert [(d.id, d.text) for d in docs] == [("R1", "Acme, Inc. grew\nby 5%"), (2, "second")]
    with pytest.raises(SetupError, match=r"no column 'text' in the header \(ref, report, other\)"):
        load_documents([str(tmp_path / "d.csv")])


def test_text_files_by_directory_glob_or_name_have_their_file_name_as_id(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B")
    (tmp_path / "docs" / "a.txt").write_text("A")
    (tmp_path / "docs" / "skip.json").write_text("{}")
    assert [(d.id, d.text) for d in load_documents([str(tmp_path / "docs")])] == [("a.txt", "A"), ("b.md", "# B")]
    assert [d.id for d in load_documents([str(tmp_path / "docs" / "*.md")])] == ["b.md"]
    assert [d.id for d in load_documents([str(tmp_path / "docs" / "a.txt")], limit=1)] == ["a.txt"]


@pytest.mark.parametrize("content, says", [
    ('{"id": 1, "text": "x"}\n{"id": 1, "text": "y"}\n', r"duplicate document id 1 \(.*d.jsonl:1 and .*d.jsonl:2\)"),
    ('{"id": 1, "text": "x"}\n{oops\n', r"d.jsonl:2: not JSON"),
    ('{"id": 1, "txt": "x"}\n', r"d.jsonl:1: no string field 'text' \(set --text-field\)"),
])
def test_bad_jsonl_names_file_and_line(tmp_path, content, says):
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(SetupError, match=says):
        load_documents([str(tmp_path / "d.jsonl")])


def test_missing_inputs_say_so(tmp_path):
    with pytest.raises(SetupError, match="no such file or directory"):
        load_documents([str(tmp_path / "nope.jsonl")])
    with pytest.raises(SetupError, match="no files match"):
        load_documents([str(tmp_path / "*.txt")])
    with pytest.raises(SetupError, match=r"no \.txt or \.md files in this directory"):
        load_documents([str(tmp_path)])


def test_extract_over_a_directory_of_text_files(tmp_path):
    (tmp_path / "docs").mkdir()
    for name, text in [("ann.txt", "Ann is 31."), ("bo.md", "Bo is 7.")]:
        (tmp_path / "docs" / name).write_text(text)
    (tmp_path / "s.json").write_text(json.dumps({"type": "object", "properties": {"name": {"type": "string"}}}))
    (tmp_path / "p.txt").write_text("Name the person in this document: {text}")
    eng = FakeEngine(respond=lambda p, sp: json.dumps({"name": p.split("document: ")[1].split()[0]}))
    rc = main(["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"), "--input",
               str(tmp_path / "docs"), "--output", str(tmp_path / "o.jsonl")], backend=sgl.Runtime(engine=eng))
    lines = {x["id"]: x["record"] for x in map(json.loads, (tmp_path / "o.jsonl").read_text().splitlines())}
    assert rc == 0 and lines == {"ann.txt": {"name": "Ann"}, "bo.md": {"name": "Bo"}}

"""`--grammar-compile-budget` of `sglite extract` and `sglite batch`: the engine each builds gets it (a budget too
small for any compile refuses the constrained requests and answers the others), an unusable value is refused by
argparse, and with --url (where the server's own budget applies) it is an error before anything runs."""
from __future__ import annotations

import json

import pytest

import sglite.runtime.engine.engine as engine_module
from sglite.extract import main as extract_main
from sglite.extract.batch import main as batch_main

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"]}


@pytest.fixture
def built(monkeypatch):
    """The engines the CLIs build, on the tiny random-weight model; their options recorded."""
    from sglite.runtime.testing import load_tiny_model
    real, made = engine_module.Engine, []

    def tiny(model=None, **options):
        options.pop("weights", None)
        eng = real(load_tiny_model(max_context=512), max_running_requests=8, max_total_tokens=4096, **options)
        made.append(eng)
        return eng
    monkeypatch.setattr(engine_module, "Engine", tiny)
    yield made
    for eng in made:
        eng.shutdown()


def _batch_file(tmp_path):
    rows = [{"custom_id": "json", "method": "POST", "url": "/v1/chat/completions", "body": {
                "model": "m", "messages": [{"role": "user", "content": "Ann is here."}], "max_tokens": 12,
                "temperature": 0, "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "p", "schema": SCHEMA}}}},
            {"custom_id": "text", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _lines(path):
    return {row["custom_id"]: row for row in map(json.loads, path.read_text().splitlines())}


def test_batch_passes_the_budget_to_its_engine(tmp_path, built, capsys):
    inp = _batch_file(tmp_path)
    assert batch_main([str(inp), "-o", str(tmp_path / "a.jsonl"), "--device", "cpu",
                       "--grammar-compile-budget", "1e-9"]) == 1
    assert built[-1].config.grammar_compile_budget_s == 1e-9
    out = _lines(tmp_path / "a.jsonl")
    assert out["json"]["response"]["status_code"] == 400
    assert "budget" in json.dumps(out["json"]["response"]["body"]).lower()
    assert out["text"]["response"]["status_code"] == 200
    # the default budget compiles the same schema
    assert batch_main([str(inp), "-o", str(tmp_path / "b.jsonl"), "--device", "cpu"]) == 0
    assert built[-1].config.grammar_compile_budget_s == 4.0
    assert _lines(tmp_path / "b.jsonl")["json"]["response"]["status_code"] == 200


def test_extract_passes_the_budget_to_its_engine(tmp_path, built, capsys):
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "p.txt").write_text("Extract the name.")
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "a", "text": "Ann is here."}) + "\n")
    args = ["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"), "--input",
            str(tmp_path / "d.jsonl"), "--device", "cpu", "--max-tokens", "16", "--no-spans"]
    assert extract_main(args + ["--output", str(tmp_path / "a.jsonl"), "--grammar-compile-budget", "1e-9"]) == 1
    assert built[-1].config.grammar_compile_budget_s == 1e-9
    line = json.loads((tmp_path / "a.jsonl").read_text())
    assert line["record"] is None and "budget" in line["error"].lower()
    extract_main(args + ["--output", str(tmp_path / "b.jsonl")])
    assert built[-1].config.grammar_compile_budget_s == 4.0
    assert "budget" not in (tmp_path / "b.jsonl").read_text().lower()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_a_budget_that_is_not_seconds_is_refused(tmp_path, value, capsys):
    with pytest.raises(SystemExit) as e:
        batch_main([str(_batch_file(tmp_path)), "-o", str(tmp_path / "o.jsonl"), "--grammar-compile-budget", value])
    assert e.value.code == 2
    assert "--grammar-compile-budget" in capsys.readouterr().err


def test_the_budget_with_url_is_an_error_naming_the_servers_flag(tmp_path, capsys):
    assert batch_main([str(_batch_file(tmp_path)), "-o", str(tmp_path / "o.jsonl"), "--url", "http://127.0.0.1:9",
                       "--grammar-compile-budget", "2"]) == 2
    err = capsys.readouterr().err
    assert "--grammar-compile-budget" in err and "server" in err
    assert not (tmp_path / "o.jsonl").exists()

"""The examples' programs end to end on the real SmolLM2 model (slow: run with -m slow)."""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

import sglite as sgl

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module")
def rt():
    runtime = sgl.Runtime(max_total_tokens=32768)
    yield runtime
    runtime.shutdown()


def test_financial_extraction_outputs_validate(rt, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    ex = _example("financial_report_extraction")
    docs = ex.load_reports(EXAMPLES / "data" / "reports.jsonl")
    docs = [docs[0], docs[2], docs[12], docs[15]]     # English and Chinese, a loss-making company
    job = ex.run_job(docs, rt, progress_bar=False)
    schema = ex.FinancialReport.model_json_schema()
    from sglite.runtime.constrained.automata.grounding import written_numbers
    for d, r in zip(docs, job["results"]):
        assert r["valid"], r
        jsonschema.validate(r["record"], schema)
        # the grounded fields come from the report: a verbatim span, a number it writes
        assert r["record"]["company"] in d["text"]
        assert any(r["record"]["eps"] == float(w) for w in written_numbers(d["text"])), (r["record"], d["text"])
    assert job["usage"]["cache_hit_rate"] > 0.5
    ex.write_results(job["results"], tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == [d["id"] for d in docs]
    for line, r in zip(lines, job["results"]):
        assert set(line) == {"id", "record", "confidence"} and line["record"] == r["record"]   # id not in the record
        assert set(line["confidence"]) >= {"/company", "/eps"} and all(0 <= p <= 1 for p in line["confidence"].values())


def test_select_classification(rt):
    ex = _example("select_classification")
    states = ex.classify.run_batch([{"review": "Absolutely fantastic, I love it."}], backend=rt)
    assert states[0]["label"] == "positive"


def test_fork_analyses(rt):
    ex = _example("fork_parallel_analyses")
    s = ex.analyse.run(document=ex.DOC, backend=rt, temperature=0, max_new_tokens=24)
    assert s.error() is None and len(s["analysis"]) == 3 and all(a.strip() for a in s["analysis"])


def test_regex_constraints_hold(rt):
    ex = _example("regex_constrained")
    s = ex.contact_card.run(text="Bob, 41, bob@mail.com, 212-555-0100.", backend=rt, temperature=0)
    assert s.error() is None
    assert re.fullmatch(r"[0-9]{3}-[0-9]{3}-[0-9]{4}", s["phone"])
    assert re.fullmatch(r"[a-z0-9._]{1,20}@[a-z0-9]{1,15}\.(com|org|net)", s["email"])
    assert re.fullmatch(r"[-+]?[0-9]+", s["age"]) and s["customer"] in ("True", "False")


def test_extract_cli_on_real_model(rt, tmp_path):
    from sglite.extract import main
    schema = {"type": "object", "properties": {"company": {"type": "string", "maxLength": 40},
                                               "revenue_millions": {"type": "number"}},
              "required": ["company", "revenue_millions"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "p.txt").write_text("Extract the company name and its revenue in millions as JSON.")
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": 1, "text": "Acme Corp had revenue of $12.5 million."}) + "\n")
    rc = main(["--schema", str(tmp_path / "s.json"), "--prompt", str(tmp_path / "p.txt"), "--input",
               str(tmp_path / "d.jsonl"), "--output", str(tmp_path / "o.jsonl"), "--max-tokens", "96"], backend=rt)
    assert "error" not in json.loads((tmp_path / "o.jsonl").read_text()), (tmp_path / "o.jsonl").read_text()
    assert rc == 0

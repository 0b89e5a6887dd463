"""Field confidence: each value's probability under the grammar, from the output's constrained logprobs; eval
by confidence bucket; the review page brings the doubtful values first."""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess

import pytest

from sglite.cli import main as sglite_main
from sglite.extract.confidence import BUCKET_NAMES, bucket, field_confidence, value_ranges
from sglite.extract.evaluation import evaluate

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_value_ranges_point_at_every_scalar():
    text = '{"a": 12, "b/c": ["x", null, {"d": true}], "e": {}, "f": "q\\"r"}'
    got = {p: (text[s:e], closed) for p, s, e, closed in value_ranges(text)}
    assert got == {"/a": ("12", False), "/b~1c/0": ('"x"', True), "/b~1c/1": ("null", False),
                   "/b~1c/2/d": ("true", False), "/f": ('"q\\"r"', True)}
    with pytest.raises(ValueError):
        list(value_ranges('{"a" 1}'))


def test_a_value_scores_the_product_of_its_tokens_and_a_number_its_end():
    text = '{"n": 125, "s": "ab"}'
    entries = [(-0.1, 0, '{"n": '), (-0.2, 0, "12"), (-0.3, 0, "5"), (-0.4, 0, ', "s": "'), (-0.5, 0, "ab"),
               (0.0, 0, '"}')]
    conf = field_confidence(text, entries)
    # the number: "12", "5" and the token after it (which ends it); the string: its quotes and text
    assert conf["/n"] == pytest.approx(math.exp(-0.2 - 0.3 - 0.4), abs=1e-4)
    assert conf["/s"] == pytest.approx(math.exp(-0.4 - 0.5 - 0.0), abs=1e-4)
    assert field_confidence(text, entries[:-1]) == {}                     # texts that do not add up: none
    assert field_confidence(text, [(-0.1, 0, "x" * len(text))]) == {}


def test_buckets():
    assert [bucket(p) for p in (0.0, 0.49, 0.5, 0.8, 0.949, 0.95, 1.0)] == [
        "<0.5", "<0.5", "0.5-0.8", "0.8-0.95", "0.8-0.95", ">=0.95", ">=0.95"]
    assert BUCKET_NAMES == ("<0.5", "0.5-0.8", "0.8-0.95", ">=0.95")


def _lines():
    return {"1": {"id": 1, "record": {"a": 1, "b": "x"}, "confidence": {"/a": 0.99, "/b": 0.2}},
            "2": {"id": 2, "record": {"a": 5, "b": "y"}, "confidence": {"/a": 0.6, "/b": 0.97}},
            "3": {"id": 3, "record": {"a": 2, "b": "z"}}}


def test_evaluation_counts_right_values_by_confidence():
    gold = {"1": {"id": 1, "a": 1, "b": "no"}, "2": {"id": 2, "a": 2, "b": "y"}, "3": {"id": 3, "a": 2, "b": "z"}}
    ev = evaluate(_lines(), gold)
    assert ev.by_confidence() == {"<0.5": (0, 1), "0.5-0.8": (0, 1), "0.8-0.95": (0, 0), ">=0.95": (2, 2)}
    assert "0/1 (0%)" in ev.confidence_table()
    plain = evaluate({k: {kk: vv for kk, vv in v.items() if kk != "confidence"} for k, v in _lines().items()}, gold)
    assert plain.confidence_table() == ""


def test_eval_cli_prints_the_buckets(tmp_path, capsys):
    out, gold = tmp_path / "out.jsonl", tmp_path / "gold.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in _lines().values()))
    gold.write_text("".join(json.dumps({"id": i, "a": 1, "b": "x"}) + "\n" for i in (1, 2, 3)))
    assert sglite_main(["eval", str(out), "--gold", str(gold)]) == 0
    text = capsys.readouterr().out
    assert "by the model's confidence" in text
    assert re.search(r">=0\.95\s+2\s+1/2", text)


def test_extract_lines_carry_confidence_on_the_runtime(machine):
    from sglite.backend.runtime import Runtime
    from sglite.extract import extract

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "n": {"type": "integer"}}, "required": ["name", "n"]}
    rt = Runtime()
    try:
        lines = list(extract(["Ann has 3 cats.", "Bo has 7."], schema, "Extract.", backend=rt, max_tokens=60))
        off = list(extract(["Ann has 3 cats."], schema, "Extract.", backend=rt, max_tokens=60, confidence=False))
    finally:
        rt.shutdown()
    for line in lines:
        assert set(line["confidence"]) == {"/name", "/n"}
        assert all(0.0 <= p <= 1.0 for p in line["confidence"].values())
    assert "confidence" not in off[0] and off[0]["record"] == next(x for x in lines if x["id"] == 0)["record"]


def test_a_backend_without_constrained_logprobs_gets_none_and_openai_refuses_the_option():
    from sglite.backend.openai import OpenAI
    from sglite.extract.api import Extraction, job_spec
    from sglite.lang.sampling import GenParams
    from sglite.protocol import SamplingParams

    class NoLogprobs:
        constrained_logprobs = False

    spec = job_spec({"type": "object"}, "x")
    assert Extraction(spec, NoLogprobs()).spec.confidence is False
    backend = OpenAI.__new__(OpenAI)
    with pytest.raises(ValueError, match="constrained logprobs"):
        backend._params(GenParams(SamplingParams(), return_constrained_logprob=True))


@pytest.mark.skipif(BROWSER is None, reason="no Chromium to render the page")
def test_review_page_brings_doubtful_values_first(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": f"Doc {i}: a is {i}, b is x."}) + "\n" for i in (1, 2, 3)))
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in reversed(list(_lines().values()))))   # 3, 2, 1
    page = tmp_path / "review.html"
    assert sglite_main(["view", str(out), "--input", str(docs), "-o", str(page)]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
    dom = subprocess.run([BROWSER, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    listed = re.findall(r'<div data-i="(\d)" class="[^"]*">(\d)', dom)
    # written 3, 2, 1; doc 1 has a doubtful value (0.2), doc 2 none (lowest 0.6), doc 3 no confidence
    assert [doc_id for _, doc_id in listed] == ["1", "2", "3"]
    # the selected record (doc 1) lists its least confident field first, coloured as doubtful
    rows = re.findall(r'<tr data-ptr="([^"]+)">.*?</tr>', dom)
    assert rows[:2] == ["/b", "/a"]
    assert re.search(r'<td class="num c-low">0\.20</td>', dom) and re.search(r'<td class="num c-high">0\.99', dom)

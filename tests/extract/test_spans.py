"""Source spans: each way a value is found, offsets that hold the value, not_found for what the text lacks, and
every gold value of the bundled reports located."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglite.extract.spans import find_spans, not_found_fields, span_text

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
TEXT = ("Northwind Robotics Inc. reported results for the third quarter of fiscal 2024. Revenue rose 18% to "
        "$412.6 million. Net loss was (3.2) million; orders reached 12,500,000 units, or $1.2 billion. "
        "The  European   business grew.")


def _one(value, text=TEXT):
    where = find_spans({"v": value}, text)["/v"]
    return where["match"], span_text(text, where)


@pytest.mark.parametrize("value, match, covered", [
    ("Northwind Robotics Inc.", "exact", "Northwind Robotics Inc."),
    (412.6, "exact", "412.6"),
    (18.0, "exact", "18"),                                  # a whole float as people write it
    ("northwind robotics INC.", "normalized", "Northwind Robotics Inc."),
    ("the european business", "normalized", "The  European   business"),   # case and runs of spaces
    (-3.2, "normalized", "(3.2)"),                          # parentheses: negative
    (12.5, "normalized", "12,500,000"),                     # read in millions
    (1200.0, "normalized", "1.2 billion"),                  # a scale word, in millions
    ("USD", "normalized", "$"),                             # a currency code by its symbol
    ("Q3 FY2024", "normalized", "third quarter of fiscal 2024"),
    ("Northwnd Robotics Inc", "fuzzy", "Northwind Robotics Inc"),
    (412.63, "not_found", None),
    ("Acme Widgets Corp", "not_found", None),
    ("EUR", "not_found", None),                             # not inside "European"
    ("Q4 2024", "not_found", None),
])
def test_each_way_a_value_is_found(value, match, covered):
    assert _one(value) == (match, covered)


def test_a_currency_symbol_is_not_found_inside_another_currencys():
    assert _one("USD", "revenue of A$3.6 billion")[0] == "not_found"       # the Australian dollar
    assert _one("AUD", "revenue of A$3.6 billion") == ("normalized", "A$")
    assert _one("USD", "revenue of US$3.6 billion") == ("normalized", "$")   # USD's own "US$"
    assert _one("USD", "HK$2 and then $5") == ("normalized", "$")


def test_a_number_is_not_found_inside_a_longer_one():
    assert _one(2.6, "revenue of 412.6 million")[0] == "not_found"
    assert _one(41, "revenue of 412.6 million")[0] == "not_found"


def test_pointers_cover_nested_values_and_skip_what_has_no_text():
    record = {"a": {"b/c": "Northwind"}, "risks": ["component shortages", "fraud"], "n": None, "ok": True, "e": " "}
    spans = find_spans(record, TEXT + " Component shortages hurt.")
    assert set(spans) == {"/a/b~1c", "/risks/0", "/risks/1"}
    assert spans["/risks/0"]["match"] == "normalized" and spans["/risks/1"]["match"] == "not_found"
    assert not_found_fields(spans) == ["risks"]


@pytest.mark.parametrize("name", ["reports", "synthetic_reports"])
def test_gold_values_of_the_bundled_reports_are_located(name):
    docs = {json.loads(x)["id"]: json.loads(x)["text"] for x in open(DATA / f"{name}.jsonl", encoding="utf-8")}
    found = total = 0
    for line in open(DATA / f"{name}_gold.jsonl", encoding="utf-8"):
        gold = json.loads(line)
        record = {k: v for k, v in gold.items() if k not in ("id", "note") and v is not None}
        for pointer, where in find_spans(record, docs[gold["id"]]).items():
            total += 1
            if where["match"] == "not_found":
                continue
            found += 1
            covered = span_text(docs[gold["id"]], where)
            value = record[pointer[1:]]
            if isinstance(value, (int, float)) and where["match"] == "exact":
                assert float(covered) == value
    assert found / total >= 0.95, f"{found}/{total}"

"""Term fields (sglite/document_terms.py, x-sglite-term): the periods and currencies a document names, each in
one spelling, become the field's enum when the program resolves its sources."""
from __future__ import annotations

import pytest

from sglite.document_terms import document_currencies, document_periods
from sglite.grounding import resolve_sources, without_sources
from sglite.protocol import RequestError


@pytest.mark.parametrize("text,periods", [
    ("results for the third quarter of fiscal 2024, against Q3 2023", ["Q3 2024", "Q3 2023"]),
    ("Pinecrest Software Group, fiscal 2025 Q2 (quarter ended October 31, 2024)", ["Q2 2025"]),
    ("six months ended June 30, 2024 (H1 2024); first half of 2023", ["H1 2024", "H1 2023"]),
    ("Half-year ended 31 December 2024 (H1 FY2025).", ["H1 2025"]),
    ("the year ended 31 December 2023 (FY2023); full-year 2024 outlook; FY25", ["FY2023", "FY2024", "FY2025"]),
    ("Results for 2Q24 and 4Q 2023; fourth-quarter 2024", ["Q2 2024", "Q4 2023", "Q4 2024"]),
    ("华辰新能源2024年第三季度报告，2023年年度，2024年半年度，2025年一季度", ["Q3 2024", "FY2023", "H1 2024", "Q1 2025"]),
    ("premier semestre 2024; im Geschäftsjahr 2023; tercer trimestre de 2024; 2024年度第2四半期",
     ["H1 2024", "FY2023", "Q3 2024", "Q2 2024"]),
    ("Revenue rose 12% in 2024 to $5 million.", []),                     # a bare year is no period
])
def test_periods_a_document_names(text, periods):
    assert document_periods(text) == periods


@pytest.mark.parametrize("text,codes", [
    ("Revenue was CAD 1,476 million; net profit $3 million", ["CAD"]),     # `$`: USD only where no dollar is named
    ("Revenue was EUR 1,476 million; net profit $3 million", ["EUR", "USD"]),
    ("Revenue of $88.2 million", ["USD"]),
    ("Revenue of US$8.28 billion", ["USD"]),                                  # not S$ (SGD) inside US$
    ("(in millions of Canadian dollars) revenue of C$5; A$3 in Sydney", ["CAD", "AUD"]),
    ("海澜汽车（港元）公布：收入为港币185.6亿元", ["HKD"]),                      # 元 is not CNY beside 港元
    ("营业收入58.62亿元人民币", ["CNY"]), ("营业收入58.62亿元", ["CNY"]),
    ("Total revenue reached ¥156974.7 million", ["JPY"]), ("£5.56 billion", ["GBP"]),
    ("Revenue grew 12%.", []),
])
def test_currencies_a_document_names(text, codes):
    assert document_currencies(text) == codes


SCHEMA = {"type": "object", "properties": {
    "period": {"type": "string", "x-sglite-term": {"source": "doc", "kind": "period", "fallback": "free"}},
    "currency": {"type": "string", "enum": ["USD", "EUR"], "x-sglite-term": {"source": "doc", "kind": "currency"}}}}


def test_a_term_field_becomes_an_enum_of_the_terms():
    out = resolve_sources(SCHEMA, {"doc": "Q1 2025 update: revenue of EUR 5 million (Q1 2024: GBP 4 million)"})
    assert out["properties"]["period"] == {"type": "string", "enum": ["Q1 2025", "Q1 2024"]}
    assert out["properties"]["currency"] == {"type": "string", "enum": ["EUR"]}      # within the schema's own enum
    out = resolve_sources(SCHEMA, {"doc": "revenue of $5 million"})
    assert out["properties"]["period"] == {"type": "string"}                         # fallback: free


@pytest.mark.parametrize("doc,value,match", [
    ("revenue of 5 million", None, "x-sglite-term at #/properties/currency: the source names no currency"),
    ("revenue of GBP 5", None, "names no currency"),                      # GBP is not in the schema's enum
    ("USD 5", {"source": "doc", "kind": "colour"}, "must be"),
])
def test_bad_term_fields_are_refused_by_name(doc, value, match):
    schema = SCHEMA if value is None else {"type": "object", "properties": {
        "currency": {"type": "string", "x-sglite-term": value}}}
    with pytest.raises(RequestError, match=match):
        resolve_sources(schema, {"doc": doc})
    if value is not None:
        with pytest.raises(RequestError, match=match):          # a job's preflight, before any document
            without_sources(schema, {"doc"})

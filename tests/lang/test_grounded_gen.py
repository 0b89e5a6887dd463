"""gen(json_schema=..., sources=...): grounded fields name a source text, the program gives it; on the tiny
model every value of a grounded field is a verbatim span / a written number of that text; bad sources fail
in gen(), before any work, naming the field."""
from __future__ import annotations

import json

import pytest

import sglite as sgl
from sglite.grounding import resolve_sources
from sglite.protocol import RequestError

REPORT = "Acme Widgets Ltd. posted revenue of 512.3 million and EPS of 0.77 in FY2024."
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["company", "eps"],
          "properties": {"company": {"type": "string", "maxLength": 40, "x-sglite-span": "report"},
                         "eps": {"type": "number", "x-sglite-number": "report"}}}


def test_grounded_values_come_from_the_source(tiny_runtime):
    @sgl.function
    def prog(s, report):
        s += "Report: " + report + "\nJSON: "
        s += sgl.gen("r", max_tokens=64, json_schema=SCHEMA, sources={"report": report}, temperature=1.0)

    finished = 0
    for seed in range(4):
        state = prog.run(report=REPORT, backend=tiny_runtime, seed=seed)
        if state.get_meta_info("r")["finish_reason"]["type"] != "stop":
            continue
        finished += 1
        rec = json.loads(state["r"])
        assert rec["company"] and rec["company"] in REPORT
        assert str(rec["eps"]) in ("512.3", "0.77")
    assert finished      # (the value closes within the budget: closing at the token budget, parser/closing.py)


def test_names_are_resolved_into_texts():
    out = resolve_sources(SCHEMA, {"report": REPORT})
    assert out["properties"]["company"]["x-sglite-span"] == {"text": REPORT}
    assert SCHEMA["properties"]["company"]["x-sglite-span"] == "report"          # the input is left alone
    scaled = {"type": "number", "x-sglite-number": {"source": "report", "scales": [1, 1000]}}
    assert resolve_sources(scaled, {"report": "1.2"})["x-sglite-number"] == {"text": "1.2", "scales": [1, 1000]}


@pytest.mark.parametrize("sources,match", [
    ({"doc": REPORT}, "x-sglite-span at #/properties/company names the source 'report'"),
    ({"report": "   "}, "source 'report' is empty"),
    ({"report": 3}, "sources must map names to texts"),
])
def test_bad_sources_fail_in_gen(sources, match):
    with pytest.raises(RequestError, match=match):
        sgl.gen("r", json_schema=SCHEMA, sources=sources)


def test_sources_need_a_schema_that_uses_them():
    with pytest.raises(RequestError, match="no json_schema"):
        sgl.gen("r", sources={"report": REPORT})
    with pytest.raises(RequestError, match="no x-sglite-span, x-sglite-number or x-sglite-term"):
        sgl.gen("r", json_schema={"type": "string"}, sources={"report": REPORT})


def test_servers_that_would_ignore_grounding_refuse_it():
    from sglite.backend.openai import OpenAI
    text = json.dumps(resolve_sources(SCHEMA, {"report": REPORT}))
    for server in ("openai", "vllm", "sglang"):
        backend = OpenAI("m", base_url="http://127.0.0.1:9/v1", server=server)
        with pytest.raises(ValueError, match="does not enforce grounded fields"):
            backend._constraint("json_schema", text)
    sent = OpenAI("m", base_url="http://127.0.0.1:9/v1", server="sglite")._constraint("json_schema", text)
    assert json.loads(sent["json_schema"])["properties"]["company"]["x-sglite-span"] == {"text": REPORT}


def test_a_job_checks_its_grounded_schema_before_any_document():
    from sglite.extract.preflight import check_enforceable
    from sglite.extract.setup_error import SetupError
    ok = {"type": "object", "properties": {"c": {"type": "string", "x-sglite-span": "document"}}}
    check_enforceable(json.dumps(ok), "schema")
    bad = {"type": "object", "properties": {"c": {"type": "string", "x-sglite-span": "report"}}}
    with pytest.raises(SetupError, match="x-sglite-span at #/properties/c names the source 'report'"):
        check_enforceable(json.dumps(bad), "schema")
    wrong = {"type": "object", "properties": {"c": {"type": "boolean", "x-sglite-number": "document"}}}
    with pytest.raises(SetupError, match="only for a schema of type number or integer"):
        check_enforceable(json.dumps(wrong), "schema")

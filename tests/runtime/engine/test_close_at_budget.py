"""close_at_budget: a JSON-schema output whose token budget runs out mid-value spends its last tokens on the
grammar's shortest completion and ends valid (finish_reason stop, meta_info closed_at_budget); switched off, the
same request ends at `length`."""
from __future__ import annotations

import json

import jsonschema

SCHEMA = {"type": "object", "required": ["title", "items"], "properties": {
    "title": {"type": "string"}, "items": {"type": "array", "items": {"type": "string"}}}}


def test_budget_closes_the_json(make_engine):
    e = make_engine()
    params = {"temperature": 1.0, "max_new_tokens": 24, "json_schema": json.dumps(SCHEMA)}
    outs = [e.generate("write", {**params, "seed": s}) for s in range(6)]
    for out in outs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "stop", out
        assert meta["completion_tokens"] <= 24
        jsonschema.validate(json.loads(out["text"]), SCHEMA)
    # the tiny random model rarely ends a string by itself: most of these ran into the budget
    assert sum(o["meta_info"]["closed_at_budget"] for o in outs) >= 3
    off = [e.generate("write", {**params, "seed": s, "close_at_budget": False}) for s in range(6)]
    assert not any(o["meta_info"]["closed_at_budget"] for o in off)
    assert any(o["meta_info"]["finish_reason"]["type"] == "length" for o in off)
    # greedy stays deterministic with closing
    a, b = (e.generate("write", {**params, "temperature": 0}) for _ in range(2))
    assert a["output_ids"] == b["output_ids"]


def test_unconstrained_requests_never_close(make_engine):
    e = make_engine()
    out = e.generate("write", {"temperature": 1.0, "seed": 0, "max_new_tokens": 8, "ignore_eos": True})
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert out["meta_info"]["closed_at_budget"] is False

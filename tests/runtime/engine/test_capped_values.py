"""meta_info["capped_values"]: a value closed at a generation cap is reported, and the finish reason stays `stop`
(the JSON ended) where running out of tokens says `length`."""
from __future__ import annotations

import json

from sglite.runtime.constrained.ir.generation_caps import GenerationCaps


def _with_caps(engine, caps: GenerationCaps) -> None:
    """Makes the engine's grammar compiler apply `caps` instead of the engine's defaults (GENERATION_CAPS), whatever
    the engine passes."""
    compiler = engine.core.grammar._get_compiler()
    plain = compiler.compile_json_schema
    compiler.compile_json_schema = lambda *a, **k: plain(*a, **{**k, "caps": caps})


def test_capped_values_reported(make_engine):
    e = make_engine()
    _with_caps(e, GenerationCaps(max_string_chars=3))
    schema = json.dumps({"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 4})
    outs = e.generate(["a", "b", "c"], {"temperature": 1.0, "seed": 0, "max_new_tokens": 64, "json_schema": schema})
    for out in outs:
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "stop", out
        value = json.loads(out["text"])
        assert all(len(s) <= 3 for s in value)
        assert meta["capped_values"] == sum(len(s) == 3 for s in value), out
    assert any(o["meta_info"]["capped_values"] for o in outs)
    short = e.generate("a", {"temperature": 0, "max_new_tokens": 3, "json_schema": schema})
    assert short["meta_info"]["finish_reason"]["type"] == "length"
    plain = e.generate("a", {"temperature": 0, "max_new_tokens": 3})
    assert plain["meta_info"]["capped_values"] == 0

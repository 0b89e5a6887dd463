"""End to end with the real SmolLM2-135M (slow): fifty JSON-schema generations from varied schemas, batched in
one engine with jump-forward on, all end on their own ("stop", not "length") and validate with jsonschema. The
reduced format runs every other schema (25): on an AVX2-only CPU, which emulates bf16, all fifty took 190 s of
CI's time."""
from __future__ import annotations

import json

import pytest

from .json_cases import CASES

pytestmark = pytest.mark.slow


def chat_prompt(tok, request: str, schema: dict) -> str:
    return tok.apply_chat_template([
        {"role": "system", "content": "Reply with one JSON object that matches this JSON Schema: " + json.dumps(schema)},
        {"role": "user", "content": request}])


@pytest.fixture(scope="module", params=["fp32", "int4+bf16"])
def model_in_format(request, real_model):
    """The reference model, and the reduced format 'auto' picks on AVX-512 machines (constrained outputs must
    stay 100% valid and finish in every format)."""
    if request.param == "fp32":
        return real_model, CASES
    from sglite.runtime.model import load_model
    return load_model(weights=request.param), CASES[::2]


def test_fifty_schemas_all_validate(model_in_format):
    import jsonschema

    from sglite.runtime.engine import Engine

    real_model, cases = model_in_format
    tok = real_model.tokenizer
    prompts = [chat_prompt(tok, request, schema) for _, request, schema in cases]
    params = [{"temperature": 0, "max_new_tokens": 256, "json_schema": schema} for _, _, schema in cases]
    with Engine(real_model) as engine:
        outs = engine.generate(prompts, params)
    failures = []
    for (name, _, schema), out in zip(cases, outs):
        reason = out["meta_info"]["finish_reason"]["type"]
        try:
            jsonschema.validate(json.loads(out["text"]), schema)
            error = None if reason == "stop" else f"finished by {reason}"
        except (json.JSONDecodeError, jsonschema.ValidationError) as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        if error:
            failures.append(f"{name}: {error}: {out['text'][:120]!r}")
    assert not failures, "\n".join(failures)
    assert len(outs) == len(cases) >= 25


def test_runaway_value_closes_at_budget(real_model):
    """A schema on which the real model writes a digit string it never ends (a MaskBench dev schema, bench/
    finish_rate.py): with a small budget the output still ends, valid, its last tokens spent on the shortest
    completion; with close_at_budget off it runs to `length`."""
    import jsonschema

    from sglite.runtime.engine import Engine

    schema = {"type": "object", "properties": {"id": {"type": "string"}, "version": {"type": "string"},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["id", "version", "tags"]}
    prompt = chat_prompt(real_model.tokenizer, "Write one realistic instance; make the id a long run of digits.",
                         schema)
    params = {"temperature": 0, "max_new_tokens": 24, "json_schema": json.dumps(schema)}
    with Engine(real_model) as engine:
        out = engine.generate(prompt, params)
        off = engine.generate(prompt, {**params, "close_at_budget": False})
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "stop" and meta["completion_tokens"] <= 24, out
    jsonschema.validate(json.loads(out["text"]), schema)
    if off["meta_info"]["finish_reason"]["type"] == "length":     # the model did not end in time by itself
        assert meta["closed_at_budget"], out
        assert out["text"].startswith(off["text"][:8])            # the same start, then closed

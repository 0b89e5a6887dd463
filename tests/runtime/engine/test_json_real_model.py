"""End to end with the real SmolLM2-135M (slow): fifty JSON-schema generations from varied schemas, batched in
one engine with jump-forward on, all end on their own ("stop", not "length") and validate with jsonschema."""
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
        return real_model
    from sglite.runtime.model import load_model
    return load_model(weights=request.param)


def test_fifty_schemas_all_validate(model_in_format):
    import jsonschema

    from sglite.runtime.engine import Engine

    real_model = model_in_format

    tok = real_model.tokenizer
    prompts = [chat_prompt(tok, request, schema) for _, request, schema in CASES]
    params = [{"temperature": 0, "max_new_tokens": 256, "json_schema": schema} for _, _, schema in CASES]
    with Engine(real_model) as engine:
        outs = engine.generate(prompts, params)
    failures = []
    for (name, _, schema), out in zip(CASES, outs):
        reason = out["meta_info"]["finish_reason"]["type"]
        try:
            jsonschema.validate(json.loads(out["text"]), schema)
            error = None if reason == "stop" else f"finished by {reason}"
        except (json.JSONDecodeError, jsonschema.ValidationError) as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        if error:
            failures.append(f"{name}: {error}: {out['text'][:120]!r}")
    assert not failures, "\n".join(failures)
    assert len(outs) == 50

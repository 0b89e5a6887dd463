"""The metaschema check (schema/metaschema.py) against jsonschema's own `check_schema`: the same verdict and the
same first error for every schema, from a draft 2020-12 metaschema merged into one schema without dynamic
references."""
import json

import jsonschema
import pytest

from sglite.runtime.constrained import GrammarError
from sglite.runtime.constrained.schema.metaschema import _metaschema_validator, check_schema

BAD = [{"type": "strin"}, {"minLength": -1}, {"properties": []}, {"required": [1]}, {"$ref": 5}, {"items": 3},
       {"pattern": "("}, {"dependencies": {"a": [1]}}, {"definitions": {"a": 3}},
       {"properties": {"a": {"type": 3}}}, {"$defs": {"x": {"enum": 3}}}, {"anyOf": []},
       {"prefixItems": [{"maxItems": "2"}]}, {"unevaluatedProperties": 1}, {"dependentRequired": {"a": ["b", "b"]}},
       {"$schema": "http://json-schema.org/draft-07/schema#", "items": [3]},
       {"$schema": "http://json-schema.org/draft-04/schema#", "exclusiveMinimum": 3}, {"format": 3},
       {"$anchor": "1x"}, {"contentMediaType": 1}, {"deprecated": "yes"}, {"if": 3},
       {"not": {"not": {"multipleOf": 0}}}, {"items": {"items": {"properties": {"a": {"minItems": 1.5}}}}}]


def _reference(schema) -> str | None:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator) \
        if isinstance(schema, dict) else jsonschema.Draft202012Validator
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        return "invalid JSON Schema at #" + "".join(f"/{p}" for p in e.path) + ": " + e.message
    return None


def _ours(schema) -> str | None:
    try:
        check_schema(schema)
    except GrammarError as e:
        return str(e)
    return None


def test_2020_12_is_checked_without_dynamic_references():
    meta = _metaschema_validator(jsonschema.Draft202012Validator).schema
    assert meta is not jsonschema.Draft202012Validator.META_SCHEMA          # merged, not the fallback
    text = json.dumps(meta)
    assert '"$dynamicRef": "' not in text and "allOf" not in json.dumps(meta.get("properties", {}).get("$ref"))
    assert {"properties", "prefixItems", "unevaluatedProperties", "minLength", "format", "contentMediaType",
            "dependencies"} <= set(meta["properties"])


@pytest.mark.parametrize("schema", BAD, ids=lambda s: json.dumps(s)[:40])
def test_bad_schemas_get_the_reference_error(schema):
    expected = _reference(schema)
    assert expected is not None
    assert _ours(schema) == expected


def test_the_suites_schemas_get_the_reference_verdict(shared_data):
    schemas = []
    for path in sorted((shared_data / "json-schema-test-suite" / "tests" / "draft2020-12").rglob("*.json")):
        schemas += [case["schema"] for case in json.loads(path.read_text())]
    for path in sorted((shared_data / "maskbench").glob("*.json"))[::25]:
        schemas.append(json.loads(path.read_text())["schema"])
    assert len(schemas) > 700
    differ = [json.dumps(s)[:80] for s in schemas if _ours(s) != _reference(s)]
    assert not differ, differ[:5]
